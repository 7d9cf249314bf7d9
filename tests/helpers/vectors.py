"""Tiny tasks and plain forward hooks for the vector-arithmetic tests: the one-prompt-at-a-time side of each comparison."""

from __future__ import annotations

import contextlib

import torch

from lincorr.knowledge import TaskSpec

TEMPLATE = "the capital of {} is"
EXTRACTIVE = "{x} capital is {y} the capital of {x} is"


def task(pairs, demonstrations=2, name="toy") -> TaskSpec:
    return TaskSpec(name, TEMPLATE, EXTRACTIVE, tuple((a, tuple(b)) for a, b in pairs), demonstrations)


def cycled_task(demonstrations=2) -> TaskSpec:
    """Names mapped to cities in turn: the tiny model knows none of it, but ranks are ranks."""
    cities = ["Paris", "London", "Tokyo", "Rome", "Berlin"]
    return task([(f"name{i}", [cities[i % 5], cities[(i + 1) % 5]] if i % 3 == 0 else [cities[i % 5]]) for i in range(24)],
                demonstrations)


def planted_task(lm, first: int, count: int, name: str) -> TaskSpec:
    """Zero-shot pairs whose answer is the model's own greedy token, so every prompt is solved."""
    arguments = [f"name{i}" for i in range(first, first + count)]
    encoded = lm.tokenizer([TEMPLATE.replace("{}", a) for a in arguments], return_tensors="pt")
    with torch.inference_mode():
        top = lm.model(**encoded).logits[:, -1].argmax(-1)
    words = [lm.tokenizer.decode([int(t)]) for t in top]
    pairs = [(a, [w]) for a, w in zip(arguments, words) if not w.startswith("<") and w != a]
    assert len(pairs) >= 8, words
    return task(pairs, demonstrations=0, name=name)


def rank(logits, token):
    return int((logits > logits[token]).sum())


@contextlib.contextmanager
def hooked(module, edit):
    """`module`'s output passes through `edit` (a plain forward hook) inside the block."""
    handle = module.register_forward_hook(lambda _m, _a, out: edit(out))
    try:
        with torch.inference_mode():
            yield
    finally:
        handle.remove()


def last_outputs(lm, module, prompts) -> list[torch.Tensor]:
    """`module`'s output at the last position of each prompt, one plain forward each."""
    captured = []
    with hooked(module, lambda out: captured.append(out[0, -1].clone())):
        for prompt in prompts:
            lm.model(**lm.tokenizer(prompt, return_tensors="pt"))
    return captured


def added_at_last(vector):
    """A hook edit adding `vector` to the last position."""
    def edit(out):
        out = out.clone()
        out[0, -1] += vector
        return out

    return edit




def planted_write(lm, writes: dict[str, str], threshold: float = 0.6) -> None:
    """Plant, in place, FFN writes in a tiny GPT-2: attention, positions and the first FFN silenced (each position's
    stream is its token's embedding), then for each `trigger: answer` of `writes` one unit of the last block's FFN that
    fires only on `trigger` (a cosine above `threshold` with its normalised embedding) and writes `answer`'s head row, so a
    prompt ending in a trigger answers its answer and no other context does by itself."""
    model, vocab = lm.model, lm.tokenizer.get_vocab()
    blocks = model.transformer.h
    with torch.no_grad():
        model.transformer.wpe.weight.zero_()
        for block in blocks:
            block.attn.c_proj.weight.zero_()
            block.attn.c_proj.bias.zero_()
        blocks[0].mlp.c_proj.weight.zero_()
        blocks[0].mlp.c_proj.bias.zero_()
        ffn = blocks[-1].mlp
        ffn.c_proj.weight.zero_()
        ffn.c_proj.bias.zero_()
        for unit, (trigger, answer) in enumerate(writes.items()):
            detector = blocks[-1].ln_2(model.transformer.wte.weight[vocab[trigger]])
            ffn.c_fc.weight[:, unit] = detector / detector.norm()  # Conv1D weights are [d_in, d_out]
            ffn.c_fc.bias[unit] = -threshold * float(detector.norm())
            row = model.transformer.wte.weight[vocab[answer]]
            ffn.c_proj.weight[unit] = 2.0 * row / row.norm()
