"""The logit lens: the residual stream decoded through the model's own final norm and head."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lincorr.errors import LincorrError
from lincorr.internals.arch import layout, resid
from lincorr.internals.trace import NO_TOKENS, Ablate, Patch, run
from lincorr.models import LM


def decode(lm: LM, hidden: torch.Tensor, token_ids: torch.Tensor | None = None) -> torch.Tensor:
    """Logits `[..., k]` of residual states `[..., d_model]`: final norm, then `LM.head_logits` (soft-capping included)."""
    return lm.head_logits(layout(lm).final_norm()(hidden), token_ids)


def resid_stack(lm: LM, prompts, layers: Sequence[int] | None, batch_size: int,
                interventions: Sequence[Patch | Ablate] = ()) -> torch.Tensor:
    """`resid[l]` at the last position for each requested l (all 0..L by default): `[batch, n_layers, d_model]`.

    Every layer comes from the same forward (one per batch of prompts), interventions applied.
    """
    layers = range(layout(lm).n_layers + 1) if layers is None else layers
    components = [resid(layer) for layer in layers]
    trace = run(lm, prompts, capture=components, interventions=interventions, token_ids=NO_TOKENS, batch_size=batch_size)
    return torch.stack([trace[c] for c in components], 1)


@torch.inference_mode()
def logit_lens(
    lm: LM,
    prompts,
    layers: Sequence[int] | None = None,
    token_ids: torch.Tensor | None = None,
    *,
    interventions: Sequence[Patch | Ablate] = (),
    batch_size: int = 32,
) -> torch.Tensor:
    """Last-position logits of `resid[l]` for every requested l: `[batch, n_layers, k]` (n_layers = L + 1 by default).

    `token_ids` restricts the head to those rows (e.g. a domain); None gives the full vocabulary.
    The entry for `resid[L]` is the model's own last-position logits (under `interventions`, as `run` applies them).
    """
    return decode(lm, resid_stack(lm, prompts, layers, batch_size, interventions), token_ids)


@torch.inference_mode()
def token_ranks(
    lm: LM,
    prompts,
    token_ids: torch.Tensor | Sequence[int],
    layers: Sequence[int] | None = None,
    *,
    interventions: Sequence[Patch | Ablate] = (),
    chunk: int = 16384,
    batch_size: int = 32,
) -> torch.Tensor:
    """Rank over the full vocabulary of each prompt's token per lens layer: `[batch, n_layers]`, 0 = top.

    `token_ids` is one id per prompt, `[batch]`, or k per prompt, `[batch, k]` (ranks `[batch, n_layers, k]`,
    all from the same forward). `interventions` apply as in `run`. Ranking as in `hidden_ranks`.
    """
    return hidden_ranks(lm, resid_stack(lm, prompts, layers, batch_size, interventions), token_ids,
                        chunk=chunk, batch_size=batch_size)


@torch.inference_mode()
def hidden_ranks(lm: LM, hidden: torch.Tensor, token_ids: torch.Tensor | Sequence[int], *, chunk: int = 16384,
                 batch_size: int = 32) -> torch.Tensor:
    """Full-vocabulary rank of tokens in residual states `[batch, n, d_model]` decoded like `decode`: `[batch, n]`, 0 = top.

    For any stream states, e.g. `resid[l] + attn[l]` (between a block's attention and its FFN).
    `token_ids` is `[batch]` (one per row) or `[batch, k]` (ranks `[batch, n, k]`). The rank counts
    vocabulary entries with a strictly higher logit; logits are computed for `batch_size` rows times
    `chunk` vocabulary rows at a time, so a 262k vocabulary never materialises whole.
    """
    token_ids = torch.as_tensor(token_ids, dtype=torch.long)
    several = token_ids.dim() == 2
    token_ids = token_ids if several else token_ids.reshape(-1, 1)
    if len(token_ids) != len(hidden):
        raise LincorrError(f"token ranks need one token id per prompt (or one row of ids each); got {len(token_ids)} for {len(hidden)} prompts")
    vocab = lm.head_weight.shape[0]
    final_norm = layout(lm).final_norm()
    ranks = []
    for start in range(0, len(hidden), batch_size):
        normed = final_norm(hidden[start:start + batch_size])
        targets = token_ids[start:start + batch_size].to(normed.device)  # [b, k]
        rows = torch.arange(len(targets), device=normed.device)
        # [b, n, b, k] -> row i's logits of its own targets, [b, n, k]
        own = lm.head_logits(normed, targets.reshape(-1)).unflatten(-1, targets.shape)[rows, :, rows]
        higher = torch.zeros(own.shape, dtype=torch.long, device=own.device)
        for low in range(0, vocab, chunk):
            above = lm.head_logits(normed, torch.arange(low, min(low + chunk, vocab)))[:, :, None, :] > own[..., None]
            # A target never outranks itself, even where its logit here and in `own` differ in the last bit.
            row, column = ((targets >= low) & (targets < low + chunk)).nonzero(as_tuple=True)
            above[row, :, column, targets[row, column] - low] = False
            higher += above.sum(-1)
        ranks.append(higher)
    joined = torch.cat(ranks)
    return joined if several else joined[..., 0]
