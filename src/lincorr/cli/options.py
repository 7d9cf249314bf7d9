"""What the commands share: each common option defined once, and the steps every handler takes with them.

Options are added by functions rather than shared parent parsers: argparse shares a parent's
action objects between commands, so one command's default would leak into another's.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from lincorr.errors import LincorrError

MODEL_HELP = "bundled alias, .gguf file, local directory or hub id"
PAPER_ESTIMATOR = "ols (the paper's estimator) or ridge"
# Why the training studies (and the demo) default to ridge; shown in their --help.
RIDGE_REASON = ("ridge by default: with 1,000 inputs and 247 cities ols is nearly saturated and its W too noisy "
                "to read or rank targets by")


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Ends each option's help with its default, except unset options and off switches, whose help says what happens."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False or action.default == []:
            return action.help
        return super()._get_help_string(action)


def add_command(commands, name: str, help_text: str) -> argparse.ArgumentParser:
    """A subcommand whose --help shows its defaults."""
    return commands.add_parser(name, help=help_text, description=help_text, formatter_class=DefaultsHelpFormatter)


# ---- the options ----

def add_model_options(parser, *aliases: str, help_text: str = MODEL_HELP) -> None:
    """--model (and `aliases` of it) with --device, --dtype, --device-map and --trust-remote-code."""
    group = parser.add_argument_group("model")
    group.add_argument("--model", *aliases, dest="model", default="gemma-3-270m", help=help_text)
    group.add_argument("--device", default=None, help="torch device, e.g. cpu, cuda, cuda:1, mps (default: cpu, or where --device-map puts it)")
    group.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"), help="weights' dtype")
    group.add_argument("--device-map", default=None, help='passed to transformers, e.g. "auto" to spread a large model over GPUs')
    group.add_argument("--trust-remote-code", action="store_true", help="allow a hub model's own code to run (off by default)")


def add_registry_option(parser) -> None:
    parser.add_argument("--registry", action="append", default=[], metavar="FILE", help="extra registry file (repeatable)")


def add_json_option(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def add_out_option(parser, writes: str, *, default: str | None = None) -> None:
    """--out DIR; `writes` names the files written there."""
    parser.add_argument("--out", default=default, metavar="DIR", help=f"write {writes} into this directory")


def add_quiet_option(parser) -> None:
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def add_seed_option(parser, help_text: str) -> None:
    parser.add_argument("--seed", type=int, default=0, help=help_text)


def add_n_inputs_option(parser, help_text: str) -> None:
    parser.add_argument("-n", "--n-inputs", type=int, default=1000, help=help_text)


def add_prompt_pair(parser, *, default: tuple[str, str] | None = None, optional: bool = False, help_text: str = "registry prompt name") -> None:
    """SOURCE and TARGET positionals: required, optional, or optional with a `default` pair."""
    nargs = "?" if optional or default else None
    for side, example, value in zip(("source", "target"), ("city", "country"), default or (None, None)):
        parser.add_argument(side, nargs=nargs, default=value, help=help_text if default else f"{help_text} (e.g. {example})")


def add_collection_options(parser) -> None:
    """Which inputs X, how their logits are collected, and the registry they are read with."""
    group = parser.add_argument_group("inputs and collection")
    add_n_inputs_option(group, "number of vocabulary-sampled inputs X")
    add_seed_option(group, "seed of the input sample and the train/test split")
    group.add_argument("--inputs", default=None, metavar="FILE", help="file with one input X per line (instead of a vocabulary sample)")
    group.add_argument("--batch-size", type=int, default=128, help="prompts per forward pass")
    group.add_argument("--logprobs", action="store_true", help="log-softmax over the full vocabulary instead of raw logits")
    group.add_argument("--no-cache", action="store_true", help="recompute logit tables instead of reusing cached ones")
    add_registry_option(group)
    add_quiet_option(group)


def add_fit_options(parser, *, estimator: str = "ols", reason: str = "", bootstrap: int = 1000) -> None:
    """--estimator and --alpha, with the held-out split and the bootstrap; `reason` explains a ridge default."""
    group = parser.add_argument_group("fit")
    group.add_argument("--estimator", choices=("ols", "ridge"), default=estimator,
                       help=f"{PAPER_ESTIMATOR}; {reason}" if reason else PAPER_ESTIMATOR)
    group.add_argument("--alpha", default="cv", help='ridge penalty, or "cv" for k-fold cross-validation on the train half; ols ignores it')
    group.add_argument("--test-fraction", type=float, default=0.5, help="share of the inputs held out to score W")
    group.add_argument("--bootstrap", type=int, default=bootstrap, help="bootstrap resamples for the 95%% interval")


# ---- what handlers do with them ----

def show_progress(args) -> bool:
    """Progress bars only for a person watching a terminal, never in logs or pipes."""
    return not args.quiet and sys.stderr.isatty()


def print_json(payload) -> None:
    print(json.dumps(payload, ensure_ascii=False))


def save_and_print(args, result, text: Callable[[], str] | None, *, payload: Callable[[], object] | None = None) -> None:
    """How a study ends: `result` saves itself into --out when given; then its JSON (its summary, or `payload()`) with --json, else `text()`."""
    if args.out:
        result.save(args.out)
    if args.json:
        print_json(payload() if payload else result.summary())
    elif text is not None:
        print(text())


def wrote(args) -> str:
    """The closing line of a table that was also saved."""
    return f"\n\nwrote {args.out}/" if args.out else ""


def load_lm(args, spec: str | None = None):
    """The model of --model, or `spec`, with this command's device, dtype and trust settings."""
    from lincorr.models import load_model

    return load_model(spec or args.model, device=args.device, dtype=args.dtype, device_map=args.device_map,
                      trust_remote_code=args.trust_remote_code)


def load_registry_from(args):
    """The registry of this command (bundled data + --registry files), read once per invocation."""
    if getattr(args, "loaded_registry", None) is None:
        from lincorr.knowledge import load_registry

        args.loaded_registry = load_registry(args.registry)
    return args.loaded_registry


def checked_registry(args, names: Iterable[str]):
    """The registry, once every prompt in `names` is known to it: a misspelt name fails in a second, not after the model loads."""
    registry = load_registry_from(args)
    for name in names:
        registry.prompt(name)
    return registry


def fit_config(args):
    """The FitConfig behind --seed, --estimator, --alpha, --test-fraction and --bootstrap."""
    from lincorr.experiments.correlation import FitConfig

    alpha = args.alpha
    if alpha != "cv":
        try:
            alpha = float(alpha)
        except ValueError:
            raise LincorrError(f"--alpha must be a number or 'cv', got {args.alpha!r}") from None
    return FitConfig(seed=args.seed, estimator=args.estimator, alpha=alpha, test_fraction=args.test_fraction, n_boot=args.bootstrap)


def check_inputs(args) -> None:
    """Fail on unusable input options before loading a model."""
    if args.inputs is not None and not Path(args.inputs).is_file():
        raise LincorrError(f"--inputs file {args.inputs} does not exist; pass a text file with one input per line")
    if args.inputs is None and args.n_inputs < 4:
        raise LincorrError(f"-n must be at least 4 to split into train and test, got {args.n_inputs}")


def choose_inputs(args, tokenizer) -> list[str]:
    from lincorr.inputs import read_inputs_file, sample_vocab_inputs

    return read_inputs_file(args.inputs) if args.inputs else sample_vocab_inputs(tokenizer, args.n_inputs, args.seed)


def collection_settings(args) -> dict:
    """Keyword arguments of the collecting studies, from the collection options."""
    return {"logprobs": args.logprobs, "batch_size": args.batch_size, "cache": not args.no_cache, "progress": show_progress(args)}
