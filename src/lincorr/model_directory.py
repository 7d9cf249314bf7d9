"""What a model directory must hold before transformers loads it (a config, safetensors weights, a tokenizer, no code of
its own unless trusted), and that the weights it loaded are every parameter the model has."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from lincorr.bundled import catalogue
from lincorr.errors import DeviceError, ModelError
from lincorr.reading import file_start, kind_of
from lincorr.schema import TEXT, FileKind, Maybe, read_document

PICKLED_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
# What transformers may open in a model directory: weights, configs, tokenizer files, chat templates.
LOADED_SUFFIXES = frozenset({".safetensors", ".json", ".model", ".txt", ".jinja", ".tiktoken"})
# Only what lincorr reads before transformers does: whether the model needs code of its own.
MODEL_CONFIG = FileKind("model config", {"model_type": Maybe(TEXT)}, "save the model again with save_pretrained(dir)", "save_pretrained")
SHOWN_TENSORS = 5  # how many missing tensors an error names


def check_all_weights_loaded(spec: str, loading: Mapping) -> None:
    """Refuse a model some of whose parameters its weight files do not hold (transformers would leave them at their random
    initialisation and only warn, and every number measured on it would be noise), or whose weight files hold tensors it
    has no place for. (A tensor of another shape than the config's is refused by transformers itself, as a RuntimeError.)"""
    missing = sorted(loading.get("missing_keys") or ())
    if missing:
        raise ModelError(f"the weights of '{spec}' hold no {len(missing):,} of the model's tensors ({tensors_text(missing)}); they "
                         "would be left at random values: save the model whole with save_pretrained(dir), or name the directory "
                         "that holds all its weights")
    # transformers leaves out the extras each architecture declares harmless (`_keys_to_ignore_on_load_unexpected`): what
    # remains is weights the model has no place for, a config (or --model-kwargs) that describes a smaller model.
    unexpected = sorted(loading.get("unexpected_keys") or ())
    if unexpected:
        raise ModelError(f"the weights of '{spec}' hold {len(unexpected):,} tensors the model has no place for "
                         f"({tensors_text(unexpected)}): its config (or --model-kwargs) describes another model than its weights, "
                         "and measuring it would silently drop them; load it with the config it was saved with")


def tensors_text(names: list[str]) -> str:
    """The first SHOWN_TENSORS of `names`, and how many more."""
    return ", ".join(names[:SHOWN_TENSORS]) + (f" and {len(names) - SHOWN_TENSORS:,} more" if len(names) > SHOWN_TENSORS else "")


def check_model_directory(directory: Path, trust_remote_code: bool) -> None:
    """Refuse, naming what is missing, a directory that is not a model lincorr can load safely."""
    # Only a missing config.json is "no config": one that is a FIFO, a link to a device or a loop is refused by what it is, below.
    if not os.path.lexists(directory / "config.json"):
        found = "it is empty" if not any(directory.iterdir()) else "it has no config.json"
        raise ModelError(f"{directory} is not a saved model ({found}); a model directory holds config.json, "
                           "model.safetensors and the tokenizer's files")
    if not any(directory.glob("*.safetensors")):
        pickles = sorted(item.name for pattern in PICKLED_WEIGHTS for item in directory.glob(pattern))
        if pickles:
            raise ModelError(f"{directory} has its weights only as a pickle ({', '.join(pickles)}), which lincorr never loads because "
                               "unpickling can run code; where you trust it, resave it with save_pretrained(dir, safe_serialization=True)")
        raise ModelError(f"{directory} has no weights (no model.safetensors)")
    check_weight_files(directory)
    if not any((directory / name).is_file() for name in TOKENIZER_FILES):
        raise ModelError(f"{directory} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); save it beside the model with "
                           "tokenizer.save_pretrained(dir)")
    config = read_document(directory / "config.json", MODEL_CONFIG)
    if not trust_remote_code and needs_remote_code(config):
        raise ModelError(f"{directory} needs its own Python code (model type '{config.get('model_type')}' is not in transformers); "
                           "pass --trust-remote-code only if you trust its author")


def check_weight_files(directory: Path) -> None:
    """Refuse weights and tokenizer files that are not regular files (a FIFO, a link to a device): transformers would say
    it found no weights and suggest downloading, and reading one (the tokenizer, the model's fingerprint) could block or
    read forever."""
    # config.json is lincorr's own read (`read_document`), which refuses such files as it refuses a stranger's.
    for path in sorted(item for item in directory.iterdir() if item.suffix in LOADED_SUFFIXES and item.name != "config.json"):
        what = "the weights" if path.suffix == ".safetensors" else "the model's file"
        try:
            mode = path.stat().st_mode
        except OSError as error:
            raise ModelError(f"cannot read {what} {path} ({error.strerror}); fix the link or save the model again") from None
        if not stat.S_ISREG(mode):
            verb = "are" if path.suffix == ".safetensors" else "is"
            raise ModelError(f"{what} {path} {verb} {kind_of(mode)}, not a file; save the model again with save_pretrained(dir)")


def needs_remote_code(config: dict) -> bool:
    """A config that names code of its own (auto_map) for a model type transformers does not know."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return "auto_map" in config and config.get("model_type") not in CONFIG_MAPPING


def check_model_name(spec: str) -> None:
    """Refuse a model name no file system can hold (a path past its length limits), which every look at it would raise."""
    try:
        os.stat(Path(spec).expanduser())
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            shown = spec if len(spec) <= 100 else f"{spec[:100]}... ({len(spec):,} characters)"
            raise ModelError(f"model {shown!r} is too long a name for a file or directory; use a bundled alias ({', '.join(catalogue())}), "
                             "a .gguf file, a directory, or a hub id like org/name") from None


def check_not_a_lone_file(spec: str) -> None:
    """Refuse a local path that is neither a directory nor a `.gguf` file: a weights file named in place of its directory,
    a GGUF file without its ending, a FIFO or a device. transformers took each for a hub id and the error advised unsetting
    HF_HUB_OFFLINE, or it read a regular file whole as a config.json, gigabytes of weights included."""
    local = Path(spec).expanduser()
    try:
        mode = local.stat().st_mode
    except (OSError, ValueError):
        return  # nothing there: a hub id, or a path the caller reports missing
    if stat.S_ISDIR(mode):
        return
    if file_start(local, 4) == b"GGUF":
        raise ModelError(f"{spec} is a GGUF file whose name does not end in .gguf, by which lincorr knows one; rename it to end in .gguf")
    what = "a file" if stat.S_ISREG(mode) else kind_of(mode)
    raise ModelError(f"{spec} is {what}, not a model; a local model is a .gguf file or a directory from save_pretrained: "
                     "for a weights file, pass the directory that holds it with its config.json")


@contextlib.contextmanager
def transformers_refusals(spec: str, model_kwargs: Mapping):
    """transformers' refusals that no file of the model causes, as one ModelError: a package an option needs is not
    installed (bitsandbytes for a quantization_config), or a config value (often one of the model kwargs) has the wrong type."""
    from huggingface_hub.errors import StrictDataclassError

    try:
        yield
    except ImportError as error:
        install = f"pip install {error.name}" if error.name else "install what it names"
        raise ModelError(f"cannot load model '{spec}': a package it needs is missing ({' '.join(str(error).split())[:300]}); {install} in "
                         "lincorr's environment, or drop the option that needs it") from None
    except StrictDataclassError as error:
        cause = " ".join(str(error).split())[:300]
        fix = (f"fix that value in --model-kwargs {json.dumps(dict(model_kwargs))[:100]}" if model_kwargs
               else "fix that value in its config.json")
        raise ModelError(f"cannot load model '{spec}': its config refuses a value ({cause}); {fix}") from None


def check_finite_weights(name: str, model) -> None:
    """Refuse weights holding NaN or infinity: every logit would be NaN. In float32 or wider the file holds them (damaged,
    or a run that diverged) and no dtype helps; in a half-precision dtype the cast may have made them (float16 ends at
    65504), and float32 may help. One wide sum per tensor (NaN and infinity survive a sum), without a copy of the weights."""
    import torch

    for tensor_name, tensor in model.named_parameters():
        wide = torch.promote_types(tensor.dtype, torch.float32) if tensor.is_floating_point() else None
        if wide is None or tensor.device.type == "meta" or torch.isfinite(tensor.sum(dtype=wide)):
            continue
        held = f"the weights of '{name}' hold NaN or infinite values (first in {tensor_name})"
        if tensor.dtype == wide:
            raise ModelError(f"{held}; the file is damaged or the model diverged in training: load another checkpoint")
        raise DeviceError(f"{held} in {str(tensor.dtype).removeprefix('torch.')}, which may be the cast's overflow; "
                          "load it with --dtype float32")
