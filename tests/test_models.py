"""Exact last-token logits: restricted head == the model's own, batched == one at a time."""

from __future__ import annotations

import types

import pytest
import torch
from helpers.precision import float32_atol, tiny_forward_atol
from helpers.tiny import CITIES, NAMES

from lincorr.collection.forward import domain_scores

from lincorr.models import left_pad, tokenize_prompts
from lincorr.errors import LincorrError
from lincorr.models import apply_logit_transform, load_model, wrap_model

PROMPTS = ["name1 lives in the city of", "name22 is", "Alice lives in the country of capital", "Paris"]


def full_forward(lm, prompt: str) -> torch.Tensor:
    """Reference: the model's own forward on one unpadded prompt, last position, all tokens."""
    ids = torch.tensor([tokenize_prompts(lm.tokenizer, [prompt])[0]])
    with torch.no_grad():
        return lm.model(input_ids=ids).logits[0, -1]


def city_ids(tokenizer) -> torch.Tensor:
    return torch.tensor(tokenizer.convert_tokens_to_ids(list(CITIES)))


def test_domain_logits_equal_model_logits(tiny_lm):
    ids = city_ids(tiny_lm.tokenizer)
    for prompt in PROMPTS:
        rows = tokenize_prompts(tiny_lm.tokenizer, [prompt])
        ours = domain_scores(tiny_lm, rows, ids, logprobs=False)[0]
        expected = full_forward(tiny_lm, prompt)[ids]
        torch.testing.assert_close(ours, expected, atol=tiny_forward_atol(expected), rtol=0)  # lincorr's head vs the model's


def test_left_padded_batch_equals_one_at_a_time(tiny_lm):
    ids = city_ids(tiny_lm.tokenizer)
    rows = tokenize_prompts(tiny_lm.tokenizer, PROMPTS)
    assert len({len(r) for r in rows}) > 1, "prompts must differ in length for padding to matter"
    batched = domain_scores(tiny_lm, rows, ids, logprobs=False)
    single = torch.cat([domain_scores(tiny_lm, [r], ids, logprobs=False) for r in rows])
    torch.testing.assert_close(batched, single, atol=tiny_forward_atol(single), rtol=0)  # padded batch vs alone


def test_gpt2_needs_positions_from_the_mask(tokenizer):
    """Without mask-derived position ids, a left-padded GPT-2 row would shift: the check above can fail."""
    from helpers.tiny import tiny_gpt2

    lm = wrap_model(tiny_gpt2(len(tokenizer)), tokenizer)
    rows = tokenize_prompts(tokenizer, PROMPTS)
    ids, mask = left_pad(rows, tokenizer.pad_token_id)
    with torch.no_grad():
        naive = lm.model(input_ids=ids, attention_mask=mask).logits[:, -1]
    single = torch.stack([full_forward(lm, p) for p in PROMPTS])
    assert (naive - single).abs().max() > 1e-3


def test_logprobs_are_full_vocabulary_log_softmax(tiny_lm):
    ids = city_ids(tiny_lm.tokenizer)
    rows = tokenize_prompts(tiny_lm.tokenizer, PROMPTS)
    ours = domain_scores(tiny_lm, rows, ids, logprobs=True)
    reference = torch.stack([full_forward(tiny_lm, p).log_softmax(-1)[ids] for p in PROMPTS])
    torch.testing.assert_close(ours, reference, atol=tiny_forward_atol(reference), rtol=0)  # batched log-softmax vs the model's


def test_log_normalizer_chunks_agree(llama_lm):
    hidden = torch.randn(3, llama_lm.model.config.hidden_size)
    whole = llama_lm.head_logits(hidden).logsumexp(-1)
    # logsumexp over chunks against one logsumexp over the whole vocabulary: float32 rounding of sums of ~150 terms.
    torch.testing.assert_close(llama_lm.log_normalizer(hidden, chunk=7), whole, atol=float32_atol(whole.abs().max(), 256), rtol=0)


def test_logit_transforms_follow_the_config():
    logits = torch.tensor([[-40.0, 0.5, 40.0]])
    assert torch.equal(apply_logit_transform(logits, types.SimpleNamespace()), logits)
    torch.testing.assert_close(apply_logit_transform(logits, types.SimpleNamespace(logit_scale=0.5)), logits * 0.5)
    torch.testing.assert_close(apply_logit_transform(logits, types.SimpleNamespace(logits_scaling=4.0)), logits / 4.0)
    capped = apply_logit_transform(logits, types.SimpleNamespace(final_logit_softcapping=30.0))
    torch.testing.assert_close(capped, 30.0 * torch.tanh(logits / 30.0))


def test_head_bias_is_included(tokenizer):
    from helpers.tiny import tiny_llama

    model = tiny_llama(len(tokenizer))
    head = model.get_output_embeddings()
    biased = torch.nn.Linear(head.in_features, head.out_features, bias=True)
    biased.weight.data.copy_(head.weight.data)
    torch.nn.init.normal_(biased.bias, std=1.0)
    model.set_output_embeddings(biased)
    lm = wrap_model(model, tokenizer)
    ids = city_ids(tokenizer)
    rows = tokenize_prompts(tokenizer, PROMPTS[:1])
    expected = full_forward(lm, PROMPTS[0])[ids]
    torch.testing.assert_close(domain_scores(lm, rows, ids, False)[0], expected, atol=tiny_forward_atol(expected), rtol=0)


def test_local_directory_round_trip(tmp_path, tokenizer):
    from helpers.tiny import tiny_llama

    model = tiny_llama(len(tokenizer))
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    first, second = load_model(str(tmp_path)), load_model(str(tmp_path))
    assert first.fingerprint == second.fingerprint
    assert first.tokenizer.padding_side == "left"
    ids = city_ids(tokenizer)
    rows = tokenize_prompts(tokenizer, [f"{NAMES[3]} lives in the city of"])
    torch.testing.assert_close(domain_scores(first, rows, ids, False), domain_scores(wrap_model(model, tokenizer), rows, ids, False))


@pytest.mark.parametrize(
    "spec, message",
    [
        ("no-such-alias", "unknown model"),
        ("missing/file.gguf", "does not exist"),
        ("some-org/not-downloaded-model", "cannot load model"),
    ],
)
def test_bad_model_specs_give_one_clear_error(spec, message):
    with pytest.raises(LincorrError, match=message) as error:
        load_model(spec)
    assert "\n" not in str(error.value)


def test_unknown_dtype():
    with pytest.raises(LincorrError, match="dtype"):
        load_model("gemma-3-270m-q4km", dtype="int3")


def test_model_kwargs_reach_from_pretrained_and_the_fingerprint(tmp_path, tokenizer):
    from helpers.tiny import tiny_llama

    tiny_llama(len(tokenizer)).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    plain = load_model(str(tmp_path))
    eager = load_model(str(tmp_path), model_kwargs={"attn_implementation": "eager"})
    assert eager.model.config._attn_implementation == "eager" != plain.model.config._attn_implementation
    # A kwarg can change the model's outputs (a config override), so its tables must not be served from the plain model's.
    assert eager.fingerprint != plain.fingerprint
    assert load_model(str(tmp_path), model_kwargs={"attn_implementation": "eager"}).fingerprint == eager.fingerprint


@pytest.mark.parametrize("kwargs, message", [
    ({"dtype": "float16"}, "use --dtype"),
    ({"device_map": "auto", "revision": "main"}, "use --device-map, --revision"),
])
def test_model_kwargs_may_not_contradict_lincorrs_own_options(kwargs, message):
    with pytest.raises(LincorrError, match=message):
        load_model("gemma-3-270m-q4km", model_kwargs=kwargs)


def test_revision_is_for_hub_models_only(tmp_path):
    with pytest.raises(LincorrError, match="--revision picks a version of a hub model"):
        load_model("gemma-3-270m-q4km", revision="main")
