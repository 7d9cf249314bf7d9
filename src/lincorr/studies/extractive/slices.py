"""A component's weights between two models of one architecture: its slices, swapped in and out, and its input under the other's.

The extractive scores compare an original model W with a fine-tuned W': they need W'_c - W_c for
each component, a model whose late weights are W' (swapped in place and back), and f_c(z'_c, W_c),
the original component applied to the input it receives in the fine-tuned model.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Sequence

import torch

from lincorr.internals import Component, component_parameters, head_indices, layout, run
from lincorr.internals.trace import NO_TOKENS
from lincorr.models import LM
from lincorr.studies.extractive.ocr import snapshot

__all__ = ["Slices", "component_weights", "weight_part", "weights_from", "sublayer_inputs", "mixed_copy", "shifted_outputs"]

# Weights of a component: parameter name -> (axis, indices) of its slice, or None for the whole tensor.
Slices = dict[str, tuple[int, torch.Tensor] | None]


def component_weights(lm: LM, component: Component) -> Slices:
    if component.kind == "head":
        return dict(head_indices(lm, component))
    return {name: None for name in component_parameters(lm, component)}


def weight_part(tensor: torch.Tensor, where: tuple[int, torch.Tensor] | None) -> torch.Tensor:
    return tensor if where is None else tensor.index_select(where[0], where[1].to(tensor.device))


@contextlib.contextmanager
def weights_from(model: torch.nn.Module, source: torch.nn.Module, slices: Sequence[Slices]) -> Iterator[None]:
    """Copy `source`'s values of the given weight slices into `model` for the block; restore them after."""
    own, other = dict(model.named_parameters()), dict(source.named_parameters())
    saved = []
    with torch.no_grad():
        for weights in slices:
            for name, where in weights.items():
                saved.append((name, where, weight_part(own[name], where).clone()))
                _put(own[name], where, weight_part(other[name], where))
    try:
        yield
    finally:
        with torch.no_grad():
            for name, where, value in reversed(saved):
                _put(own[name], where, value)


def _put(parameter: torch.Tensor, where: tuple[int, torch.Tensor] | None, value: torch.Tensor) -> None:
    if where is None:
        parameter.copy_(value)
    else:
        parameter.index_copy_(where[0], where[1].to(parameter.device), value)


@contextlib.contextmanager
def sublayer_inputs(lm: LM, store: dict, replay: bool) -> Iterator[None]:
    """Record (or, with `replay`, overwrite) the input of every block's attention and FFN sub-layer.

    The input of the first module on a sub-layer's path (`ArchMap.attn[0]`, `ArchMap.mlp[0]`) is the
    component's input z_c. A replay feeds each forward call the tensor recorded at the same call,
    so the batches must come in the same order and shapes as when they were recorded.
    """
    parts = layout(lm)
    handles: list = []
    calls: dict = {}

    def hook_for(key):
        def hook(_module, args, kwargs):
            if not replay:
                store.setdefault(key, []).append((args[0] if args else kwargs["hidden_states"]).detach())
                return None
            index = calls.get(key, 0)
            calls[key] = index + 1
            value = store[key][index]
            return ((value, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": value})

        return hook

    try:
        for layer in range(parts.n_layers):
            for kind, path in (("attn", parts.arch.attn[0]), ("mlp", parts.arch.mlp[0])):
                module = parts.block(layer).get_submodule(path)
                handles.append(module.register_forward_pre_hook(hook_for((kind, layer)), with_kwargs=True))
        yield
    finally:
        for handle in handles:
            handle.remove()


def mixed_copy(lm: LM) -> LM:
    """A copy of `lm` whose weights change in place, without gradients (they are taken by activation only)."""
    model = copy.deepcopy(lm.model)
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    return snapshot(model, lm.tokenizer, f"{lm.name} (mixed weights)")


def shifted_outputs(original: LM, tuned: LM, prompts: list[str], components: Sequence[Component], batch_size: int):
    """f_c(z'_c, W_c) at every position: the original weights applied to the fine-tuned model's sub-layer inputs (a Trace)."""
    inputs: dict = {}
    with sublayer_inputs(tuned, inputs, replay=False):
        run(tuned, prompts, token_ids=NO_TOKENS, batch_size=batch_size)
    with sublayer_inputs(original, inputs, replay=True):
        return run(original, prompts, capture=components, positions="all", token_ids=NO_TOKENS, batch_size=batch_size)
