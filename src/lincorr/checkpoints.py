"""Fine-tuned checkpoints in the cache: a model trained on facts is stored once (safetensors) and loaded by every later run.

A checkpoint's key holds everything the trained weights depend on: the base model's
fingerprint, the facts (a digest of prompts and answers) and the training settings; the record of
the code that trained it (`recording`) is stored beside, and a checkpoint is loaded only while none
of that code has changed. Only the parameters that training changed are written; a load copies the
base model and puts them in. A trained model gets the fingerprint `checkpoint:<digest of its key and
its code's record>`, the same whether it was trained now or loaded, so a model
trained from a stored checkpoint (continued training) is stored in turn. A base whose
fingerprint is not stable (`snapshot:`, a model trained without the cache) is never stored: no
later run could ask for it.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save

from lincorr import recording
from lincorr.cache import CHECKPOINTS, cache_directory, canonical_json, key_digest
from lincorr.filesystem import atomic_file
from lincorr.finetune import Fact, TrainConfig, train_on_facts
from lincorr.models import LM

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = ["checkpoint_key", "trained_checkpoint", "UNSTABLE"]

UNSTABLE = "snapshot:"  # the fingerprint prefix of a model that exists only in this process (`studies.extractive.ocr.snapshot`)


def checkpoint_key(base: LM, facts: Sequence[Fact], config: TrainConfig) -> dict:
    """What the weights trained from `base` on `facts` under `config` depend on in data (as JSON reads it back)."""
    text = canonical_json({"facts": [[f.prompt, f.answer, f.answer_prefix] for f in facts]})
    return json.loads(canonical_json({"base": base.fingerprint, "facts": hashlib.sha256(text.encode()).hexdigest(),
                                      "train": dataclasses.asdict(config)}))


def trained_checkpoint(base: LM, facts: Sequence[Fact], config: TrainConfig, *, name: str, use_cache: bool = True,
                       after_epoch: Callable[[int, torch.nn.Module], None] | None = None) -> LM:
    """`base` fine-tuned on `facts`: loaded from the cache when stored there, else trained (and stored when it can be found again).

    `after_epoch` is called during training only (a loaded checkpoint has no epochs), so a caller that needs it
    passes `use_cache=False`.
    """
    key = checkpoint_key(base, facts, config)
    digest = key_digest(key)
    cacheable = use_cache and not base.fingerprint.startswith(UNSTABLE) and after_epoch is None
    path = cache_directory(CHECKPOINTS) / f"{digest}.safetensors" if cacheable else None
    if path is not None and (loaded := _load(path, key, base)) is not None:
        model, record = loaded
        return LM(name, model, base.tokenizer, f"checkpoint:{key_digest({**key, 'code': record})}")
    with recording.window() as ran:
        trained = train_on_facts(base.model, base.tokenizer, facts, config, after_epoch=after_epoch).model
    if path is not None and ran.complete:
        _store(path, key, ran.record, trained, base.model)
    stored = path is not None and ran.complete
    return LM(name, trained, base.tokenizer, f"{'checkpoint:' if stored else UNSTABLE}{key_digest({**key, 'code': ran.record})}")


def _store(path: Path, key: dict, record: dict, trained: torch.nn.Module, base: torch.nn.Module) -> None:
    """The parameters `trained` changed from `base`, with the key and the record of the code that trained it in the
    file's metadata, written whole or not at all."""
    own = dict(base.named_parameters())
    changed = {name: p.detach().contiguous() for name, p in trained.named_parameters() if not torch.equal(p, own[name])}
    with atomic_file(path, "wb") as out:
        out.write(save(changed, metadata={"key": canonical_json(key), "code": canonical_json(record)}))


def _load(path: Path, key: dict, base: LM) -> tuple[PreTrainedModel, dict] | None:
    """A copy of `base` with the stored parameters put in, and the record of the code that trained them; None when the
    file is missing, damaged, another key's, or trained by code that has changed since."""
    if not path.is_file():
        return None
    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
            if metadata.get("key") != canonical_json(key):
                return None
            record = json.loads(metadata.get("code", "null"))
        if not recording.reused(record):
            return None
        stored = load_file(str(path))
    except (SafetensorError, OSError, ValueError):
        return None
    model = copy.deepcopy(base.model)
    own = dict(model.named_parameters())
    if any(name not in own or own[name].shape != value.shape for name, value in stored.items()):
        return None
    with torch.no_grad():
        for name, value in stored.items():
            own[name].copy_(value)
    return model, record
