"""The logit lens: the residual stream decoded through the model's own final norm and head."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lincorr.errors import LincorrError
from lincorr.internals.arch import layout, resid
from lincorr.internals.trace import NO_TOKENS, run
from lincorr.models import LM


def decode(lm: LM, hidden: torch.Tensor, token_ids: torch.Tensor | None = None) -> torch.Tensor:
    """Logits `[..., k]` of residual states `[..., d_model]`: final norm, then `LM.head_logits` (soft-capping included)."""
    return lm.head_logits(layout(lm).final_norm()(hidden), token_ids)


def resid_stack(lm: LM, prompts, layers: Sequence[int] | None, batch_size: int, progress: bool) -> torch.Tensor:
    """`resid[l]` at the last position for each requested l (all 0..L by default): `[batch, n_layers, d_model]`.

    Every layer comes from the same forward (one per batch of prompts).
    """
    layers = range(layout(lm).n_layers + 1) if layers is None else layers
    components = [resid(layer) for layer in layers]
    trace = run(lm, prompts, capture=components, token_ids=NO_TOKENS, batch_size=batch_size, progress=progress)
    return torch.stack([trace[c] for c in components], 1)


@torch.inference_mode()
def logit_lens(
    lm: LM,
    prompts,
    layers: Sequence[int] | None = None,
    token_ids: torch.Tensor | None = None,
    *,
    batch_size: int = 32,
    progress: bool = False,
) -> torch.Tensor:
    """Last-position logits of `resid[l]` for every requested l: `[batch, n_layers, k]` (n_layers = L + 1 by default).

    `token_ids` restricts the head to those rows (e.g. a domain); None gives the full vocabulary.
    The entry for `resid[L]` is the model's own last-position logits.
    """
    return decode(lm, resid_stack(lm, prompts, layers, batch_size, progress), token_ids)


@torch.inference_mode()
def token_ranks(
    lm: LM,
    prompts,
    token_ids: torch.Tensor | Sequence[int],
    layers: Sequence[int] | None = None,
    *,
    chunk: int = 16384,
    batch_size: int = 32,
    progress: bool = False,
) -> torch.Tensor:
    """Rank over the full vocabulary of each prompt's token (one id per prompt) per lens layer: `[batch, n_layers]`, 0 = top.

    The rank counts vocabulary entries with a strictly higher logit. Logits are computed for
    `batch_size` prompts times `chunk` vocabulary rows at a time, so a 262k vocabulary never
    materialises whole.
    """
    token_ids = torch.as_tensor(token_ids, dtype=torch.long).reshape(-1)
    hidden = resid_stack(lm, prompts, layers, batch_size, progress)
    if len(token_ids) != len(hidden):
        raise LincorrError(f"token_ranks needs one token id per prompt; got {len(token_ids)} ids for {len(hidden)} prompts")
    vocab = lm.head_weight.shape[0]
    final_norm = layout(lm).final_norm()
    ranks = []
    for start in range(0, len(hidden), batch_size):
        normed = final_norm(hidden[start:start + batch_size])
        targets = token_ids[start:start + batch_size].to(normed.device)
        rows = torch.arange(len(targets), device=normed.device)
        own = lm.head_logits(normed, targets)[rows, :, rows]  # [b, n_layers]: row i's logit of its own target
        higher = torch.zeros(own.shape, dtype=torch.long, device=own.device)
        for low in range(0, vocab, chunk):
            above = lm.head_logits(normed, torch.arange(low, min(low + chunk, vocab))) > own[..., None]
            # A target never outranks itself, even where its logit here and in `own` differ in the last bit.
            inside = ((targets >= low) & (targets < low + chunk)).nonzero().squeeze(1)
            above[inside, :, targets[inside] - low] = False
            higher += above.sum(-1)
        ranks.append(higher)
    return torch.cat(ranks)
