"""Shared fixtures: tiny in-code models and tokenizers, an isolated cache, offline hub."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tiny import WORDS, one_thread, tiny_gemma3, tiny_gpt2, tiny_llama, tiny_tokenizer  # noqa: E402

from lincorr.models import wrap_model  # noqa: E402

NAMES = tuple(f"name{i}" for i in range(120))
CITIES = ("Paris", "London", "Tokyo", "Rome", "Berlin")
COUNTRIES = ("France", "England", "Japan", "Italy", "Germany")


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own lincorr cache directory."""
    monkeypatch.setenv("LINCORR_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def single_thread():
    """Torch on one thread for a module of tiny-model training: hand-offs cost more than the arithmetic."""
    with one_thread():
        yield


@pytest.fixture(scope="session")
def tokenizer():
    """Word-level tokenizer over the prompt words, cities, countries and 120 input names."""
    return tiny_tokenizer(list(WORDS) + list(NAMES))


MODEL_BUILDERS = {"llama": tiny_llama, "gpt2": tiny_gpt2, "gemma3": tiny_gemma3}


@pytest.fixture(params=sorted(MODEL_BUILDERS))
def tiny_lm(request, tokenizer):
    """Each tiny architecture wrapped as an LM (GPT-2: absolute positions; Gemma 3: soft-capped head)."""
    model = MODEL_BUILDERS[request.param](len(tokenizer))
    return wrap_model(model, tokenizer, name=f"tiny-{request.param}")


@pytest.fixture
def llama_lm(tokenizer):
    return wrap_model(tiny_llama(len(tokenizer)), tokenizer, name="tiny-llama")
