"""One batched forward with captures and interventions, through plain PyTorch forward hooks."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import cast

import torch
import torch.nn.functional as F

from lincorr.models import left_pad, tokenize_prompts
from lincorr.errors import LincorrError
from lincorr.internals.arch import Component, Layout, as_component, check_component, layout
from lincorr.models import LM
from lincorr.progress import progress_bar

# "last", "all", one offset or a list of offsets: negative offsets count from each row's end
# (-1 = last token), non-negative ones from its first real token (0 = BOS where the model uses one).
# Patches also take "content": every real token that is not a special one (BOS, padding: `special_ids`), which stay
# as the model computed them (writing into BOS, the attention sink, would break what every position reads).
Positions = str | int | Sequence[int]
# Asked for as `token_ids` when only activations are wanted: the head then computes nothing.
NO_TOKENS = torch.empty(0, dtype=torch.long)


@dataclasses.dataclass(frozen=True)
class Patch:
    """Write `value` into `component` at `position`, replacing it (mode "replace") or added to it ("add").

    `value` is shaped like what `run(..., capture=[component], positions=position)` returns for the
    same prompts, or broadcasts to it: `[d]` (d = d_model, or head_dim for heads) for every prompt;
    with a leading prompt axis, `[n_prompts, d]` for one position, `[n_prompts, n_positions, d]`
    for a list, `[n_prompts, width, d]` for "all".
    """

    component: Component | str
    value: torch.Tensor
    position: Positions = "last"
    mode: str = "replace"

    def __post_init__(self):
        object.__setattr__(self, "component", as_component(self.component))
        if self.mode not in ("replace", "add"):
            raise LincorrError(f"Patch mode '{self.mode}' is unknown; use 'replace' or 'add'")


@dataclasses.dataclass(frozen=True)
class Ablate:
    """Replace `component` at `position` by zeros (how="zero") or by `mean` (how="mean", see `mean_activation`)."""

    component: Component | str
    how: str = "zero"
    mean: torch.Tensor | None = None
    position: Positions = "last"

    def as_patch(self) -> Patch:
        if self.how == "zero":
            return Patch(self.component, torch.zeros(()), self.position)
        if self.how == "mean" and self.mean is not None:
            return Patch(self.component, self.mean, self.position)
        if self.how == "mean":
            raise LincorrError(f"Ablate({self.component}, how='mean') needs mean=mean_activation(lm, reference_prompts, component)")
        raise LincorrError(f"Ablate how='{self.how}' is unknown; use 'zero' or 'mean'")


@dataclasses.dataclass
class Trace:
    """What one `run` saw, rows in prompt order, on the model's device and dtype.

    `activations[c]` is `[batch, d]` for one position, `[batch, n_positions, d]` for a list and
    `[batch, width, d]` for "all" (d = d_model, or head_dim for heads; width = the longest prompt,
    left-padded: read `attention_mask`, 1 = real token). `logits` are the last position's, `[batch, k]`,
    over the requested token ids (the full vocabulary by default).
    """

    activations: dict[Component, torch.Tensor]
    logits: torch.Tensor
    attention_mask: torch.Tensor

    def __getitem__(self, component: Component | str) -> torch.Tensor:
        return self.activations[as_component(component)]


@dataclasses.dataclass
class Rows:
    """The batch in flight: its rows' indices among all prompts and their real-token counts, both `[b]`, and which of its
    columns hold a real token that is not a special one, `[b, width]`."""

    index: torch.Tensor = NO_TOKENS
    lengths: torch.Tensor = NO_TOKENS
    content: torch.Tensor = NO_TOKENS


def run(
    lm: LM,
    prompts: Sequence[str] | Sequence[Sequence[int]],
    *,
    capture: Sequence[Component | str] = (),
    positions: Positions = "last",
    interventions: Sequence[Patch | Ablate] = (),
    token_ids: torch.Tensor | None = None,
    grad: bool = False,
    batch_size: int = 32,
) -> Trace:
    """Run prompts (strings, or token-id rows) with interventions applied, capturing components.

    Prompts run in length-sorted, left-padded batches with position ids from the attention mask,
    exactly as `LM.last_hidden` does. Interventions apply in the order given, before captures, so
    a captured component shows its patched value. With `grad=True` all prompts run as ONE batch
    in the given order and every captured tensor is part of the graph: one
    `torch.autograd.grad(scalar, [trace[c] for c in capture])` gives d scalar / d activation for
    every component at once (also when the model's parameters are frozen).
    """
    parts = layout(lm)
    rows, captures, patches, mask = checked_request(lm, parts, prompts, capture, positions, interventions, batch_size)
    order = list(range(len(rows))) if grad else sorted(range(len(rows)), key=lambda i: len(rows[i]))
    batches = [order] if grad else [order[s:s + batch_size] for s in range(0, len(order), batch_size)]
    flight = Rows()
    special = special_ids(lm.tokenizer)
    stores: dict[Component, list[torch.Tensor]] = {c: [] for c in captures}
    logits = []
    handles = []
    try:
        for patch in patches:
            value, per_prompt = full_value(parts, patch, len(rows), mask.shape[1])
            handles.append(hook_site(parts, patch.component, patch_edit(parts, patch, value, per_prompt, flight)))
        for component in captures:
            handles.append(hook_site(parts, component, capture_edit(parts, component, positions, flight, stores[component], grad)))
        with torch.enable_grad() if grad else torch.inference_mode():
            for batch in progress_bar(batches, desc="internals", unit="batch"):
                ids, batch_mask = left_pad([rows[i] for i in batch], lm.tokenizer.pad_token_id)
                flight.index, flight.lengths = torch.tensor(batch), batch_mask.sum(1)
                flight.content = batch_mask.bool() & ~torch.isin(ids, special)
                logits.append(lm.head_logits(lm.last_hidden(ids, batch_mask), token_ids))
    finally:
        for handle in handles:
            handle.remove()

    inverse = torch.empty(len(order), dtype=torch.long)
    inverse[torch.tensor(order)] = torch.arange(len(order))

    def assemble(pieces: list[torch.Tensor], padded: bool) -> torch.Tensor:
        if grad:
            return pieces[0]  # the graph's own tensor: a concatenation would be a copy off the graph
        if padded:
            pieces = [F.pad(p, (0, 0, mask.shape[1] - p.shape[1], 0)) for p in pieces]
        return torch.cat(pieces)[inverse.to(pieces[0].device)]

    activations = {c: assemble(stores[c], positions == "all") for c in captures}
    return Trace(activations, assemble(logits, False), mask)



def checked_request(lm: LM, parts, prompts, capture, positions: Positions, interventions, batch_size: int):
    """A `run`'s token rows, captures, patches and padded mask `[n_prompts, max_len]`, every name, position and size checked
    before any forward."""
    rows = token_rows(lm, prompts)
    captures = [as_component(c) for c in capture]
    patches = [i.as_patch() if isinstance(i, Ablate) else i for i in interventions]
    for component in captures + [cast(Component, p.component) for p in patches]:  # Patch made each a Component
        check_component(parts, component)
    if batch_size < 1:
        raise LincorrError(f"batch size must be positive, got {batch_size}")
    _, mask = left_pad(rows, lm.tokenizer.pad_token_id)
    every_row = Rows(torch.arange(len(rows)), mask.sum(1))
    if positions == "content":
        raise LincorrError("position 'content' is for patches and ablations; capture 'all' and read `attention_mask`")
    for requested in [positions] + [p.position for p in patches]:
        position_index(every_row, mask.shape[1], requested)
    return rows, captures, patches, mask

def mean_activation(
    lm: LM,
    prompts: Sequence[str] | Sequence[Sequence[int]],
    component: Component | str,
    *,
    position: Positions = "last",
    batch_size: int = 32,
) -> torch.Tensor:
    """Mean of `component` over the prompts at `position`: `[d]` (`[n_positions, d]` for a list), for `Ablate(how="mean")`."""
    if position == "all":
        raise LincorrError("mean_activation over 'all' positions would average padding; use 'last' or explicit offsets")
    captured = run(lm, prompts, capture=[component], positions=position, token_ids=NO_TOKENS,
                   batch_size=batch_size)[component]
    return captured.float().mean(0).to(captured.dtype)


def special_ids(tokenizer) -> torch.Tensor:
    """The ids that position "content" skips: the tokenizer's special tokens but its unknown one, which stands for text."""
    return torch.tensor(sorted(set(tokenizer.all_special_ids) - {tokenizer.unk_token_id}), dtype=torch.long)


def token_rows(lm: LM, prompts: Sequence[str] | Sequence[Sequence[int]] | str) -> list[list[int]]:
    """Token ids per prompt: strings are tokenized as collection does, id rows pass through."""
    if isinstance(prompts, str):
        prompts = [prompts]
    if len(prompts) == 0:
        raise LincorrError("no prompts given; pass at least one prompt or token-id row")
    if isinstance(prompts[0], str):
        return tokenize_prompts(lm.tokenizer, cast(Sequence[str], prompts))
    return [list(row) for row in cast(Sequence[Sequence[int]], prompts)]


def hook_site(parts: Layout, component: Component, edit) -> torch.utils.hooks.RemovableHandle:
    """Hook the module holding `component` so its tensor passes through `edit` (which may return None: unchanged).

    Heads live in the output projection's input (a pre-hook); every other component is a module's
    output, the first element when the module returns a tuple (attention modules do).
    """
    module, is_input = parts.site(component)
    if is_input:
        def pre_hook(_module, args):
            edited = edit(args[0])
            return None if edited is None else (edited, *args[1:])

        return module.register_forward_pre_hook(pre_hook)

    def hook(_module, _args, output):
        edited = edit(output[0] if isinstance(output, tuple) else output)
        if edited is None or not isinstance(output, tuple):
            return edited
        return (edited, *output[1:])

    return module.register_forward_hook(hook)


def split(parts: Layout, component: Component, x: torch.Tensor) -> torch.Tensor:
    """The component's part of its site tensor `[b, w, ...]`: itself, or one head of `[b, w, n_heads * head_dim]`."""
    if component.kind != "head":
        return x
    return x.unflatten(-1, (parts.n_heads, parts.head_dim))[:, :, component.head]


def merge(parts: Layout, component: Component, x: torch.Tensor, part: torch.Tensor) -> torch.Tensor:
    """The site tensor with the component's part replaced (out of place, so autograd sees it)."""
    if component.kind != "head":
        return part
    heads = x.unflatten(-1, (parts.n_heads, parts.head_dim)).clone()
    heads[:, :, component.head] = part
    return heads.flatten(-2)


def position_index(rows: Rows, width: int, positions: Positions) -> torch.Tensor | None:
    """Column indices into left-padded rows: `[b]` for one position, `[b, n]` for a list, None for "all" and "content"."""
    if positions in ("all", "content"):
        return None
    if positions == "last":
        return torch.full((len(rows.lengths),), width - 1)
    if isinstance(positions, str):
        raise LincorrError(f"position '{positions}' is unknown; use 'last', 'all', an offset or a list of offsets")
    offsets = torch.tensor(positions, dtype=torch.long)
    lengths = rows.lengths[:, None] if offsets.dim() else rows.lengths
    outside = ((offsets >= lengths) | (offsets < -lengths)).reshape(len(rows.lengths), -1).any(1)
    if outside.any():
        row = int(outside.nonzero()[0])
        count = int(rows.lengths[row])
        raise LincorrError(f"positions {positions} fall outside prompt {int(rows.index[row])} ({count} tokens); use offsets in -{count}..{count - 1}")
    return torch.where(offsets < 0, width + offsets, width - lengths + offsets)


def select(x: torch.Tensor, index: torch.Tensor | None) -> torch.Tensor:
    """`x[b, w, d]` at the columns of `index` (see `position_index`)."""
    if index is None:
        return x
    batch = torch.arange(x.shape[0], device=x.device)
    index = index.to(x.device)
    return x[batch[:, None], index] if index.dim() == 2 else x[batch, index]


def put(x: torch.Tensor, index: torch.Tensor | None, values: torch.Tensor) -> torch.Tensor:
    """`x` with `values` written at the columns of `index`, out of place."""
    if index is None:
        return values
    batch = torch.arange(x.shape[0], device=x.device)
    index = index.to(x.device)
    out = x.clone()
    if index.dim() == 2:
        out[batch[:, None], index] = values
    else:
        out[batch, index] = values
    return out


def full_value(parts: Layout, patch: Patch, n_prompts: int, width: int) -> tuple[torch.Tensor, bool]:
    """The patch value checked against the capture shape, and whether it has a prompt axis (then expanded to it)."""
    d = parts.head_dim if cast(Component, patch.component).kind == "head" else parts.d_model  # Patch made it a Component
    if patch.position in ("all", "content"):
        middle = (width,)
    elif isinstance(patch.position, str):
        middle = ()
    else:
        middle = tuple(torch.tensor(patch.position).shape)
    expected = (n_prompts, *middle, d)
    value = torch.as_tensor(patch.value)
    try:
        fits = torch.broadcast_shapes(value.shape, expected) == expected
    except RuntimeError:
        fits = False
    if not fits:
        raise LincorrError(f"{patch.component}: a patch value of shape {tuple(value.shape)} does not fit {list(expected)}; pass [{d}] or one row per prompt")
    per_prompt = value.dim() == len(expected)
    return (value.broadcast_to(expected) if per_prompt else value), per_prompt


def patch_edit(parts: Layout, patch: Patch, value: torch.Tensor, per_prompt: bool, flight: Rows):
    """The hook edit writing `value` (rows of all prompts when `per_prompt`) into the batch in flight."""

    def edit(x: torch.Tensor) -> torch.Tensor:
        part = split(parts, cast(Component, patch.component), x)  # Patch made it a Component
        index = position_index(flight, x.shape[1], patch.position)
        current = select(part, index)
        rows = value[flight.index.to(value.device)] if per_prompt else value
        if patch.position in ("all", "content") and rows.dim() >= 2:  # a width axis: keep this batch's (rightmost) columns
            rows = rows[..., -x.shape[1]:, :]
        rows = rows.to(current.device, current.dtype)
        # contiguous: a broadcast view has zero strides, which no module output should have.
        new = rows.broadcast_to(current.shape).contiguous() if patch.mode == "replace" else current + rows
        if patch.position == "content":
            new = torch.where(flight.content.to(current.device)[..., None], new, current)
        return merge(parts, cast(Component, patch.component), x, put(part, index, new))

    return edit


def capture_edit(parts: Layout, component: Component, positions: Positions, flight: Rows, store: list, grad: bool):
    """The hook edit recording the component; with `grad` it routes the forward through the recorded tensor."""

    def edit(x: torch.Tensor) -> torch.Tensor | None:
        part = split(parts, component, x)
        index = position_index(flight, x.shape[1], positions)
        taken = select(part, index)
        if not grad:
            store.append(taken.clone())
            return None
        if not taken.requires_grad:  # frozen parameters: make the activation itself a leaf to differentiate by
            taken = taken.detach().requires_grad_()
        store.append(taken)
        return merge(parts, component, x, put(part, index, taken))

    return edit
