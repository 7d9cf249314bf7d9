"""Pieces: a table's forward passes cut into units that an interrupted run keeps and the ranks of a torchrun team share.

A table's prompts are sorted by length (stably) and cut into batches, and the batches into
pieces of `PIECE_BATCHES`; both depend only on the inputs and the batch size, so a table
assembled from pieces computed by any rank, in any run, equals one computed in one go bit for
bit. Rank 0 hands the missing pieces out (`collect_jobs`); the other ranks serve them
(`serve_collection`) and write them into the shared cache.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from lincorr import recording
from lincorr.cache import TableStore
from lincorr.collection.forward import domain_scores, forward_key, verify_head
from lincorr.distributed import Team, balanced_assignment, current_team
from lincorr.errors import LincorrError
from lincorr.models import LM, compile_forward, tokenize_prompts
from lincorr.progress import progress_bar
from lincorr.templates import fill

# A piece, the unit of work shared across ranks and kept by an interrupted run, is this many batches
# (1,024 prompts at the default batch size: seconds on a CPU, a fraction of a second on a GPU).
PIECE_BATCHES = 8

log = logging.getLogger(__name__)


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

    def verify_head(self, lm: LM) -> None:
        """`forward.verify_head` on this job's first prompt and domain."""
        verify_head(lm, fill(self.template, self.inputs[0]), torch.tensor(self.token_ids, dtype=torch.long))


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


@dataclasses.dataclass
class Collection:
    """Jobs under way: their plans, their scores so far, and the (job, piece) pairs no run has finished yet."""

    jobs: Sequence[CollectionJob]
    plans: list[JobPlan]
    values: list[np.ndarray]  # per job `[n_inputs, n_domain]`
    todo: list[tuple[int, int]]

    @classmethod
    def start(cls, lm: LM, jobs: Sequence[CollectionJob], store: TableStore | None) -> Collection:
        """Plan every job and fill in the pieces `store` already holds."""
        plans = [plan_job(lm.tokenizer, job) for job in jobs]
        collection = cls(jobs, plans, [np.zeros((len(job.inputs), len(job.token_ids)), np.float32) for job in jobs], [])
        for j, plan in enumerate(plans):
            for piece in range(len(plan.pieces)):
                if not collection.fill(j, piece, store):
                    collection.todo.append((j, piece))
        return collection

    def fill(self, j: int, piece: int, store: TableStore | None) -> bool:
        """Take a piece from `store`; whether it was there."""
        rows = self.plans[j].piece_rows(piece)
        finished = store.load_piece(self.jobs[j].key, piece, rows) if store is not None else None
        if finished is not None:
            self.values[j][rows] = finished
        return finished is not None

    def run(self, lm: LM, mine: Sequence[tuple[int, int]], store: TableStore | None, description: str) -> None:
        """Run the pieces `mine`, storing each as soon as it is done."""
        with progress_bar(total=sum(len(self.plans[j].piece_rows(p)) for j, p in mine), desc=description, unit="prompt") as bar:
            for j, piece in mine:
                rows = self.plans[j].piece_rows(piece)
                with recording.window() as ran:
                    self.values[j][rows] = run_piece(lm, self.jobs[j], self.plans[j], piece, bar.update)
                if store is not None and ran.complete:
                    store.store_piece(self.jobs[j].key, piece, rows, self.values[j][rows], ran.record)


def collect_jobs(lm: LM, jobs: Sequence[CollectionJob], store: TableStore | None, description: str) -> list[np.ndarray]:
    """Each job's scores `[n_inputs, n_domain]`, from finished pieces in `store` and forward passes for the rest.

    Each piece is stored as soon as it is done, so an interrupted run loses only its unfinished
    pieces. In a team (`torchrun`, see `lincorr.distributed`) with a cache and a model every rank
    can load, rank 0 hands the missing pieces out across the ranks, balanced by padded tokens,
    works on its own share and reads the others' from the shared cache.
    """
    collection = Collection.start(lm, jobs, store)
    if collection.todo:
        jobs[0].verify_head(lm)
    team = current_team()
    if team is None or store is None or lm.spec is None or not collection.todo:
        collection.run(lm, collection.todo, store, description)
        return collection.values
    shares = balanced_assignment([collection.plans[j].piece_cost(p) for j, p in collection.todo], team.world_size)
    team.broadcast({"op": "collect", "model": lm.spec, "cache": str(store.root), "jobs": [dataclasses.asdict(job) for job in jobs],
                    "shares": [[collection.todo[i] for i in share] for share in shares]})
    mine = [collection.todo[i] for i in shares[team.rank]]
    log.info("sharing %d pieces of %d tables across %d ranks (%s pieces each)", len(collection.todo), len(jobs), team.world_size,
             "/".join(str(len(share)) for share in shares))
    error = None
    try:
        collection.run(lm, mine, store, description)
    except Exception as failure:  # the other ranks still wait for this rank's report
        error = failure
    gather_shares(team, collection, set(mine), store, error)
    return collection.values


def gather_shares(team: Team, collection: Collection, mine: set, store: TableStore, error: Exception | None) -> None:
    """Rank 0, once its own share is done: every rank's report, then the other ranks' pieces from the shared cache."""
    failed = team.failed_ranks(error is None)
    if error is not None:
        raise error
    if failed:
        raise LincorrError(f"rank {', '.join(map(str, failed))} failed while collecting logits (see its log); the pieces "
                           "finished by every rank are cached: run the same command again to resume")
    for j, piece in collection.todo:
        if (j, piece) not in mine and not collection.fill(j, piece, store):
            raise LincorrError(f"a piece another rank collected is not in the cache at {store.directory}; every rank must see "
                               "the same cache directory (on several nodes: set LINCORR_CACHE_DIR to a directory on a shared filesystem)")


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
            serve_share(team, models[message["model"]], message)
        except Exception:  # reported to rank 0, which stops the command; the details stay in this rank's log
            log.exception("rank %d failed while collecting", team.rank)
            ok = False
        team.failed_ranks(ok)


def serve_share(team: Team, lm: LM, message: dict) -> None:
    """Run this rank's share of rank 0's `message` and store each piece in the cache rank 0 named."""
    jobs = [CollectionJob.from_message(job) for job in message["jobs"]]
    if jobs[0].key["forward"] == "compiled" and lm.compiled_body is None:
        compile_forward(lm)
    ours = forward_key(lm)
    if any(job.key[field] != value for job in jobs for field, value in ours.items()):
        raise LincorrError(f"rank {team.rank} does not compute what rank 0 asked for (its model or forward differ: {ours})")
    store = TableStore(Path(message["cache"]))
    plans: dict[int, JobPlan] = {}
    for j, piece in message["shares"][team.rank]:
        plan = plans.setdefault(j, plan_job(lm.tokenizer, jobs[j]))
        jobs[j].verify_head(lm)
        with recording.window() as ran:
            values = run_piece(lm, jobs[j], plan, piece)
        if ran.complete:
            store.store_piece(jobs[j].key, piece, plan.piece_rows(piece), values, ran.record)
