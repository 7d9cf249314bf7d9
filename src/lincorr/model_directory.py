"""What a model directory must hold before transformers loads it (a config, safetensors weights, a tokenizer, no code of
its own unless trusted), and that the weights it loaded are every parameter the model has."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from lincorr.errors import ModelError
from lincorr.schema import TEXT, FileKind, Maybe, read_document

PICKLED_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
# Only what lincorr reads before transformers does: whether the model needs code of its own.
MODEL_CONFIG = FileKind("model config", {"model_type": Maybe(TEXT)}, "save the model again with save_pretrained(dir)", "save_pretrained")
SHOWN_TENSORS = 5  # how many missing tensors an error names


def check_all_weights_loaded(spec: str, loading: Mapping) -> None:
    """Refuse a model some of whose parameters its weight files do not hold: transformers would leave them at their random
    initialisation and only warn, and every number measured on it would be noise. (A tensor of another shape than the
    config's is refused by transformers itself, as a RuntimeError.)"""
    missing = sorted(loading.get("missing_keys") or ())
    if not missing:
        return
    shown = ", ".join(missing[:SHOWN_TENSORS]) + (f" and {len(missing) - SHOWN_TENSORS:,} more" if len(missing) > SHOWN_TENSORS else "")
    raise ModelError(f"the weights of '{spec}' hold no {len(missing):,} of the model's tensors ({shown}); they would be left at "
                     "random values: save the model whole with save_pretrained(dir), or name the directory that holds all its weights")


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
    if not any((directory / name).is_file() for name in TOKENIZER_FILES):
        raise ModelError(f"{directory} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); save it beside the model with "
                           "tokenizer.save_pretrained(dir)")
    config = read_document(directory / "config.json", MODEL_CONFIG)
    if not trust_remote_code and needs_remote_code(config):
        raise ModelError(f"{directory} needs its own Python code (model type '{config.get('model_type')}' is not in transformers); "
                           "pass --trust-remote-code only if you trust its author")


def needs_remote_code(config: dict) -> bool:
    """A config that names code of its own (auto_map) for a model type transformers does not know."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return "auto_map" in config and config.get("model_type") not in CONFIG_MAPPING
