"""Loading a causal LM (HF id, local dir, GGUF file, bundled alias) and its exact domain logits."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from lincorr.bundled import DEFAULT_MODEL, GGUFHeader, assembled_gguf, catalogue, check_conversion_memory, check_header, find_bundled, read_header
from lincorr.cache import conversion_state, converted_model_directory, file_sha256, key_digest, record_conversion
from lincorr.errors import DeviceError, ModelError, UsageError
from lincorr.filesystem import replaced_directory
from lincorr.provenance import note
from lincorr.model_directory import TOKENIZER_FILES, check_all_weights_loaded, check_model_directory
from lincorr.model_directory import check_finite_weights, check_model_name, transformers_refusals
from lincorr.model_directory import check_not_a_lone_file
if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

GGUF_MAGIC = b"GGUF"
# What the gguf reader raises on a file that is truncated or damaged past its magic bytes.
GGUF_READ_ERRORS = (ValueError, KeyError, IndexError, EOFError, struct.error)


@dataclasses.dataclass(eq=False)
class LM:
    """A causal LM with its tokenizer, a content fingerprint, and the exact last-token head."""

    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    fingerprint: str
    head_verified: bool = False  # set by collection.forward.verify_head after one comparison with a full forward
    spec: str | None = None  # what `load_model` was given: how another process loads the same model (None for in-memory ones)
    compiled_body: Callable[..., Any] | None = None  # set by `compile_forward`: the transformer body under torch.compile

    @property
    def device(self) -> torch.device:
        return self.model.get_input_embeddings().weight.device  # type: ignore[return-value]  # torch types a submodule's attribute as Tensor | Module

    @property
    def head_weight(self) -> torch.Tensor:
        """The unembedding `[vocab, d_model]`."""
        return self.model.get_output_embeddings().weight

    def last_hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Final-norm hidden state at the last position of left-padded rows: `[batch, d_model]`."""
        position_ids = position_ids_from_mask(attention_mask)
        # A batch of one would make the compiled body compile again for that shape; it runs eager.
        body = self.compiled_body if self.compiled_body is not None and input_ids.shape[0] > 1 else self.model.base_model
        out = body(
            input_ids=input_ids.to(self.device),
            attention_mask=attention_mask.to(self.device),
            position_ids=position_ids.to(self.device),
            use_cache=False,
        )
        return out.last_hidden_state[:, -1, :]

    def head_logits(self, hidden: torch.Tensor, token_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Logits `[batch, k]` for `token_ids` (all tokens if None) as the model's head computes them, in float32 at least.

        A half-precision model's head would round each logit to 8 (bfloat16) or 11 bits before
        anything is fitted on it; the k rows of a restricted head are cheap to multiply in float32.
        A float64 model keeps float64.
        """
        head = self.model.get_output_embeddings()
        weight = head.weight if token_ids is None else head.weight[token_ids.to(head.weight.device)]
        wide = torch.promote_types(weight.dtype, torch.float32)
        logits = hidden.to(weight.device, wide) @ weight.to(wide).T
        bias = getattr(head, "bias", None)
        if bias is not None:
            logits = logits + (bias if token_ids is None else bias[token_ids.to(bias.device)]).to(wide)
        return apply_logit_transform(logits, self.model.config)

    def log_normalizer(self, hidden: torch.Tensor, chunk: int = 65536) -> torch.Tensor:
        """logsumexp of the full-vocabulary logits, `[batch]`, computed in vocabulary chunks."""
        vocab = self.head_weight.shape[0]
        parts = [
            self.head_logits(hidden, torch.arange(start, min(start + chunk, vocab))).float().logsumexp(-1)
            for start in range(0, vocab, chunk)
        ]
        return torch.stack(parts, -1).logsumexp(-1)


def compile_forward(lm: LM) -> LM:
    """Run `last_hidden` (collection) through `torch.compile`, which fuses the norms, activations and rotary embeddings.

    On this project's 2-core CPU, gemma-3-270m-q4km collects 1.12x faster once compiled, after a compile
    of about 2 minutes (45 s with torch's on-disk compile cache warm): worth it for sweeps of many
    tables, not for one (docs/benchmarks.md). Logits move by ~3e-5, so compiled tables are cached
    apart from eager ones. Everything else (internals, training) keeps using the eager model.
    """
    lm.compiled_body = torch.compile(lm.model.base_model, dynamic=True)
    return lm


def tokenize_prompts(tokenizer, prompts: Sequence[str]) -> list[list[int]]:
    """Token ids per prompt, with the special tokens the model expects (BOS where it uses one)."""
    return tokenizer(list(prompts), add_special_tokens=True)["input_ids"]


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded `input_ids` and `attention_mask`, both `[batch, max_len]`."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = torch.tensor(row, dtype=torch.long)
        mask[i, width - len(row):] = 1
    return ids, mask


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that start at 0 on each row's first real token: `[batch, pos]`."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def apply_logit_transform(logits: torch.Tensor, config) -> torch.Tensor:
    """The scaling and soft-capping some architectures apply after the unembedding."""
    scale = getattr(config, "logit_scale", None)  # Cohere multiplies
    if scale is not None:
        logits = logits * scale
    scaling = getattr(config, "logits_scaling", None)  # Granite divides
    if scaling is not None:
        logits = logits / scaling
    cap = getattr(config, "final_logit_softcapping", None)  # Gemma 2/3
    if cap is not None:
        logits = torch.tanh(logits / cap) * cap
    return logits


def load_model(
    spec: str = DEFAULT_MODEL,
    *,
    device: str | None = None,
    dtype: str = "float32",
    device_map: str | None = None,
    use_cache: bool = True,
    trust_remote_code: bool = False,
    revision: str | None = None,
    model_kwargs: Mapping | None = None,
) -> LM:
    """Load a model by bundled alias, `.gguf` path, local directory or HF hub id.

    `revision` (a hub model's branch, tag or commit) and `model_kwargs` (more arguments for transformers'
    `from_pretrained`, e.g. {"attn_implementation": "eager"}) are the user's; `model_kwargs` may not repeat
    what lincorr sets itself (dtype, device_map, ...), which have options of their own.
    """
    if dtype not in DTYPES:
        raise DeviceError(f"unknown dtype '{dtype}'; use one of {', '.join(DTYPES)}")
    check_device(device)
    check_model_name(spec)
    options = LoadOptions(DTYPES[dtype], device_map, check_model_kwargs(model_kwargs))
    bundle = find_bundled(spec)
    if revision is not None and (bundle is not None or spec.endswith(".gguf") or Path(spec).expanduser().is_dir()):
        raise ModelError(f"--revision picks a version of a hub model; '{spec}' is not one: drop --revision")
    with transformers_refusals(spec, options.model_kwargs):
        if bundle is not None:
            lm = load_gguf(lambda: assembled_gguf(bundle), name=bundle.alias, fingerprint=bundle.fingerprint, options=options,
                           use_cache=use_cache, expected=bundle.header)
        elif spec.endswith(".gguf"):
            path = Path(spec).expanduser()
            if not path.is_file():
                raise ModelError(f"GGUF file {spec} does not exist; pass the path of a .gguf file")
            lm = load_gguf(lambda: path, name=path.stem, fingerprint=f"gguf-sha256:{file_sha256(path)}", options=options,
                           use_cache=use_cache)
        else:
            lm = load_pretrained(spec, options=options, trust_remote_code=trust_remote_code, revision=revision)
    if device is not None and device_map is None:
        lm.model.to(device)  # type: ignore[arg-type]  # transformers' decorator on `to` loses its self in the stubs
    check_finite_weights(lm.name, lm.model)
    lm.model.eval()
    lm.spec = spec
    note("models", lm.name, {"dtype": dtype, "device": str(next(lm.model.parameters()).device), "device_map": device_map})
    return lm


def load_tokenizer(spec: str = DEFAULT_MODEL, *, trust_remote_code: bool = False):
    """The tokenizer of `spec` without its weights, where that is cheap: a local model directory, or a bundled alias or .gguf
    file already converted. None otherwise (a GGUF not converted yet, a hub id): then only loading the model gives it.

    Lets every check that needs only the tokenizer (domains, their size against the inputs) fail in seconds, before the model
    loads. `load_model` checks the conversion whole; this reads only the tokenizer files the conversion wrote.
    """
    from transformers import AutoTokenizer

    check_model_name(spec)
    local, bundle = Path(spec).expanduser(), find_bundled(spec)
    if bundle is None and not spec.endswith(".gguf"):
        if not (local.is_dir() and (local / "config.json").is_file()):
            return None
        check_model_directory(local, trust_remote_code)  # what it lacks is said as loading the model would say it
        return prepare_tokenizer(AutoTokenizer.from_pretrained(str(local), trust_remote_code=trust_remote_code))
    if bundle is not None:
        converted = converted_model_directory(bundle.alias, bundle.fingerprint)
    elif local.is_file():
        converted = converted_model_directory(local.stem, f"gguf-sha256:{file_sha256(local)}")
    else:
        return None
    if not any((converted / name).is_file() for name in TOKENIZER_FILES):
        return None
    return prepare_tokenizer(AutoTokenizer.from_pretrained(converted))


def same_model_spec(spec: str, other: str) -> bool:
    """Whether two specs name the same weights, known without loading: one bundled model (alias or former name), one text or file."""
    def named(text: str) -> str:
        bundle = find_bundled(text.strip())
        return bundle.alias if bundle is not None else text.strip()

    if named(spec) == named(other):
        return True
    paths = Path(spec).expanduser(), Path(other).expanduser()
    return all(path.exists() for path in paths) and os.path.samefile(*paths)


def require_other_checkpoint(lm: LM, other: LM, option: str) -> None:
    """`other` (given by `option`) is not `lm`'s weights again: a W scored on the logits it was fitted on passes every
    test of whether it survives another checkpoint."""
    if other.fingerprint == lm.fingerprint:
        raise UsageError(f"{option} {other.name} has the same weights as the model itself ({lm.name}, fingerprint {lm.fingerprint[:24]}); "
                         "name another checkpoint of it, e.g. its instruct version")


@dataclasses.dataclass(frozen=True)
class LoadOptions:
    """How the weights are loaded: what every `from_pretrained` call of one `load_model` gets."""

    dtype: torch.dtype
    device_map: str | None
    model_kwargs: Mapping

    def kwargs(self) -> dict:
        return {"dtype": self.dtype, "device_map": self.device_map, **self.model_kwargs}

    def fingerprint(self, base: str) -> str:
        """`base`, and the model kwargs when there are any: they can change the model's outputs (a config override, say)."""
        if not self.model_kwargs:
            return base
        return f"{base}+kwargs:{key_digest(dict(self.model_kwargs))[:16]}"


# Set by lincorr from its own options; a model kwarg of the same name would contradict one of them.
OWN_KWARGS = {"dtype": "--dtype", "torch_dtype": "--dtype", "device_map": "--device-map", "trust_remote_code": "--trust-remote-code",
              "revision": "--revision", "use_safetensors": "(always on)", "gguf_file": "(a .gguf path as --model)"}


def check_model_kwargs(model_kwargs: Mapping | None) -> Mapping:
    if model_kwargs is None:
        return {}
    if not isinstance(model_kwargs, Mapping):
        raise ModelError(f"model kwargs must be a JSON object like '{{\"attn_implementation\": \"eager\"}}', not {model_kwargs!r}")
    clash = sorted(set(model_kwargs) & set(OWN_KWARGS))
    if clash:
        raise ModelError(f"model kwargs may not set {', '.join(clash)}: use {', '.join(OWN_KWARGS[k] for k in clash)} instead")
    return dict(model_kwargs)


def check_device(device: str | None) -> None:
    """Fail before loading when `device` is not a torch device that this machine and torch build have."""
    if device is None:
        return
    try:
        parsed = torch.device(device)
    except RuntimeError:
        raise DeviceError(f"unknown device '{device}'; use cpu, cuda, cuda:N or mps") from None
    if parsed.type == "cpu":
        return
    backend = torch.backends.mps if parsed.type == "mps" else getattr(torch, parsed.type, None)
    if backend is None or not hasattr(backend, "is_available") or not backend.is_available():
        raise DeviceError(f"device '{device}' is not available to this torch ({torch.__version__}); use --device cpu, "
                           f"or install a torch build for {parsed.type}")
    count = getattr(backend, "device_count", None)
    if parsed.index is not None and count is not None and parsed.index >= count():
        raise DeviceError(f"device '{device}' does not exist: this machine has {count()} {parsed.type} device(s), numbered from 0")


def check_gguf_file(path: Path) -> GGUFHeader:
    """The header of a GGUF file; a file that is not GGUF, or whose header and tensor table do not fit in it, is refused."""
    with open(path, "rb") as handle:
        magic = handle.read(len(GGUF_MAGIC))
    if magic != GGUF_MAGIC:
        raise ModelError(f"{path} is not a GGUF file (it does not start with the GGUF magic bytes); pass a complete .gguf model file")
    try:
        return read_header(path)
    except GGUF_READ_ERRORS as error:
        raise ModelError(f"cannot read GGUF file {path} ({first_line(error)}); it is truncated or damaged: download it again") from None


def read_gguf(path: Path, options: LoadOptions):
    """Tokenizer and model dequantised from a GGUF file; a damaged or unsupported file is one clear error."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, **options.kwargs())
    except GGUF_READ_ERRORS as error:
        raise ModelError(f"cannot read GGUF file {path} ({first_line(error)}); it may be truncated or damaged, "
                           "or of an architecture transformers cannot convert") from None
    return tokenizer, model


def load_gguf(locate: Callable[[], Path], *, name: str, fingerprint: str, options: LoadOptions, use_cache: bool,
              expected: GGUFHeader | None = None) -> LM:
    """Dequantise a GGUF once, keep the result as safetensors, and load from there afterwards.

    `locate` gives the GGUF file, called only when it is needed: a bundled model's is assembled from
    its packages then, and a converted copy in the cache is used without them. Its header must be
    `expected` (a bundled model's record) before transformers reads it.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # The conversion is of the file alone; the model kwargs apply when it is loaded.
    converted = converted_model_directory(name, fingerprint) if use_cache else None
    state = conversion_state(converted, fingerprint) if converted is not None else "unused"
    if converted is None or state != "intact":
        path = locate()
        header = check_gguf_file(path)
        check_header(path, header, expected)
        check_conversion_memory(name, header.parameters)
        if converted is None:
            tokenizer, model = read_gguf(path, options)
            return LM(name, model, prepare_tokenizer(tokenizer), options.fingerprint(fingerprint))
        again = "again: the converted files differ from what was written" if state == "damaged" else "(about a minute, once)"
        log.warning("converting %s from GGUF %s; cached in %s", name, again, converted)
        convert_gguf(path, converted, fingerprint)
    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(converted)
    model = AutoModelForCausalLM.from_pretrained(converted, **options.kwargs())
    log.info("loaded %s from the converted cache in %.1fs", name, time.perf_counter() - started)
    return LM(name, model, prepare_tokenizer(tokenizer), options.fingerprint(fingerprint))


def convert_gguf(path: Path, target: Path, fingerprint: str) -> None:
    """Write the dequantised model and tokenizer to `target` whole; the record of every file's size and checksum comes last."""
    # Dequantise in float32 so the cache holds the exact values; a dtype cast happens on load.
    tokenizer, model = read_gguf(path, LoadOptions(torch.float32, None, {}))
    with replaced_directory(target) as staging:
        # The weights are already dequantised: drop the GGUF marker so they save and load as plain ones.
        model.hf_quantizer = None
        model.config.__dict__.pop("quantization_config", None)
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        record_conversion(staging, fingerprint, path)


def load_pretrained(spec: str, *, options: LoadOptions, trust_remote_code: bool, revision: str | None) -> LM:
    """Load from a local directory or the HF hub (network only when the user names a hub model); safetensors weights only."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_not_a_lone_file(spec)
    local = Path(spec).expanduser()
    if not local.is_dir() and "/" not in spec:
        known = ", ".join(catalogue())
        raise ModelError(f"unknown model '{spec}'; use a bundled alias ({known}), a .gguf file, a directory, or a hub id like org/name")
    if local.is_dir():
        check_model_directory(local, trust_remote_code)
    source = str(local) if local.is_dir() else spec
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code, revision=revision)
        # Never a pickled checkpoint: unpickling can run code from the file.
        # With output_loading_info, a (model, what it loaded) pair, which transformers' annotations do not say.
        loaded: Any = AutoModelForCausalLM.from_pretrained(
            source, trust_remote_code=trust_remote_code, use_safetensors=True, revision=revision, output_loading_info=True,
            **options.kwargs())
        model, loading = loaded
    except OSError as error:
        offline = os.environ.get("HF_HUB_OFFLINE") == "1"
        hint = "unset HF_HUB_OFFLINE or download it first" if offline else "check the name, or download it first"
        raise ModelError(f"cannot load model '{spec}' ({first_line(error)}); {hint}") from None
    except (ValueError, TypeError) as error:  # TypeError: a model kwarg this model's class does not take
        raise ModelError(f"cannot load model '{spec}' ({first_line(error)})") from None
    except RuntimeError as error:
        if "ignore_mismatched_sizes" not in str(error):
            raise
        raise ModelError(f"the weights of '{spec}' hold tensors of other shapes than its config.json says; save the model "
                         "whole with save_pretrained(dir)") from None
    check_all_weights_loaded(spec, loading)
    return LM(spec, model, prepare_tokenizer(tokenizer), options.fingerprint(pretrained_fingerprint(source, model)))


def first_line(error: BaseException) -> str:
    """An exception's message as one line (the user sees one line)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def pretrained_fingerprint(source: str, model) -> str:
    """The hub commit when known, else a hash of the config and of every weight file's name and sha256.

    The weights' contents, not their sizes and times: two directories whose weights differ but whose files were
    written in one clock tick, or given one time with `touch -d`, would otherwise share the logit tables cached for
    either. Hashing reads every weight file once (about 0.6 s for 500 MB read from the page cache on this project's
    machine; see docs/reliability.md); `file_sha256` remembers the digest per file identity, so later loads only stat the files.
    """
    commit = getattr(model.config, "_commit_hash", None)
    if commit:
        return f"hub:{source}@{commit}"
    digest = hashlib.sha256(model.config.to_json_string().encode())
    directory = Path(source)
    for weights in sorted(directory.glob("*.safetensors")):
        digest.update(f"{weights.name}:{file_sha256(weights)}".encode())
    return f"dir:{digest.hexdigest()}"


def parameters_fingerprint(model: torch.nn.Module) -> str:
    """A hash of every parameter's bytes: for models built or trained in memory."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return f"params:{digest.hexdigest()}"


def wrap_model(model, tokenizer, name: str = "in-memory") -> LM:
    """An LM over a model and tokenizer the caller already holds (fingerprinted by content)."""
    model.eval()
    return LM(name, model, prepare_tokenizer(tokenizer), parameters_fingerprint(model))


def prepare_tokenizer(tokenizer):
    """Left padding with a pad token, so the last position is the prompt's last token."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
