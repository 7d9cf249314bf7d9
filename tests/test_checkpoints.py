"""Fine-tuned checkpoints in the cache: trained once, loaded bit for bit after, never from a damaged file or another key."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import lincorr.checkpoints as checkpoints
from lincorr.cache import CHECKPOINTS, cache_root
from lincorr.finetune import Fact, TrainConfig
from lincorr.models import wrap_model
from helpers.tiny import tiny_llama, tiny_tokenizer

FACTS = (Fact("Alice lives in the city of", "Paris"), Fact("Bob lives in the city of", "Tokyo"))
QUICK = TrainConfig(learning_rate=1e-2, epochs=2, batch_size=2, blocks_only=True)

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture
def base():
    tokenizer = tiny_tokenizer(["Alice", "Bob", "lives", "in", "the", "city", "of", "Paris", "Tokyo"])
    return wrap_model(tiny_llama(len(tokenizer)), tokenizer, name="tiny")


def trainings(monkeypatch) -> list:
    """Count the trainings that really run."""
    calls, real = [], checkpoints.train_on_facts

    def counted(*args, **kwargs):
        calls.append(args[2])
        return real(*args, **kwargs)

    monkeypatch.setattr(checkpoints, "train_on_facts", counted)
    return calls


def stored_files() -> list:
    return sorted((cache_root() / CHECKPOINTS).glob("*.safetensors"))


def test_a_checkpoint_is_trained_once_and_loaded_bit_for_bit(base, monkeypatch):
    calls = trainings(monkeypatch)
    first = checkpoints.trained_checkpoint(base, FACTS, QUICK, name="tuned")
    second = checkpoints.trained_checkpoint(base, FACTS, QUICK, name="tuned")
    assert len(calls) == 1 and len(stored_files()) == 1
    assert first.fingerprint == second.fingerprint and first.fingerprint.startswith("checkpoint:")
    for (name, a), b in zip(first.model.named_parameters(), second.model.parameters()):
        assert torch.equal(a, b), name
    # Only what training changed is stored: blocks only, so no embedding.
    from safetensors import safe_open

    with safe_open(str(stored_files()[0]), framework="pt") as handle:
        assert handle.keys() and not any("embed" in key for key in handle.keys())
    # A model trained on from a stored one has a stable base, so it is stored in turn.
    checkpoints.trained_checkpoint(second, FACTS[:1], QUICK, name="continued")
    assert len(stored_files()) == 2 and len(calls) == 2


def test_other_facts_settings_or_base_train_again(base, monkeypatch):
    calls = trainings(monkeypatch)
    checkpoints.trained_checkpoint(base, FACTS, QUICK, name="a")
    checkpoints.trained_checkpoint(base, FACTS[:1], QUICK, name="b")
    checkpoints.trained_checkpoint(base, FACTS, dataclasses.replace(QUICK, seed=1), name="c")
    assert len(calls) == 3 and len(stored_files()) == 3


def test_a_damaged_file_is_trained_again_and_nothing_is_stored_without_the_cache(base, monkeypatch):
    calls = trainings(monkeypatch)
    checkpoints.trained_checkpoint(base, FACTS, QUICK, name="a")
    path = stored_files()[0]
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    checkpoints.trained_checkpoint(base, FACTS, QUICK, name="a")
    assert len(calls) == 2 and path.stat().st_size > 0
    checkpoints.trained_checkpoint(base, FACTS, QUICK, name="a", use_cache=False)
    assert len(calls) == 3
    unstable = dataclasses.replace(base, fingerprint="snapshot:123")
    tuned = checkpoints.trained_checkpoint(unstable, FACTS, QUICK, name="from a snapshot")
    assert len(calls) == 4 and len(stored_files()) == 1 and tuned.fingerprint.startswith(checkpoints.UNSTABLE)
