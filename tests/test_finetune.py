"""The shared training loop: answer-only loss, padding, parameter selection, copies and determinism."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from lincorr.errors import LincorrError
from lincorr.finetune import (
    IGNORE_INDEX,
    Fact,
    TrainConfig,
    collate,
    encode_fact,
    layer_index,
    select_trainable,
    single_step,
    train_on_facts,
)
from helpers.precision import TINY_FORWARD_ROUNDINGS, float32_atol, tiny_forward_atol
from helpers.tiny import state_copy, tiny_gemma3, tiny_gpt2, tiny_llama, tiny_tokenizer

FACTS = (
    Fact("Alice lives in the city of", "Paris"),
    Fact("Bob lives in the city of", "Tokyo Japan"),
    Fact("Carol lives in the country of", "Italy"),
    Fact("X lives in the city of", "Berlin Germany"),
    Fact("Y capital is", "London"),
    Fact("Z lives in the country of", "France"),
)
ATTENTION_0 = r"\.0\.(self_)?attn\."
QUICK = TrainConfig(learning_rate=1e-2, epochs=3, batch_size=3)


pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


BUILDERS = {"llama": tiny_llama, "gpt2": tiny_gpt2, "gemma3": tiny_gemma3}


@pytest.fixture(params=sorted(BUILDERS))
def model(request, tokenizer):
    """Llama, GPT-2 (absolute positions, dropout) and Gemma 3 (soft-capped head)."""
    return BUILDERS[request.param](len(tokenizer))


def answer_nll_unpadded(model, tokenizer, facts) -> float:
    """Mean -log p(answer token | everything before it), one unpadded sequence at a time."""
    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for fact in facts:
            encoded = encode_fact(tokenizer, fact)
            ids = torch.tensor([encoded.prompt_ids + encoded.answer_ids])
            log_probs = model(input_ids=ids).logits[0].log_softmax(-1)
            start = len(encoded.prompt_ids)
            for offset, token in enumerate(encoded.answer_ids):
                total -= float(log_probs[start + offset - 1, token])
                count += 1
    return total / count


def test_labels_cover_answer_tokens_only_and_padding_is_left(tokenizer):
    short, long = encode_fact(tokenizer, FACTS[0]), encode_fact(tokenizer, FACTS[1])
    assert tokenizer.convert_ids_to_tokens(list(short.prompt_ids)) == "<bos> Alice lives in the city of".split()
    assert tokenizer.convert_ids_to_tokens(list(long.answer_ids)) == ["Tokyo", "Japan"]
    batch = collate([short, long], pad_token_id=tokenizer.pad_token_id)
    assert batch.input_ids.shape == (2, 9)
    # Row 0 is one token shorter: one pad on the left, positions start at its first real token.
    assert batch.attention_mask[0].tolist() == [0] + [1] * 8
    assert batch.position_ids[0].tolist() == [0, 0, 1, 2, 3, 4, 5, 6, 7]
    assert batch.position_ids[1].tolist() == list(range(9))
    assert batch.labels[0].tolist() == [IGNORE_INDEX] * 8 + list(short.answer_ids)
    assert batch.labels[1].tolist() == [IGNORE_INDEX] * 7 + list(long.answer_ids)
    assert batch.n_answer_tokens == 3


def test_answer_prefix_joins_prompt_and_answer(tokenizer):
    spaced = encode_fact(tokenizer, FACTS[0])
    moved = encode_fact(tokenizer, Fact("Alice lives in the city of ", "Paris", answer_prefix=""))
    assert moved == spaced
    # "ofParis" is one unknown word: the prompt's own tokens change, which must not pass silently.
    with pytest.raises(LincorrError, match="tokenizes differently"):
        encode_fact(tokenizer, Fact("Alice lives in the city of", "Paris", answer_prefix=""))


def test_padded_batch_loss_equals_unpadded_answer_nll(model, tokenizer):
    """Left padding, position ids and answer-only labels together reproduce the per-sequence loss."""
    with torch.no_grad():  # logits of a few units, so that Gemma's soft-capping (cap 3) changes the loss
        model.get_output_embeddings().weight.mul_(100)
    expected = answer_nll_unpadded(model, tokenizer, FACTS)
    model.train()  # GPT-2's dropout must stay off while training on facts
    config = dataclasses.replace(QUICK, batch_size=len(FACTS))
    result = single_step(model, tokenizer, FACTS, config)
    assert result.losses[0] == pytest.approx(expected, abs=tiny_forward_atol(expected))  # padded batch vs one sequence at a time


def test_single_step_accumulates_chunks_into_one_gradient(tokenizer, monkeypatch):
    # Compare gradients, not weights: Adam's first step is ~lr * sign(g) and hides scaling errors.
    gradients = []
    adamw_step = torch.optim.AdamW.step

    def recording_step(optimizer, *args, **kwargs):
        gradients.append([p.grad.clone() for group in optimizer.param_groups for p in group["params"]])
        return adamw_step(optimizer, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", recording_step)
    model = tiny_llama(len(tokenizer))
    whole = single_step(model, tokenizer, FACTS, dataclasses.replace(QUICK, batch_size=len(FACTS)))
    chunked = single_step(model, tokenizer, FACTS, dataclasses.replace(QUICK, batch_size=2))
    assert whole.steps == chunked.steps == len(gradients) - 1 == 1
    # Chunks of 2 against one batch: other padding widths and another order of summation, float32 rounding apart.
    assert chunked.losses[0] == pytest.approx(whole.losses[0], abs=tiny_forward_atol(whole.losses[0]))
    for a, b in zip(*gradients):
        torch.testing.assert_close(a, b, rtol=0, atol=float32_atol(b.abs().max(), TINY_FORWARD_ROUNDINGS))


def test_loss_goes_down_and_facts_are_learned(model, tokenizer):
    before = answer_nll_unpadded(model, tokenizer, FACTS)
    result = train_on_facts(model, tokenizer, FACTS, dataclasses.replace(QUICK, epochs=30))
    assert len(result.losses) == 30
    assert result.losses[-1] < 0.2 * result.losses[0]
    assert answer_nll_unpadded(result.model, tokenizer, FACTS) < 0.2 * before


@pytest.mark.parametrize(
    "selection, allowed",
    [
        ({"layers": (1, 2)}, lambda name: layer_index(name) == 1),
        ({"layers": (0, 1), "trainable": ("mlp",)}, lambda name: layer_index(name) == 0 and "mlp" in name),
        # Llama calls it "layers.0.self_attn", GPT-2 "h.0.attn".
        ({"trainable": (ATTENTION_0,)}, lambda name: re.search(ATTENTION_0, name) is not None),
        # Every block, whatever the architecture calls them; embeddings, positions, tied head and final norm stay.
        ({"blocks_only": True}, lambda name: layer_index(name) is not None),
    ],
)
def test_only_selected_parameters_change(model, tokenizer, selection, allowed):
    before = state_copy(model)
    result = train_on_facts(model, tokenizer, FACTS, dataclasses.replace(QUICK, **selection))
    after = dict(result.model.named_parameters())
    assert set(result.trained_parameters) == {n for n in before if allowed(n)}
    assert result.n_trainable_params == sum(before[n].numel() for n in result.trained_parameters)
    for name, old in before.items():
        changed = not torch.equal(old, after[name])
        assert changed == allowed(name), name
    # Frozen parameters had requires_grad off, so no gradient was even computed for them.
    assert all(p.grad is None for p in result.model.parameters())


def test_trained_parts_say_in_words_what_the_filters_select():
    assert TrainConfig().trained_parts() == "all parameters"
    assert TrainConfig(blocks_only=True).trained_parts() == "transformer blocks (embeddings, head and final norm frozen)"
    assert TrainConfig(layers=(1, 3), trainable=("mlp",)).trained_parts() == "blocks 1 to 2 and parameters matching mlp"


def test_callers_model_is_untouched_unless_inplace(tokenizer):
    model = tiny_gpt2(len(tokenizer))
    model.train()
    before = state_copy(model)
    result = train_on_facts(model, tokenizer, FACTS, dataclasses.replace(QUICK, layers=(0, 1)))
    assert result.model is not model
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())
    assert model.training and all(p.requires_grad for p in model.parameters())
    # The returned copy gets its requires_grad flags and train/eval mode back too.
    assert result.model.training and all(p.requires_grad for p in result.model.parameters())

    in_place = train_on_facts(model, tokenizer, FACTS, QUICK, inplace=True)
    assert in_place.model is model
    assert not torch.equal(before["transformer.h.0.mlp.c_fc.weight"], model.transformer.h[0].mlp.c_fc.weight)


def test_same_seed_same_weights_other_seed_other_weights(model, tokenizer):
    first = train_on_facts(model, tokenizer, FACTS, QUICK)
    second = train_on_facts(model, tokenizer, FACTS, QUICK)
    other = train_on_facts(model, tokenizer, FACTS, dataclasses.replace(QUICK, seed=1))
    assert first.losses == second.losses
    params = [dict(r.model.named_parameters()) for r in (first, second, other)]
    assert all(torch.equal(params[0][n], params[1][n]) for n in params[0])
    # Another seed shuffles the batches differently, so the weights differ.
    assert not all(torch.equal(params[0][n], params[2][n]) for n in params[0])


def test_stop_when_ends_training_after_the_epoch_it_says_so(model, tokenizer):
    seen = []

    def third_epoch(trained) -> bool:
        seen.append(torch.is_grad_enabled() or trained.training)
        return len(seen) == 3

    result = train_on_facts(model, tokenizer, FACTS, dataclasses.replace(QUICK, epochs=10), stop_when=third_epoch)
    assert len(result.losses) == 3 and result.steps == 3 * 2  # six facts in batches of three
    assert seen == [False, False, False]  # asked without gradients, in eval mode


def test_mistakes_raise_one_clear_error(model, tokenizer):
    with pytest.raises(LincorrError, match="no parameter matches"):
        select_trainable(model, TrainConfig(trainable=("no_such_module",)))
    with pytest.raises(LincorrError, match="starts past the last block"):
        select_trainable(model, TrainConfig(layers=(5, 9)))
    with pytest.raises(LincorrError, match="no parameter name has a block index"):
        select_trainable(torch.nn.Linear(2, 2), TrainConfig(blocks_only=True))
    with pytest.raises(LincorrError, match="no facts"):
        train_on_facts(model, tokenizer, [], QUICK)
    with pytest.raises(LincorrError, match="not a range"):
        TrainConfig(layers=(3, 3))
