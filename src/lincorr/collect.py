"""Collecting last-token domain logits over many inputs, batched, checked and cached on disk."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from lincorr.cache import cache_directory
from lincorr.domains import Domain
from lincorr.errors import LincorrError
from lincorr.filesystem import atomic_file, read_json, write_json_atomic
from lincorr.models import LM
from lincorr.prompts import Prompt
from lincorr.provenance import code_digest
from lincorr.templates import fill, validate_template

CHECKPOINT_SECONDS = 30.0
# Inputs X are names, words or short phrases. A batch is padded to its longest prompt, so one long
# line (a pasted paragraph) would make every prompt of its batch that long: refused instead.
MAX_INPUT_TOKENS = 64


@dataclasses.dataclass(frozen=True)
class LogitTable:
    """One prompt's last-token scores over its answer domain: `values` is `[n_inputs, n_domain]`."""

    values: np.ndarray
    inputs: tuple[str, ...]
    template: str
    domain: Domain
    kind: str  # "logits" (the paper's default) or "logprobs" (log-softmax over the full vocabulary)
    model: str  # the model's fingerprint


def tokenize_prompts(tokenizer, prompts: Sequence[str]) -> list[list[int]]:
    """Token ids per prompt, with the special tokens the model expects (BOS where it uses one)."""
    return tokenizer(list(prompts), add_special_tokens=True)["input_ids"]


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded `input_ids` and `attention_mask`, both `[batch, max_len]`."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = torch.tensor(row, dtype=torch.long)
        mask[i, width - len(row):] = 1
    return ids, mask


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
        raise LincorrError(f"model '{lm.name}' gives NaN/inf logits in {str(lm.head_weight.dtype).removeprefix('torch.')} "
                           f"on {lm.device.type} (the activations overflow); load it with --dtype float32")
    tolerance = 1e-3 * (1 + theirs.abs().max().item()) if lm.head_weight.dtype == torch.float32 else 5e-2 * (1 + theirs.abs().max().item())
    if not torch.allclose(ours, theirs, atol=tolerance, rtol=0):
        gap = (ours - theirs).abs().max().item()
        raise LincorrError(f"model '{lm.name}' post-processes its logits in a way lincorr does not reproduce (max gap {gap:.3g}); please report the architecture")
    lm.head_verified = True


def table_key(lm: LM, template: str, domain: Domain, inputs: Sequence[str], kind: str, batch_size: int) -> dict:
    """Everything that determines a table's numbers.

    The batch size is part of it: a prompt's logits depend on the batch it runs in by about 1e-5
    (matrix kernels and padding widths change with the batch), so a table is reused only by runs
    that would compute it bit for bit.
    """
    return {
        "code": code_digest(__name__),
        "model": lm.fingerprint,
        "dtype": str(lm.head_weight.dtype),
        "template": template,
        "token_ids": list(domain.token_ids),
        "inputs_sha256": hashlib.sha256("\n".join(inputs).encode()).hexdigest(),
        "n_inputs": len(inputs),
        "kind": kind,
        "batch_size": batch_size,
    }


def array_sha256(values: np.ndarray) -> str:
    """Checksum of an array's bytes."""
    return hashlib.sha256(np.ascontiguousarray(values).tobytes()).hexdigest()


def save_array_atomic(path: Path, **arrays: np.ndarray) -> None:
    """Write an `.npz` whole or not at all."""
    with atomic_file(path, "wb") as out:
        np.savez(out, **arrays)


def load_arrays(path: Path) -> dict[str, np.ndarray] | None:
    """Arrays of an `.npz` (never unpickling), or None when missing or unreadable."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None


class TableCache:
    """Finished tables and in-progress checkpoints under `<root>/logits/`, keyed by content."""

    def __init__(self, root: Path | None = None):
        self.directory = Path(root) / "logits" if root else cache_directory("logits")

    def paths(self, key: dict) -> tuple[Path, Path, Path]:
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
        base = self.directory / digest
        return base.with_suffix(".json"), base.with_suffix(".npz"), base.with_suffix(".partial.npz")

    def load(self, key: dict) -> np.ndarray | None:
        """A finished table whose header and checksum both match; anything else is ignored."""
        header_path, values_path, _ = self.paths(key)
        header = read_json(header_path)
        arrays = load_arrays(values_path)
        if not header or arrays is None or header.get("key") != key or "values" not in arrays:
            return None
        if header.get("sha256") != array_sha256(arrays["values"]):
            return None
        return arrays["values"]

    def store(self, key: dict, values: np.ndarray) -> None:
        header_path, values_path, partial_path = self.paths(key)
        save_array_atomic(values_path, values=values)
        write_json_atomic(header_path, {"key": key, "sha256": array_sha256(values), "shape": list(values.shape)})
        partial_path.unlink(missing_ok=True)

    def load_partial(self, key: dict, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray] | None:
        """Rows finished by an interrupted run: (values, done mask)."""
        arrays = load_arrays(self.paths(key)[2])
        if arrays is None or "values" not in arrays or arrays["values"].shape != shape:
            return None
        if str(arrays.get("key", np.array(""))) != json.dumps(key, sort_keys=True):
            return None
        return arrays["values"], arrays["done"].astype(bool)

    def store_partial(self, key: dict, values: np.ndarray, done: np.ndarray) -> None:
        save_array_atomic(self.paths(key)[2], values=values, done=done, key=np.array(json.dumps(key, sort_keys=True)))


def collect_logits(
    lm: LM,
    template: str,
    domain: Domain,
    inputs: Sequence[str],
    *,
    logprobs: bool = False,
    batch_size: int = 128,
    cache: TableCache | None | bool = True,
    progress: bool = True,
    description: str | None = None,
) -> LogitTable:
    """Last-token scores of `template` filled with each input, over `domain`: `[n_inputs, n_domain]`.

    Prompts run in length-sorted, left-padded batches; only the last position and only the
    domain rows of the unembedding are computed. With a cache, finished tables are reused
    and an interrupted run resumes from its last checkpoint.
    """
    validate_template(template)
    if not inputs:
        raise LincorrError("no inputs to collect logits for; pass at least one input X")
    if batch_size < 1:
        raise LincorrError(f"batch size must be positive, got {batch_size}")
    inputs = tuple(inputs)
    check_input_lengths(lm.tokenizer, inputs)
    kind = "logprobs" if logprobs else "logits"
    store = TableCache() if cache is True else (cache or None)
    key = table_key(lm, template, domain, inputs, kind, batch_size)
    if store is not None and (cached := store.load(key)) is not None:
        return LogitTable(cached, inputs, template, domain, kind, lm.fingerprint)

    token_ids = torch.tensor(domain.token_ids, dtype=torch.long)
    verify_head(lm, fill(template, inputs[0]), token_ids)
    shape = (len(inputs), len(domain))
    resumed = store.load_partial(key, shape) if store is not None else None
    values, done = resumed if resumed is not None else (np.zeros(shape, np.float32), np.zeros(len(inputs), bool))

    rows = tokenize_prompts(lm.tokenizer, [fill(template, x) for x in inputs])
    todo = sorted((i for i in range(len(inputs)) if not done[i]), key=lambda i: len(rows[i]))
    last_checkpoint = time.monotonic()
    with tqdm(total=len(inputs), initial=int(done.sum()), desc=description or template, unit="prompt", disable=not progress, leave=False) as bar:
        for start in range(0, len(todo), batch_size):
            batch = todo[start:start + batch_size]
            values[batch] = domain_scores(lm, [rows[i] for i in batch], token_ids, logprobs).numpy()
            done[batch] = True
            bar.update(len(batch))
            if store is not None and time.monotonic() - last_checkpoint > CHECKPOINT_SECONDS:
                store.store_partial(key, values, done)
                last_checkpoint = time.monotonic()

    bad = ~np.isfinite(values).all(axis=1)
    if bad.any():
        example = inputs[int(np.argmax(bad))]
        raise LincorrError(f"the model gave NaN/inf scores for {int(bad.sum())} inputs (e.g. {example!r}); load it with --dtype float32")
    if store is not None:
        store.store(key, values)
    return LogitTable(values, inputs, template, domain, kind, lm.fingerprint)


def check_input_lengths(tokenizer, inputs: Sequence[str]) -> None:
    """Refuse an input X longer than MAX_INPUT_TOKENS tokens, before any forward pass."""
    lengths = [len(ids) for ids in tokenizer(list(inputs), add_special_tokens=False)["input_ids"]]
    longest = int(np.argmax(lengths))
    if lengths[longest] > MAX_INPUT_TOKENS:
        shown = inputs[longest] if len(inputs[longest]) <= 40 else inputs[longest][:40] + "..."
        raise LincorrError(f"input {longest + 1} ({shown!r}) is {lengths[longest]} tokens long; an input X is a name or a short phrase "
                           f"of at most {MAX_INPUT_TOKENS} tokens: shorten or remove it")


def collect_tables(lm: LM, prompts: Mapping[str, Prompt], inputs: Sequence[str], **collect_options) -> dict[str, LogitTable]:
    """Each prompt's logit table `[n_inputs, n_domain]` over the same inputs (cached tables are reused).

    `collect_options` go to `collect_logits` (logprobs, batch_size, cache, progress).
    """
    return {
        name: collect_logits(lm, prompt.template, prompt.domain, inputs, description=f"{name} ({i}/{len(prompts)})", **collect_options)
        for i, (name, prompt) in enumerate(prompts.items(), 1)
    }


def entity_logits(lm: LM, prompt: Prompt, entities: Sequence[str]) -> np.ndarray:
    """Scores of `prompt` over its domain for each entity `[n_entities, n_domain]`, never cached (a trained copy is throwaway)."""
    return collect_logits(lm, prompt.template, prompt.domain, entities, cache=False, progress=False).values
