"""Extractive scores by token position (Feng et al. Fig. 3): which role a prompt's token plays, and where a weight change acts.

Fig. 3 of the paper resolves each score by position: informative MLPs sit "at the name tokens"
for first-hop updates and "at the last token" for second-hop ones. Prompts differ in length, so
positions are named by role, the same in every prompt (`ROLES`): the subject's tokens (the made-up
name of a first-hop implication, the landmark of a second-hop one), the other prompt tokens
(the BOS token included), and the last token (the one whose logits are read), which wins where a
subject ends the prompt. `token_roles` gives the role of every column of a left-padded batch.

The informative score dR/dW_c . (W'_c - W_c) is a sum over the places where W_c is used: each
module holding c's weights computes its output position by position, so with the step
W_c + s_p (W'_c - W_c) taken at position p alone, dR/ds_p is position p's share and the shares sum
to the whole (the chain rule). `weight_steps` adds s_p times the module's directional derivative
(`torch.func.jvp`, exact for the affine modules blocks are built of) to every such output, with
s = 0 so nothing changes but the gradient. For an nn.Linear that derivative is the change's own
forward on the component's slice (x . dW_c^T + db_c), about one forward of the module for all the
heads that share it, where the general `jvp` would run the module twice per head.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Sequence

import torch

from lincorr.errors import LincorrError
from lincorr.internals.trace import token_rows
from lincorr.models import LM, left_pad
from lincorr.studies.extractive.slices import Slices, weight_part

__all__ = ["ROLES", "PADDING", "token_roles", "role_sums", "weight_steps"]

ROLES = ("subject", "other", "last")
PADDING = -1  # the role of a padding column


def token_roles(lm: LM, prompts: Sequence[str], subjects: Sequence[str] = ()) -> torch.Tensor:
    """The role (an index into `ROLES`) of every column of the prompts' left-padded batch: `[n_prompts, width]`, `PADDING` where no token is.

    A token is the subject's if its characters overlap the subject's first occurrence in the prompt.
    Without `subjects` every token but the last is "other".
    """
    rows = token_rows(lm, list(prompts))
    if subjects and len(subjects) != len(prompts):
        raise LincorrError(f"{len(subjects)} subjects for {len(prompts)} prompts; give one subject per prompt")
    offsets = _offsets(lm, prompts, rows) if subjects else []  # read only with subjects
    roles = []
    for i, row in enumerate(rows):
        role = [ROLES.index("other")] * len(row)
        if subjects:
            start = prompts[i].find(subjects[i])
            if start < 0:
                raise LincorrError(f"the subject '{subjects[i]}' is not in the prompt '{prompts[i]}'")
            end = start + len(subjects[i])
            role = [ROLES.index("subject") if a < end and b > start else r for (a, b), r in zip(offsets[i], role)]
        role[-1] = ROLES.index("last")
        roles.append(role)
    padded, _ = left_pad(roles, PADDING)
    return padded


def _offsets(lm: LM, prompts: Sequence[str], rows: list[list[int]]) -> list[list[tuple[int, int]]]:
    if not getattr(lm.tokenizer, "is_fast", False):
        raise LincorrError(f"{lm.name}'s tokenizer gives no character offsets; scores by position need a fast tokenizer")
    encoded = lm.tokenizer(list(prompts), add_special_tokens=True, return_offsets_mapping=True)
    if [list(ids) for ids in encoded["input_ids"]] != rows:
        raise LincorrError(f"{lm.name}'s tokenizer gives other tokens with offsets than without; scores by position cannot place the subject")
    return [[tuple(span) for span in spans] for spans in encoded["offset_mapping"]]


def role_sums(values: torch.Tensor, roles: torch.Tensor) -> torch.Tensor:
    """Per-position values `[b, w]` summed over each role's columns, row by row: `[b, len(ROLES)]` (float64; padding dropped)."""
    values, roles = values.double(), roles.to(values.device)
    return torch.stack([torch.where(roles == r, values, torch.zeros((), dtype=values.dtype, device=values.device)).sum(1)
                        for r in range(len(ROLES))], 1).cpu()


@contextlib.contextmanager
def weight_steps(original: LM, tuned: LM, weights: Sequence[Slices]) -> Iterator[dict[int, torch.Tensor]]:
    """While open, every forward of `original` makes a step s_i `[b, w]` (zeros, requiring grad) per entry i of `weights`.

    `weights[i]` maps parameter names to `(axis, indices)` of component i's slice, or None for the whole
    tensor. The yielded dict holds the latest forward's steps: d reward / d s_i is component i's
    informative score per position, for the change from `original`'s weights to `tuned`'s.
    """
    own, other = dict(original.model.named_parameters()), dict(tuned.model.named_parameters())
    uses: dict[str, dict[int, dict[str, tuple]]] = {}  # module path -> component -> {local name: (where, change there)}
    for i, slices in enumerate(weights):
        for name, where in slices.items():
            path, local = name.rsplit(".", 1)
            # Only the component's slice is kept; the hook widens it to the tensor's shape (zero elsewhere) when used.
            uses.setdefault(path, {}).setdefault(i, {})[local] = (where, weight_part((other[name] - own[name]).detach(), where))
    steps: dict[int, torch.Tensor] = {}
    handles = []
    try:
        for path, changes in uses.items():
            module = original.model.get_submodule(path)
            handles.append(module.register_forward_hook(_step_hook(copy.deepcopy(module), changes, steps), with_kwargs=True))
        yield steps
    finally:
        for handle in handles:
            handle.remove()


def _widened(like: torch.Tensor, where, part: torch.Tensor) -> torch.Tensor:
    """`part` (a weight slice at `where`, or the whole tensor for None) in a tensor shaped like `like`, zero elsewhere."""
    part = part.to(like.dtype)
    return part if where is None else torch.zeros_like(like).index_copy_(where[0], where[1].to(like.device), part)


def _step_hook(clean: torch.nn.Module, changes: dict[int, dict[str, tuple]], steps: dict[int, torch.Tensor]):
    """A forward hook adding s_i * (d output / d weights . change_i) for each component i using the module.

    `clean` is a hook-free copy of the module, so the derivative's own forward fires no hook of a trace.
    """
    base = dict(clean.named_parameters())
    linear = type(clean) is torch.nn.Linear

    def hook(_module, args, kwargs, output):
        inputs = tuple(a.detach() if torch.is_tensor(a) else a for a in args)
        for i, change in changes.items():
            if i not in steps or steps[i].shape != output.shape[:2]:
                steps[i] = torch.zeros(output.shape[:2], dtype=output.dtype, device=output.device, requires_grad=True)
            step = steps[i].view(*output.shape[:2], *[1] * (output.dim() - 2))
            if linear:
                for rows, tangent in _linear_tangents(inputs[0], change, output.dtype):
                    output = output + step * tangent if rows is None else output.index_add(-1, rows.to(output.device), step * tangent)
                continue
            names = tuple(change)

            def forward(*values):
                return torch.func.functional_call(clean, {**base, **dict(zip(names, values))}, inputs, kwargs)

            primals = tuple(base[n].detach().to(output.dtype) for n in names)
            _, tangent = torch.func.jvp(forward, primals, tuple(_widened(primal, *change[n]) for n, primal in zip(names, primals)))
            output = output + step * tangent.detach()
        return output

    return hook


def _linear_tangents(x: torch.Tensor, change: dict[str, tuple], dtype: torch.dtype) -> list[tuple[torch.Tensor | None, torch.Tensor]]:
    """An nn.Linear's output change for its weight change, as (output rows it lands on or None for all, values) pieces.

    The module is affine in its weights, so the derivative is the change's own forward: x . dW^T + db, computed on the
    component's slice alone (a head's rows or columns), never on a zero-padded full weight (n_heads times the work).
    """
    pieces = []
    for name, (where, part) in change.items():
        part = part.to(dtype)
        if name == "bias":
            pieces.append((None if where is None else where[1], part.expand(*x.shape[:-1], -1)))
        elif where is None:
            pieces.append((None, torch.nn.functional.linear(x.to(dtype), part)))
        elif where[0] == 0:  # output rows
            pieces.append((where[1], torch.nn.functional.linear(x.to(dtype), part)))
        else:  # input columns
            pieces.append((None, torch.nn.functional.linear(x.to(dtype).index_select(-1, where[1].to(x.device)), part)))
    return pieces
