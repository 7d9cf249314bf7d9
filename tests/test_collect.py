"""Collection: values, caching (hits, corrupt entries), resuming, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.precision import float32_atol, tiny_forward_atol
from helpers.tiny import CITIES, NAMES, tiny_llama

import lincorr.collection.forward as forward
import lincorr.collection.pieces as pieces
from lincorr.cache import TableStore
from lincorr.collection import CollectSettings, collect
from lincorr.collection.settings import CPU_BATCH_SIZE
from lincorr.collection.tables import table_key
from lincorr.models import tokenize_prompts
from lincorr.domains import build_domain
from lincorr.errors import LincorrError
from lincorr.models import compile_forward, wrap_model
from lincorr.prompts import Prompt
from lincorr.templates import fill

TEMPLATE = "{} lives in the city of"


def collect_logits(lm, template, domain, inputs, **settings):
    """The one table of `template` over `domain`."""
    return collect(lm, {"city": Prompt("city", template, domain)}, inputs, CollectSettings(**settings))["city"]


@pytest.fixture
def domain(tokenizer):
    return build_domain(CITIES, tokenizer, name="city")


def test_values_match_one_prompt_at_a_time(tiny_lm, domain):
    inputs = NAMES[:10]
    table = collect_logits(tiny_lm, TEMPLATE, domain, inputs, batch_size=3, use_cache=False)
    assert table.values.shape == (10, len(CITIES)) and table.values.dtype == np.float32
    ids = torch.tensor(domain.token_ids)
    for i, x in enumerate(inputs):
        row = torch.tensor([tokenize_prompts(tiny_lm.tokenizer, [TEMPLATE.replace("{}", x)])[0]])
        with torch.no_grad():
            expected = tiny_lm.model(input_ids=row).logits[0, -1, ids].numpy()
        np.testing.assert_allclose(table.values[i], expected, atol=tiny_forward_atol(expected), rtol=0)  # batched vs alone


def test_cache_hit_skips_the_model(llama_lm, domain, monkeypatch):
    first = collect_logits(llama_lm, TEMPLATE, domain, NAMES[:8])
    monkeypatch.setattr(pieces, "domain_scores", lambda *a, **k: pytest.fail("recomputed a cached table"))
    second = collect_logits(llama_lm, TEMPLATE, domain, NAMES[:8])
    np.testing.assert_array_equal(first.values, second.values)


def test_corrupt_or_mismatched_cache_is_recomputed(llama_lm, domain):
    first = collect_logits(llama_lm, TEMPLATE, domain, NAMES[:8])
    key = table_key(llama_lm, TEMPLATE, domain, NAMES[:8], "logits", batch_size=128)
    cache = TableStore()
    header, values = cache.paths(key)
    np.savez(values, values=np.zeros_like(first.values))  # checksum no longer matches
    assert cache.load(key) is None
    again = collect_logits(llama_lm, TEMPLATE, domain, NAMES[:8])
    np.testing.assert_array_equal(again.values, first.values)
    values.write_bytes(b"not an npz")
    assert cache.load(key) is None
    header.write_text('{"key": {"model": "other"}}')
    assert cache.load(key) is None
    np.testing.assert_array_equal(collect_logits(llama_lm, TEMPLATE, domain, NAMES[:8]).values, first.values)


def test_interrupted_run_resumes_without_redoing_finished_rows(llama_lm, domain, monkeypatch):
    inputs = NAMES[:12]
    reference = collect_logits(llama_lm, TEMPLATE, domain, inputs, batch_size=4, use_cache=False)
    monkeypatch.setattr(pieces, "PIECE_BATCHES", 1)  # every batch a piece of its own
    real = pieces.domain_scores
    calls = {"n": 0}

    def interrupted(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(pieces, "domain_scores", interrupted)
    with pytest.raises(KeyboardInterrupt):
        collect_logits(llama_lm, TEMPLATE, domain, inputs, batch_size=4)

    computed = []

    def counting(lm, rows, *args, **kwargs):
        computed.append(len(rows))
        return real(lm, rows, *args, **kwargs)

    monkeypatch.setattr(pieces, "domain_scores", counting)
    resumed = collect_logits(llama_lm, TEMPLATE, domain, inputs, batch_size=4)
    assert sum(computed) == 4, "only the unfinished batch should be recomputed"
    # The same batches as an uninterrupted run, so the same bits.
    np.testing.assert_array_equal(resumed.values, reference.values)
    assert not list(TableStore().directory.glob("*.piece*.npz")), "the finished table replaces its pieces"


def test_non_finite_scores_are_refused(llama_lm, domain, monkeypatch):
    monkeypatch.setattr(pieces, "domain_scores", lambda lm, rows, *a, **k: torch.full((len(rows), len(domain)), float("nan")))
    llama_lm.head_verified = True
    with pytest.raises(LincorrError, match="NaN"):
        collect_logits(llama_lm, TEMPLATE, domain, NAMES[:4])


@pytest.mark.parametrize("template", ["lives in the city of", "{} and {} live in"])
def test_template_needs_exactly_one_slot(llama_lm, domain, template):
    with pytest.raises(LincorrError, match="exactly one"):
        collect_logits(llama_lm, template, domain, NAMES[:4])


def test_inputs_with_braces_are_filled_literally():
    assert fill("{} lives in", "a{}b") == "a{}b lives in"


def test_auto_batch_takes_the_largest_power_of_two_that_fits_under_the_token_cap():
    tried = []

    def fits_up_to(limit):
        return lambda size: tried.append(size) or size <= limit

    assert forward.largest_batch(fits_up_to(100), longest=10, max_tokens=65536) == 64
    assert tried == [1, 2, 4, 8, 16, 32, 64, 128], "it stops at the first batch that does not fit"
    assert forward.largest_batch(fits_up_to(10_000), longest=10, max_tokens=320) == 32, "the token cap binds"
    assert forward.largest_batch(fits_up_to(10_000), longest=1000, max_tokens=320) == 1
    with pytest.raises(LincorrError, match="one prompt does not fit"):
        forward.largest_batch(fits_up_to(0), longest=10)


def test_auto_batch_on_a_cpu_is_the_measured_default_and_keys_the_table_by_the_size_used(llama_lm, domain):
    auto = collect_logits(llama_lm, TEMPLATE, domain, NAMES[:8], batch_size="auto")
    fixed = collect_logits(llama_lm, TEMPLATE, domain, NAMES[:8], batch_size=CPU_BATCH_SIZE)
    np.testing.assert_array_equal(auto.values, fixed.values)
    assert len(list(TableStore().directory.glob("*.npz"))) == 1, "auto resolved to 128 shares the table collected at 128"


def test_a_half_precision_head_is_multiplied_in_float32(tokenizer):
    model = tiny_llama(len(tokenizer)).to(torch.bfloat16)
    lm = wrap_model(model, tokenizer)
    hidden = torch.randn(3, model.config.hidden_size, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    ids = torch.tensor([3, 5, 7])
    got = lm.head_logits(hidden, ids)
    exact = hidden.double() @ model.get_output_embeddings().weight[ids].double().T
    assert got.dtype == torch.float32
    # bfloat16 keeps 8 bits: a logit rounded to it would be off by ~1e-3 relative. Products of bfloat16 numbers are exact
    # in float32, so only the float32 sum of d_model products rounds: by at most float32_atol(sum of |products|, d_model).
    magnitude = (hidden.double().abs() @ model.get_output_embeddings().weight[ids].double().abs().T).max()
    assert torch.allclose(got.double(), exact, rtol=0, atol=float32_atol(magnitude, model.config.hidden_size))


def test_a_compiled_forward_gives_the_eager_logits_and_is_cached_apart(tokenizer, domain):
    eager = wrap_model(tiny_llama(len(tokenizer)), tokenizer)
    compiled = compile_forward(wrap_model(tiny_llama(len(tokenizer)), tokenizer))
    first = collect_logits(eager, TEMPLATE, domain, NAMES[:9], batch_size=4)
    second = collect_logits(compiled, TEMPLATE, domain, NAMES[:9], batch_size=4)  # batches of 4, 4 and 1
    np.testing.assert_allclose(second.values, first.values, atol=tiny_forward_atol(first.values), rtol=0)  # fused kernels round apart
    assert len(list(TableStore().directory.glob("*.npz"))) == 2, "compiled and eager tables have keys of their own"


@pytest.mark.parametrize("batch_size", [0, -3, "big", 2.5])
def test_settings_refuse_a_batch_size_that_is_neither_positive_nor_auto(batch_size):
    with pytest.raises(LincorrError, match="batch size"):
        CollectSettings(batch_size=batch_size)


def test_compile_in_the_settings_compiles_the_forward_once_and_keys_the_table_as_compiled(tokenizer, domain):
    lm = wrap_model(tiny_llama(len(tokenizer)), tokenizer)
    collect_logits(lm, TEMPLATE, domain, NAMES[:9], batch_size=4, compile=True)
    body = lm.compiled_body
    assert body is not None
    collect_logits(lm, TEMPLATE, domain, NAMES[:9], batch_size=4, compile=True)
    assert lm.compiled_body is body, "a compiled forward is not compiled again"
    (header,) = TableStore().directory.glob("*.json")
    assert '"forward": "compiled"' in header.read_text()
