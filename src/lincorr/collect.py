"""Collecting last-token domain logits over many inputs, batched, checked and cached on disk."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from lincorr.cache import cache_directory
from lincorr.distributed import Team, balanced_assignment, current_team
from lincorr.domains import Domain
from lincorr.errors import DataError, DeviceError, InputError, LincorrError, ModelError, UsageError
from lincorr.filesystem import atomic_file, read_json, write_json_atomic
from lincorr.models import LM, left_pad, tokenize_prompts
from lincorr.prompts import Prompt
from lincorr.provenance import code_digest
from lincorr.templates import fill, validate_template

# A piece, the unit of work shared across ranks and kept by an interrupted run, is this many batches
# (1,024 prompts at the default batch size: seconds on a CPU, a fraction of a second on a GPU).
PIECE_BATCHES = 8
# --batch-size auto: on a GPU, the largest batch that fits, measured, and at most this many tokens per
# forward pass (past that a GPU is saturated and a bigger batch only holds more memory). On a CPU the
# batch that was fastest on this project's machine (docs/benchmarks.md): memory never binds there.
MAX_BATCH_TOKENS = 65536
CPU_BATCH_SIZE = 128
# Inputs X are names, words or short phrases. A batch is padded to its longest prompt, so one long
# line (a pasted paragraph) would make every prompt of its batch that long: refused instead.
MAX_INPUT_TOKENS = 64

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class LogitTable:
    """One prompt's last-token scores over its answer domain: `values` is `[n_inputs, n_domain]`."""

    values: np.ndarray
    inputs: tuple[str, ...]
    template: str
    domain: Domain
    kind: str  # "logits" (the paper's default) or "logprobs" (log-softmax over the full vocabulary)
    model: str  # the model's fingerprint


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


def table_key(lm: LM, template: str, domain: Domain, inputs: Sequence[str], kind: str, batch_size: int) -> dict:
    """Everything that determines a table's numbers.

    The batch size is part of it: a prompt's logits depend on the batch it runs in by about 1e-5
    (matrix kernels and padding widths change with the batch), so a table is reused only by runs
    that would compute it bit for bit.
    """
    return {
        **forward_key(lm),
        "template": template,
        "token_ids": list(domain.token_ids),
        "inputs_sha256": hashlib.sha256("\n".join(inputs).encode()).hexdigest(),
        "n_inputs": len(inputs),
        "kind": kind,
        "batch_size": batch_size,
    }


def forward_key(lm: LM) -> dict:
    """The part of a table's key that says which code and which forward computed it (two ranks must agree on it).

    On a CPU the number of torch threads is part of it: some float32 matmuls of a real model
    round differently with 1 thread than with 2 (r moves by ~1e-8), and a table must never mix
    pieces computed both ways. torchrun gives each CPU process one thread, so a run over K
    processes equals a one-process run with `OMP_NUM_THREADS=1` bit for bit.
    """
    return {
        "code": code_digest(__name__),
        "model": lm.fingerprint,
        "dtype": str(lm.head_weight.dtype),
        "forward": "compiled" if lm.compiled_body is not None else "eager",
        **({"cpu_threads": torch.get_num_threads()} if lm.device.type == "cpu" else {}),
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
    """Finished tables and the finished pieces of unfinished ones under `<root>/logits/`, keyed by content."""

    def __init__(self, root: Path | None = None):
        self.directory = Path(root) / "logits" if root else cache_directory("logits")

    @property
    def root(self) -> Path:
        """The directory to pass to `TableCache(root)` for this same cache (another rank's, say)."""
        return self.directory.parent

    def paths(self, key: dict) -> tuple[Path, Path]:
        base = self.directory / key_digest(key)
        return base.with_suffix(".json"), base.with_suffix(".npz")

    def load(self, key: dict) -> np.ndarray | None:
        """A finished table whose header and checksum both match; anything else is ignored."""
        header_path, values_path = self.paths(key)
        header = read_json(header_path)
        arrays = load_arrays(values_path)
        if not header or arrays is None or header.get("key") != key or "values" not in arrays:
            return None
        if header.get("sha256") != array_sha256(arrays["values"]):
            return None
        return arrays["values"]

    def store(self, key: dict, values: np.ndarray) -> None:
        """The finished table (its pieces are removed: the table holds them)."""
        header_path, values_path = self.paths(key)
        save_array_atomic(values_path, values=values)
        write_json_atomic(header_path, {"key": key, "sha256": array_sha256(values), "shape": list(values.shape)})
        for piece in self.directory.glob(f"{key_digest(key)}.piece*.npz"):
            piece.unlink(missing_ok=True)

    def piece_path(self, key: dict, index: int) -> Path:
        return self.directory / f"{key_digest(key)}.piece{index}.npz"

    def load_piece(self, key: dict, index: int, rows: np.ndarray) -> np.ndarray | None:
        """Scores of a finished piece `[len(rows), n_domain]`, if one was stored for exactly these rows of this table."""
        arrays = load_arrays(self.piece_path(key, index))
        if arrays is None or not {"values", "rows", "key"} <= arrays.keys():
            return None
        if str(arrays["key"]) != key_text(key) or not np.array_equal(arrays["rows"], rows):
            return None
        return arrays["values"]

    def store_piece(self, key: dict, index: int, rows: np.ndarray, values: np.ndarray) -> None:
        save_array_atomic(self.piece_path(key, index), values=values, rows=rows, key=np.array(key_text(key)))


def key_text(key: dict) -> str:
    """A key as one canonical string: what a piece file stores to be matched, and what names a table's files."""
    return json.dumps(key, sort_keys=True)


def key_digest(key: dict) -> str:
    return hashlib.sha256(key_text(key).encode()).hexdigest()[:32]


@dataclasses.dataclass(frozen=True)
class CollectionJob:
    """One table to collect: its cache key and what its forward passes need (plain data, sent to other ranks as JSON)."""

    key: dict
    template: str
    inputs: tuple[str, ...]
    token_ids: tuple[int, ...]
    logprobs: bool
    batch_size: int

    @classmethod
    def from_message(cls, message: dict) -> CollectionJob:
        return cls(message["key"], message["template"], tuple(message["inputs"]), tuple(message["token_ids"]),
                   bool(message["logprobs"]), int(message["batch_size"]))


@dataclasses.dataclass(frozen=True)
class JobPlan:
    """A job's prompts as token ids, cut into batches and pieces fixed by the inputs and the batch size alone.

    Every process that runs a piece runs the same batches (same rows, same padding), which is
    what makes a table computed by many ranks, or resumed after an interruption, equal bit for bit
    to one computed in one go.
    """

    rows: list[list[int]]
    batches: list[list[int]]  # row indices per batch: rows sorted by length (stable), `batch_size` at a time
    pieces: list[range]  # batch indices per piece, PIECE_BATCHES at a time

    def piece_rows(self, piece: int) -> np.ndarray:
        return np.array([i for b in self.pieces[piece] for i in self.batches[b]], dtype=np.int64)

    def piece_cost(self, piece: int) -> int:
        """Padded tokens the piece runs: what its forward passes cost."""
        return sum(len(self.batches[b]) * max(len(self.rows[i]) for i in self.batches[b]) for b in self.pieces[piece])


def plan_job(tokenizer, job: CollectionJob) -> JobPlan:
    rows = tokenize_prompts(tokenizer, [fill(job.template, x) for x in job.inputs])
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    batches = [order[start:start + job.batch_size] for start in range(0, len(order), job.batch_size)]
    pieces = [range(start, min(start + PIECE_BATCHES, len(batches))) for start in range(0, len(batches), PIECE_BATCHES)]
    return JobPlan(rows, batches, pieces)


def run_piece(lm: LM, job: CollectionJob, plan: JobPlan, piece: int, on_batch=lambda n: None) -> np.ndarray:
    """Scores of one piece's rows, in `plan.piece_rows(piece)` order: `[n_rows, n_domain]`."""
    token_ids = torch.tensor(job.token_ids, dtype=torch.long)
    parts = []
    for b in plan.pieces[piece]:
        parts.append(domain_scores(lm, [plan.rows[i] for i in plan.batches[b]], token_ids, job.logprobs).numpy())
        on_batch(len(plan.batches[b]))
    return np.concatenate(parts)


def collect_jobs(lm: LM, jobs: Sequence[CollectionJob], store: TableCache | None, *, progress: bool = True,
                 description: str = "") -> list[np.ndarray]:
    """Each job's scores `[n_inputs, n_domain]`, from finished pieces in `store` and forward passes for the rest.

    Each piece is stored as soon as it is done, so an interrupted run loses only its unfinished
    pieces. In a team (`torchrun`, see `lincorr.distributed`) with a cache and a model every rank
    can load, rank 0 hands the missing pieces out across the ranks, balanced by padded tokens,
    works on its own share and reads the others' from the shared cache.
    """
    plans = [plan_job(lm.tokenizer, job) for job in jobs]
    values = [np.zeros((len(job.inputs), len(job.token_ids)), np.float32) for job in jobs]
    todo = []
    for j, (job, plan) in enumerate(zip(jobs, plans)):
        for piece in range(len(plan.pieces)):
            rows = plan.piece_rows(piece)
            finished = store.load_piece(job.key, piece, rows) if store is not None else None
            if finished is None:
                todo.append((j, piece))
            else:
                values[j][rows] = finished
    if todo:
        verify_head(lm, fill(jobs[0].template, jobs[0].inputs[0]), torch.tensor(jobs[0].token_ids, dtype=torch.long))
    team = current_team()
    shared = team is not None and store is not None and lm.spec is not None and bool(todo)
    mine = todo
    if shared:
        shares = balanced_assignment([plans[j].piece_cost(p) for j, p in todo], team.world_size)
        team.broadcast({"op": "collect", "model": lm.spec, "cache": str(store.root), "jobs": [dataclasses.asdict(job) for job in jobs],
                        "shares": [[todo[i] for i in share] for share in shares]})
        mine = [todo[i] for i in shares[team.rank]]
        log.info("sharing %d pieces of %d tables across %d ranks (%s pieces each)", len(todo), len(jobs), team.world_size,
                 "/".join(str(len(share)) for share in shares))
    total = sum(len(plans[j].piece_rows(p)) for j, p in mine)
    error = None
    with tqdm(total=total, desc=description or jobs[0].template, unit="prompt", disable=not progress, leave=False) as bar:
        try:
            for j, piece in mine:
                rows = plans[j].piece_rows(piece)
                values[j][rows] = run_piece(lm, jobs[j], plans[j], piece, bar.update)
                if store is not None:
                    store.store_piece(jobs[j].key, piece, rows, values[j][rows])
        except Exception as failure:  # the other ranks still wait for this rank's report
            if not shared:
                raise
            error = failure
    if shared:
        failed = team.failed_ranks(error is None)
        if error is not None:
            raise error
        if failed:
            raise LincorrError(f"rank {', '.join(map(str, failed))} failed while collecting logits (see its log); the pieces "
                               "finished by every rank are cached: run the same command again to resume")
        own = set(mine)
        for j, piece in todo:
            if (j, piece) in own:
                continue
            rows = plans[j].piece_rows(piece)
            finished = store.load_piece(jobs[j].key, piece, rows)
            if finished is None:
                raise LincorrError(f"a piece another rank collected is not in the cache at {store.directory}; every rank must see "
                                   "the same cache directory (on several nodes: set LINCORR_CACHE_DIR to a directory on a shared filesystem)")
            values[j][rows] = finished
    return values


def serve_collection(team: Team, load: Callable[[str], LM]) -> None:
    """What ranks other than 0 do: run the pieces rank 0 hands them until it says stop.

    `load(spec)` loads a model the way this run's command does, on first use; one model is held at
    a time (a command over several models, like `scale`, collects each model's tables together).
    """
    models: dict[str, LM] = {}
    while True:
        message = team.broadcast()
        if message["op"] == "stop":
            return
        ok = True
        try:
            if message["model"] not in models:
                models.clear()
                models[message["model"]] = load(message["model"])
            lm = models[message["model"]]
            jobs = [CollectionJob.from_message(job) for job in message["jobs"]]
            ours = forward_key(lm)
            if any(job.key[field] != value for job in jobs for field, value in ours.items()):
                raise LincorrError(f"rank {team.rank} does not compute what rank 0 asked for (its code, model or forward differ: {ours})")
            store = TableCache(Path(message["cache"]))
            plans: dict[int, JobPlan] = {}
            for j, piece in message["shares"][team.rank]:
                plan = plans.setdefault(j, plan_job(lm.tokenizer, jobs[j]))
                verify_head(lm, fill(jobs[j].template, jobs[j].inputs[0]), torch.tensor(jobs[j].token_ids, dtype=torch.long))
                rows = plan.piece_rows(piece)
                store.store_piece(jobs[j].key, piece, rows, run_piece(lm, jobs[j], plan, piece))
        except Exception:  # reported to rank 0, which stops the command; the details stay in this rank's log
            log.exception("rank %d failed while collecting", team.rank)
            ok = False
        team.failed_ranks(ok)


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
    longest = list(max(rows, key=len))
    ids = torch.tensor(token_ids, dtype=torch.long)

    def fits(size: int) -> bool:
        try:
            domain_scores(lm, [longest] * size, ids, logprobs)
            return True
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            return False

    return largest_batch(fits, len(longest))


def checked_values(job: CollectionJob, values: np.ndarray) -> np.ndarray:
    """Refuse a table with NaN/inf rows (a half-precision model that overflowed)."""
    bad = ~np.isfinite(values).all(axis=1)
    if bad.any():
        example = job.inputs[int(np.argmax(bad))]
        raise DeviceError(f"the model gave NaN/inf scores for {int(bad.sum())} inputs (e.g. {example!r}); load it with --dtype float32")
    return values


def new_job(lm: LM, template: str, domain: Domain, inputs: Sequence[str], logprobs: bool, batch_size: int) -> CollectionJob:
    """The job for one table, after checking what the caller passed."""
    validate_template(template)
    if not inputs:
        raise DataError("no inputs to collect logits for; pass at least one input X")
    if batch_size < 1:
        raise UsageError(f"batch size must be positive, got {batch_size}")
    inputs = tuple(inputs)
    check_input_lengths(lm.tokenizer, inputs)
    kind = "logprobs" if logprobs else "logits"
    return CollectionJob(table_key(lm, template, domain, inputs, kind, batch_size), template, inputs, tuple(domain.token_ids),
                         logprobs, batch_size)


def collect_logits(
    lm: LM,
    template: str,
    domain: Domain,
    inputs: Sequence[str],
    *,
    logprobs: bool = False,
    batch_size: int | str = 128,
    cache: TableCache | None | bool = True,
    progress: bool = True,
    description: str | None = None,
) -> LogitTable:
    """Last-token scores of `template` filled with each input, over `domain`: `[n_inputs, n_domain]`.

    Prompts run in length-sorted, left-padded batches; only the last position and only the
    domain rows of the unembedding are computed. With a cache, finished tables are reused
    and an interrupted run resumes from its finished pieces. `batch_size="auto"` measures the
    largest batch that fits on a GPU (`auto_batch_size`).
    """
    return collect_many(lm, {description or template: (template, domain)}, inputs, logprobs=logprobs, batch_size=batch_size,
                        cache=cache, progress=progress)[description or template]


def collect_many(lm: LM, prompts: Mapping[str, tuple[str, Domain]], inputs: Sequence[str], *, logprobs: bool = False,
                 batch_size: int | str = 128, cache: TableCache | None | bool = True, progress: bool = True) -> dict[str, LogitTable]:
    """`collect_logits` for several (template, domain) at once: the missing ones are collected together (and shared out in a team)."""
    if batch_size == "auto" and inputs:
        rows = [row for template, _ in prompts.values() for row in tokenize_prompts(lm.tokenizer, [fill(template, x) for x in inputs])]
        widest = max((domain for _, domain in prompts.values()), key=len)
        batch_size = auto_batch_size(lm, rows, widest.token_ids, logprobs)
        log.info("--batch-size auto: %d prompts per forward pass", batch_size)
    store = TableCache() if cache is True else (cache or None)
    jobs = {name: new_job(lm, template, domain, inputs, logprobs, batch_size) for name, (template, domain) in prompts.items()}
    found = {name: store.load(job.key) if store is not None else None for name, job in jobs.items()}
    # Two names for one table (the same template and domain) collect it once.
    missing = list({key_digest(jobs[name].key): name for name, values in found.items() if values is None}.values())
    if missing:
        collected = collect_jobs(lm, [jobs[name] for name in missing], store, progress=progress,
                                 description=f"{len(missing)} table{'s' if len(missing) > 1 else ''} ({', '.join(missing)})"[:60])
        by_key = {}
        for name, values in zip(missing, collected):
            by_key[key_digest(jobs[name].key)] = checked_values(jobs[name], values)
            if store is not None:
                store.store(jobs[name].key, by_key[key_digest(jobs[name].key)])
        found = {name: values if values is not None else by_key[key_digest(jobs[name].key)] for name, values in found.items()}
    kind = "logprobs" if logprobs else "logits"
    return {name: LogitTable(found[name], jobs[name].inputs, template, domain, kind, lm.fingerprint)
            for name, (template, domain) in prompts.items()}


def check_input_lengths(tokenizer, inputs: Sequence[str]) -> None:
    """Refuse an input X longer than MAX_INPUT_TOKENS tokens, before any forward pass."""
    lengths = [len(ids) for ids in tokenizer(list(inputs), add_special_tokens=False)["input_ids"]]
    longest = int(np.argmax(lengths))
    if lengths[longest] > MAX_INPUT_TOKENS:
        shown = inputs[longest] if len(inputs[longest]) <= 40 else inputs[longest][:40] + "..."
        raise InputError(f"input {longest + 1} ({shown!r}) is {lengths[longest]} tokens long; an input X is a name or a short phrase "
                           f"of at most {MAX_INPUT_TOKENS} tokens: shorten or remove it")


def collect_tables(lm: LM, prompts: Mapping[str, Prompt], inputs: Sequence[str], **collect_options) -> dict[str, LogitTable]:
    """Each prompt's logit table `[n_inputs, n_domain]` over the same inputs (cached tables are reused).

    `collect_options` go to `collect_many` (logprobs, batch_size, cache, progress).
    """
    return collect_many(lm, {name: (prompt.template, prompt.domain) for name, prompt in prompts.items()}, inputs, **collect_options)


def entity_logits(lm: LM, prompt: Prompt, entities: Sequence[str]) -> np.ndarray:
    """Scores of `prompt` over its domain for each entity `[n_entities, n_domain]`, never cached (a trained copy is throwaway)."""
    return collect_logits(lm, prompt.template, prompt.domain, entities, cache=False, progress=False).values
