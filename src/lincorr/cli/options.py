"""What the commands share: each common option defined once, and the steps every handler takes with them.

Options are added by functions rather than shared parent parsers: argparse shares a parent's
action objects between commands, so one command's default would leak into another's.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from lincorr import strict_json
from lincorr.cli.listing import HELP
from lincorr.cli.model_errors import model_load_errors
from lincorr.cli.spellings import MLFLOW_VARIABLE, add_global_options
from lincorr.cli.values import (  # noqa: F401 - the commands import the option values from here, with the options
    COUNT,
    MODEL_HELP,
    NON_NEGATIVE,
    RESAMPLES,
    SEED,
    Distinct,
    batch_size_option,
    counts,
    finite_number,
    finite_number_that,
    json_object,
    fraction,
    model_spec,
    prompt_template,
    positive_number,
    names,
    output_directory,
    ridge_alpha,
    user_path,
    whole_number,
)
from lincorr.errors import InputError, ModelError, UsageError

PAPER_ESTIMATOR = "ols (the paper's estimator) or ridge"
SIDES = ("source", "target")
FAMILIES = "attribute, cross-language, simile, math, mechanisms"  # the bundled registry's; a test holds them equal
# What `--preset paper` sets on a command that fits W between two prompts, and its help.
PAPER_FIT = {"estimator": "ols"}
PAPER_FIT_HELP = "the paper's ols fit (sets --estimator ols)"
# Why the commands default to ridge; shown in their --help.
RIDGE_REASON = ("ridge by default: with 1,000 inputs and 247 cities (gemma-3-270m-q4km) ols is nearly saturated and "
                "its W too noisy to read or rank targets by")


class CommandParser(argparse.ArgumentParser):
    """A usage mistake ends like every other mistake: one `lincorr: error: ...` line on stderr and exit code 2, naming the help to read."""

    def error(self, message: str):
        raise UsageError(f"{' '.join(message.split())} (see {self.prog} --help)")

    def parse_args(self, args=None, namespace=None):
        """As argparse's, except that an unknown option is reported against the subcommand's own --help."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            prog = getattr(parsed, "command_prog", self.prog)
            raise UsageError(f"unrecognized arguments: {' '.join(extras)} (see {prog} --help)")
        return parsed


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Ends each option's help with its default, except unset options and switches (`--logprobs`, `--no-cache`), whose help says what happens."""

    def _get_help_string(self, action):
        if action.default is None or action.nargs == 0 or action.default == []:
            return action.help
        return super()._get_help_string(action)


def add_command(commands, name: str, help_text: str | None = None) -> argparse.ArgumentParser:
    """A subcommand whose --help shows its defaults, taking the global options after its name too; `help_text` is its
    line in `lincorr --help` (`listing.HELP`) unless given (for the actions of a command: `cache list`)."""
    help_text = HELP[name] if help_text is None else help_text
    parser = commands.add_parser(name, help=help_text, description=help_text, formatter_class=DefaultsHelpFormatter)
    add_global_options(parser)
    parser.set_defaults(command_prog=parser.prog)
    return parser


# ---- what a number option accepts: checked while parsing, so a bad value fails before anything runs ----

def add_model_options(parser, *aliases: str, help_text: str = MODEL_HELP) -> None:
    """--model (and `aliases` of it) with --device, --dtype, --device-map, --trust-remote-code, --revision and --model-kwargs."""
    from lincorr.bundled import DEFAULT_MODEL

    group = parser.add_argument_group("model")
    group.add_argument("--model", *aliases, dest="model", type=model_spec, default=DEFAULT_MODEL, help=help_text)
    group.add_argument("--device", default=None, help="torch device, e.g. cpu, cuda, cuda:1, mps (default: cpu, or where --device-map puts it)")
    group.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"), help="weights' dtype")
    group.add_argument("--device-map", default=None, help='passed to transformers, e.g. "auto" to spread a large model over GPUs')
    group.add_argument("--trust-remote-code", action="store_true", help="allow a hub model's own code to run (off by default)")
    group.add_argument("--revision", default=None, help="a hub model's branch, tag or commit (its fingerprint records the commit)")
    group.add_argument("--model-kwargs", type=json_object, default=None, metavar="JSON",
                       help='more arguments for transformers\' from_pretrained, e.g. \'{"attn_implementation": "eager"}\'')


def add_registry_option(parser) -> None:
    parser.add_argument("--registry", type=user_path, action=Distinct, default=[], metavar="FILE", help="extra registry file (repeatable)")


# `memory_plan`'s "auto" and PLANS by name, spelt here so that --help imports no torch; a test holds them equal. Not the
# sharded plan: every process would have to train, where a command's other processes serve the collection of tables.
MEMORY_PLANS = ("auto", "adamw-float32", "adamw-step-in-backward", "adamw-bfloat16-moments")


def add_memory_plan_option(parser) -> None:
    parser.add_argument("--memory-plan", choices=MEMORY_PLANS, default="auto",
                        help="how fine-tuning holds its gradients and AdamW's moments: adamw-float32 (the paper's), "
                             "adamw-step-in-backward (no whole-model gradient), adamw-bfloat16-moments (that, and the moments in "
                             "bfloat16); auto takes the first whose predicted peak fits the free memory")


def add_json_option(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def add_output_directory_option(parser, option: str, help_text: str, *, default: str | None = None) -> None:
    """An option naming a directory the command writes; `check_output_directories` checks it before any work."""
    dest = option.lstrip("-").replace("-", "_")
    parser.add_argument(option, type=output_directory, default=default, metavar="DIR",
                        help=f"{help_text} (a new or empty directory, or an earlier output, which is replaced whole)")
    parser.set_defaults(output_directories=(*(parser.get_default("output_directories") or ()), (dest, option)))


def add_out_option(parser, writes: str, *, default: str | None = None) -> None:
    """--out DIR; `writes` names the files written there."""
    add_output_directory_option(parser, "--out", f"write {writes} into this directory", default=default)


def add_seed_option(parser, help_text: str) -> None:
    parser.add_argument("--seed", type=SEED, default=0, help=help_text)


def add_n_inputs_option(parser, help_text: str) -> None:
    parser.add_argument("-n", "--n-inputs", type=COUNT, default=1000, help=help_text)


def add_prompt_pair(parser, *, default: tuple[str, str] | None = None, optional: bool = False, help_text: str = "registry prompt name") -> None:
    """SOURCE and TARGET positionals: required, optional, or optional with a `default` pair."""
    nargs = "?" if optional or default else None
    for side, example, value in zip(("source", "target"), ("city", "country"), default or (None, None)):
        parser.add_argument(side, nargs=nargs, default=value, help=help_text if default else f"{help_text} (e.g. {example})")


def add_custom_prompt_options(parser) -> None:
    """--source-template/--source-domain and --target-template/--target-domain: a prompt of your own for either side."""
    group = parser.add_argument_group("your own prompts (instead of registry prompts; SOURCE/TARGET become their labels)")
    for side in SIDES:
        group.add_argument(f"--{side}-template", type=prompt_template, default=None, help=f'custom {side} template with one "{{}}"')
        group.add_argument(f"--{side}-domain", type=user_path, default=None, metavar="FILE", help=f"custom {side} answer words, one per line")


def add_references_option(parser) -> None:
    """--references FILE: the user's own reference pairs, read by `relations.read_reference_file`."""
    parser.add_argument("--references", type=user_path, default=None, metavar="FILE",
                        help='your own reference pairs: TSV subject<TAB>object per line, or JSON {"subject": ["object", ...]}, '
                             '[["subject", "object"], ...] or {"samples": [{"subject": ..., "object": ...}]}; words match domain '
                             "words ignoring case, or by their first token")


def add_collection_options(parser) -> None:
    """Which inputs X, the registry they are read with, and how their logits are collected (`add_collect_settings`)."""
    group = parser.add_argument_group("inputs")
    add_n_inputs_option(group, "number of vocabulary-sampled inputs X")
    add_seed_option(group, "seed of the input sample and the train/test split")
    group.add_argument("--inputs", type=user_path, default=None, metavar="FILE", help="file with one input X per line (instead of a vocabulary sample)")
    add_registry_option(group)
    add_collect_settings(parser)


def add_collect_settings(parser, *, taken: Sequence[str] = ()) -> None:
    """One option per field of `collection.CollectSettings` (--batch-size, --logprobs, --no-cache, --compile), its default and help from there.

    `taken`: fields whose option the command already uses for something else; their tables keep the default.
    """
    from lincorr.collection import CollectSettings

    group = parser.add_argument_group("collection of logit tables")
    fields = [field for field in dataclasses.fields(CollectSettings) if field.name not in taken]
    parser.set_defaults(collect_fields=tuple(field.name for field in fields))
    for field in fields:
        option, help_text = field.metadata["option"], field.metadata["help"]
        if field.default is True:
            group.add_argument(option, dest=field.name, action="store_false", help=help_text)
        elif field.default is False:
            group.add_argument(option, dest=field.name, action="store_true", help=help_text)
        else:
            group.add_argument(option, dest=field.name, type=SETTING_TYPES[field.name], default=field.default, help=help_text)


def add_fit_options(parser, *, estimator: str = "ridge", reason: str = "", bootstrap: int = 1000,
                    choices: Sequence[str] = ("ols", "ridge")) -> None:
    """--estimator (one of `choices`) and --alpha, with the held-out split and the bootstrap; `reason` explains the default."""
    group = parser.add_argument_group("fit")
    group.add_argument("--estimator", choices=tuple(choices), default=estimator,
                       help=f"{PAPER_ESTIMATOR}; {reason or RIDGE_REASON}")
    group.add_argument("--alpha", type=ridge_alpha, default="cv",
                       help='ridge penalty, or "cv" for k-fold cross-validation on the train half; ols ignores it')
    group.add_argument("--test-fraction", type=fraction, default=0.5, help="share of the inputs held out to score W")
    group.add_argument("--bootstrap", type=RESAMPLES, default=bootstrap, help="bootstrap resamples for the 95%% interval")
    group.add_argument("--ci", choices=("rows", "refit"), default="rows",
                       help="95%% interval of the label-wise r: rows = resample the test inputs with W fixed (fast); "
                            "refit = pairs bootstrap, resampling train and test inputs and refitting W each time "
                            "(one fit per resample: try --bootstrap 200)")


SETTING_TYPES = {"batch_size": batch_size_option}  # how the command line spells the CollectSettings fields that are not switches


# ---- what handlers do with them ----

def print_json(payload) -> None:
    """Strict JSON on one line: an undefined number is null, explained under "undefined"."""
    print(strict_json.dumps(payload))


def check_output_directories(args) -> None:
    """Before any work: every output directory of this command can be created and written, and holds no file of another program."""
    from lincorr.filesystem import check_output_directory

    for dest, option in getattr(args, "output_directories", ()):
        if getattr(args, dest, None):
            check_output_directory(getattr(args, dest), option)


def check_user_files(args) -> None:
    """Before any model is looked for: every file and template the user gave is read and checked.

    A bad file is the user's to fix in seconds; finding it only after a model has loaded (or failed to) wastes minutes
    and hides the file's error behind the model's.
    """
    from lincorr.reading import read_text
    from lincorr.templates import validate_template

    if getattr(args, "registry", None):
        load_registry_from(args)
    read_references(args)
    if getattr(args, "inputs", None):
        count_inputs(args)
    for side in SIDES:
        if getattr(args, f"{side}_template", None) is not None:
            validate_template(getattr(args, f"{side}_template"))
        if getattr(args, f"{side}_domain", None) is not None:
            domain_words(args, side)
    if getattr(args, "finetune_text", None) and not read_text(args.finetune_text, "--finetune-text file").strip():
        raise InputError(f"--finetune-text file {args.finetune_text} is empty; give it the passages to fine-tune on")


def check_tracking(args) -> None:
    """Before any work: --mlflow (or LINCORR_MLFLOW when it is not given) becomes `args.mlflow`, and its extra is installed.

    Given on the command line, --mlflow must have a result to log; LINCORR_MLFLOW logs whatever a command saves, if anything.
    """
    given = hasattr(args, "mlflow")
    # The directory a result is saved into (`add_output_directory_option`), not the report's --out FILE.
    out = getattr(args, "out", None) if "out" in dict(getattr(args, "output_directories", ())) else None
    # LINCORR_MLFLOW is looked at only by a command that saves a result: a listing never waits on a server.
    args.mlflow = args.mlflow if given else (os.environ.get(MLFLOW_VARIABLE) or None) if out else None
    if args.mlflow == "":
        raise UsageError("--mlflow needs a tracking URI, e.g. --mlflow file:./mlruns")
    if given and not out:
        prog = getattr(args, "command_prog", "lincorr")
        raise UsageError(f"--mlflow logs the result a command saves into --out; give `{prog}` a directory with --out"
                         if "out" in dict(getattr(args, "output_directories", ())) else
                         f"`{prog}` saves no result for --mlflow to log; leave --mlflow out")
    if args.mlflow:
        from lincorr.tracking import check_tracker, require_mlflow

        require_mlflow()
        args.mlflow = check_tracker(args.mlflow, out)


def track(args, result) -> None:
    """Under --mlflow, the result just saved into --out is logged as one MLflow run."""
    if args.mlflow:
        from lincorr.tracking import log_result

        log_result(result, args.out, args.mlflow)


def save_and_print(args, result, *, text: Callable[[], str] | None = None, payload: Callable[[], object] | None = None,
                   show: bool = True) -> None:
    """How a study ends: `result` saves itself into --out when given (and is logged under --mlflow); then its JSON
    (`summary()`, or `payload()`) with --json, else (unless `show` is False) its text (`text()`, or the `text` given) and
    where it was saved."""
    if args.out:
        result.save(args.out)
        track(args, result)
    if args.json:
        print_json(payload() if payload else result.summary())
    elif show:
        print((text() if text else result.text()) + wrote(args))


def wrote(args) -> str:
    """The closing line of a table that was also saved."""
    return f"\n\nwrote {args.out}/" if args.out else ""


def refuse_same_model(args) -> None:
    """Before loading: --eval-model is not --model again (the same spec, or a path to the same file or directory); the
    same weights under another name are refused by fingerprint once both have loaded."""
    from lincorr.models import same_model_spec

    if args.eval_model and same_model_spec(args.model, args.eval_model):
        raise UsageError(f"--eval-model {args.eval_model} is the model itself; name another checkpoint of it, e.g. its instruct version")


def load_lm(args, spec: str | None = None):
    """The model of --model, or `spec`, with this command's device, dtype and trust settings; the cache is checked first."""
    from lincorr.cache import check_cache
    from lincorr.models import load_model

    if spec is not None and not spec.strip():  # `spec or args.model` would load --model in its place
        raise InputError(f"{spec!r} names no model; {MODEL_HELP}")
    check_cache()
    # --revision and --model-kwargs are --model's; a second model of the command (--eval-model, say) is loaded as named.
    own = spec is None or spec == args.model
    name, model_kwargs = spec or args.model, args.model_kwargs if own else None
    if name.startswith(("/", "./", "../", "~")) and not Path(name).expanduser().exists():
        # A path, not a hub id ("org/name"): said as what it is, not as a failed hub lookup.
        raise ModelError(f"{name}: no such file or directory; a local model is a .gguf file or a directory from save_pretrained")
    with model_load_errors(name, model_kwargs):
        return load_model(name, device=args.device, dtype=args.dtype, device_map=args.device_map,
                          trust_remote_code=args.trust_remote_code, revision=args.revision if own else None, model_kwargs=model_kwargs)


def read_once(args, name: str, read: Callable[[], object]):
    """`read()` once per invocation: the files a command names are checked before the model loads and used after it."""
    files = vars(args).setdefault("files_read", {})
    if name not in files:
        files[name] = read()
    return files[name]


def load_registry_from(args):
    """The registry of this command (bundled data + --registry files), read once per invocation."""
    from lincorr.knowledge import load_registry

    return read_once(args, "registry", lambda: load_registry(args.registry))


def checked_registry(args, prompts: Iterable[str]):
    """The registry, once every name in `prompts` is known to it: a misspelt name fails in a second, not after the model loads."""
    registry = load_registry_from(args)
    for name in prompts:
        registry.prompt(name)
    return registry


def fit_config(args):
    """The FitConfig behind --seed, --estimator, --alpha, --test-fraction, --bootstrap and --ci, once the inputs (-n or --inputs) are enough to score on."""
    from lincorr.fit import FitConfig
    from lincorr.held_out import split_sizes

    split_sizes(count_inputs(args), args.test_fraction)
    return FitConfig(seed=args.seed, estimator=args.estimator, alpha=args.alpha, test_fraction=args.test_fraction, n_boot=args.bootstrap,
                     ci=args.ci)


def count_inputs(args) -> int:
    """How many inputs X the command will use: the lines of --inputs, else -n."""
    if getattr(args, "inputs", None) is None:
        return args.n_inputs
    return len(inputs_file(args))


def choose_inputs(args, tokenizer) -> list[str]:
    from lincorr.inputs import sample_vocab_inputs

    return inputs_file(args) if args.inputs else sample_vocab_inputs(tokenizer, args.n_inputs, args.seed)


def inputs_file(args) -> list[str]:
    """The inputs of --inputs FILE, read once per invocation."""
    from lincorr.inputs import read_inputs_file

    return read_once(args, "inputs", lambda: read_inputs_file(args.inputs))


def domain_words(args, side: str) -> list[str]:
    """The words of --SIDE-domain FILE, read once per invocation."""
    from lincorr.domains import read_word_file

    return read_once(args, f"{side}_domain", lambda: read_word_file(getattr(args, f"{side}_domain")))


def custom_sides(args) -> tuple[str, ...]:
    """The sides ("source", "target") given a prompt of the user's own, once both of its options are there and its domain file exists."""
    sides = []
    for side in SIDES:
        template, domain_file = getattr(args, f"{side}_template", None), getattr(args, f"{side}_domain", None)
        if (template is None) != (domain_file is None):
            raise UsageError(f"--{side}-template and --{side}-domain go together; give both or neither")
        if template is not None:
            sides.append(side)
    return tuple(sides)


def resolve_prompt(args, side: str, tokenizer):
    """The prompt of one side for `tokenizer`: the user's own when its template and domain are given, else the registry's."""
    from lincorr.prompts import custom_prompt, registry_prompt

    name = getattr(args, side)
    if side in custom_sides(args):
        return custom_prompt(getattr(args, f"{side}_template"), domain_words(args, side), tokenizer, name=name)
    return registry_prompt(load_registry_from(args), name, tokenizer)


def read_references(args):
    """The --references file as a `relations.ReferenceFile`, or None; read before the model loads, so a bad file fails at once."""
    from lincorr.relations import read_reference_file

    if not getattr(args, "references", None):
        return None
    return read_once(args, "references", lambda: read_reference_file(args.references))


def collect_settings(args):
    """The `CollectSettings` of the collection options (`add_collect_settings`)."""
    from lincorr.collection import CollectSettings

    return CollectSettings(**{name: getattr(args, name) for name in args.collect_fields})
