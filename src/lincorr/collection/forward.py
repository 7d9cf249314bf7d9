"""The forward pass of collection: last-token scores over a domain, checked once per model against the model's own head."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from lincorr.collection.settings import CPU_BATCH_SIZE, MAX_BATCH_TOKENS
from lincorr.errors import DeviceError, ModelError
from lincorr.models import LM, left_pad, tokenize_prompts


@torch.inference_mode()
def domain_scores(lm: LM, rows: Sequence[Sequence[int]], token_ids: torch.Tensor, logprobs: bool) -> torch.Tensor:
    """Last-token logits (or log-probabilities) of token-id rows over `token_ids`: `[batch, k]`."""
    ids, mask = left_pad(rows, lm.tokenizer.pad_token_id)
    hidden = lm.last_hidden(ids, mask)
    scores = lm.head_logits(hidden, token_ids).float()
    if logprobs:
        scores = scores - lm.log_normalizer(hidden)[:, None]
    return scores.cpu()


@torch.inference_mode()
def verify_head(lm: LM, prompt: str, token_ids: torch.Tensor) -> None:
    """Check once per model that our restricted head equals the model's own full forward."""
    if lm.head_verified:
        return
    rows = tokenize_prompts(lm.tokenizer, [prompt])
    ours = domain_scores(lm, rows, token_ids, logprobs=False)[0]
    ids, mask = left_pad(rows, lm.tokenizer.pad_token_id)
    theirs = lm.model(input_ids=ids.to(lm.device), attention_mask=mask.to(lm.device)).logits[0, -1, token_ids].float().cpu()
    if not (torch.isfinite(ours).all() and torch.isfinite(theirs).all()):
        raise DeviceError(f"model '{lm.name}' gives NaN/inf logits in {str(lm.head_weight.dtype).removeprefix('torch.')} "
                           f"on {lm.device.type} (the activations overflow); load it with --dtype float32")
    tolerance = 1e-3 * (1 + theirs.abs().max().item()) if lm.head_weight.dtype == torch.float32 else 5e-2 * (1 + theirs.abs().max().item())
    if not torch.allclose(ours, theirs, atol=tolerance, rtol=0):
        gap = (ours - theirs).abs().max().item()
        raise ModelError(f"model '{lm.name}' post-processes its logits in a way lincorr does not reproduce (max gap {gap:.3g}); please report the architecture")
    lm.head_verified = True


def forward_key(lm: LM) -> dict:
    """The part of a table's key that says which model and which forward computed it (two ranks must agree on it; the
    code is checked by the record stored with each table and piece).

    On a CPU the number of torch threads is part of it: some float32 matmuls of a real model
    round differently with 1 thread than with 2 (r moves by ~1e-8), and a table must never mix
    pieces computed both ways. torchrun gives each CPU process one thread, so a run over K
    processes equals a one-process run with `OMP_NUM_THREADS=1` bit for bit.
    """
    return {
        "model": lm.fingerprint,
        "dtype": str(lm.head_weight.dtype),
        "forward": "compiled" if lm.compiled_body is not None else "eager",
        **({"cpu_threads": torch.get_num_threads()} if lm.device.type == "cpu" else {}),
    }


def largest_batch(fits: Callable[[int], bool], longest: int, max_tokens: int = MAX_BATCH_TOKENS) -> int:
    """The largest power of two `size` with `fits(size)`, at most `max_tokens // longest`; `fits` runs a real batch."""
    limit = max(1, max_tokens // longest)
    if not fits(1):
        raise DeviceError("one prompt does not fit in the device's memory; load the model with --dtype bfloat16 or --device-map auto")
    size = 1
    while size * 2 <= limit and fits(size * 2):
        size *= 2
    return size


def auto_batch_size(lm: LM, rows: Sequence[Sequence[int]], token_ids: Sequence[int], logprobs: bool) -> int:
    """`--batch-size auto`: on a GPU the largest batch of the longest prompt that runs without running out of memory."""
    if lm.device.type != "cuda":
        return CPU_BATCH_SIZE
    longest_row: Sequence[int] = max(rows, key=len)
    longest = list(longest_row)
    ids = torch.tensor(token_ids, dtype=torch.long)

    def fits(size: int) -> bool:
        try:
            domain_scores(lm, [longest] * size, ids, logprobs)
            return True
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            return False

    return largest_batch(fits, len(longest))
