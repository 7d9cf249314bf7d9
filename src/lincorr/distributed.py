"""The processes of one run under `torchrun` (or `accelerate launch`): who this process is, and messages between them.

A run of K processes is a `Team`: rank 0 runs the command, the other ranks serve it (they collect
the pieces of logit tables rank 0 hands them; see `collect.serve_collection`). Messages are JSON
sent as byte tensors with `torch.distributed.broadcast`, so nothing is unpickled; the ranks share
pieces of work through the content-keyed cache, which must be one directory all of them see.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from datetime import timedelta

import torch
import torch.distributed as dist

from lincorr.errors import LincorrError

__all__ = ["Team", "launched_world_size", "join_team", "current_team", "leave_team", "balanced_assignment"]

# Ranks wait for each other at the end of every collection; a piece of a 70B model's table can take
# minutes, so the collective timeout is generous (a dead rank ends the run through torchrun anyway).
COLLECTIVE_TIMEOUT = timedelta(hours=2)


@dataclasses.dataclass(frozen=True)
class Team:
    """This process's place among the `world_size` processes of one run."""

    rank: int
    world_size: int
    local_rank: int
    backend: str  # "gloo" on CPU, "nccl" on GPUs

    @property
    def is_main(self) -> bool:
        """Rank 0 runs the command, prints and writes; the others serve it."""
        return self.rank == 0

    def message_device(self) -> torch.device:
        """nccl moves only GPU tensors; gloo only CPU ones."""
        return torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else torch.device("cpu")

    def broadcast(self, message: dict | None = None) -> dict:
        """Rank 0's `message` on every rank (rank 0 passes it, the others pass nothing and get it)."""
        device = self.message_device()
        payload = json.dumps(message).encode() if self.is_main else b""
        size = torch.tensor([len(payload)], dtype=torch.long, device=device)
        dist.broadcast(size, src=0)
        buffer = (torch.frombuffer(bytearray(payload), dtype=torch.uint8).to(device) if self.is_main
                  else torch.empty(int(size.item()), dtype=torch.uint8, device=device))
        dist.broadcast(buffer, src=0)
        return message if self.is_main and message is not None else json.loads(bytes(buffer.cpu().tolist()).decode())

    def failed_ranks(self, ok: bool) -> list[int]:
        """Every rank reports whether its share went well; all ranks learn which did not."""
        flags = torch.zeros(self.world_size, dtype=torch.long, device=self.message_device())
        flags[self.rank] = 0 if ok else 1
        dist.all_reduce(flags)
        return [rank for rank, failed in enumerate(flags.tolist()) if failed]


_team: Team | None = None


def launched_world_size() -> int:
    """How many processes the launcher started (1 outside torchrun/accelerate)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise LincorrError(f"WORLD_SIZE={os.environ['WORLD_SIZE']!r} is not a number; start lincorr with torchrun or unset it") from None


def join_team(device: str | None) -> Team | None:
    """Join the run's process group when started by torchrun with more than one process (else None).

    The backend follows the device: nccl for `cuda`, gloo otherwise; each rank takes the GPU of its
    local rank.
    """
    global _team
    world_size = launched_world_size()
    if world_size <= 1:
        return None
    missing = [name for name in ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT") if name not in os.environ]
    if missing:
        raise LincorrError(f"WORLD_SIZE is {world_size} but {', '.join(missing)} is not set; start lincorr with "
                           "`torchrun --nproc-per-node K -m lincorr ...`")
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    backend = "nccl" if device and device.startswith("cuda") else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=COLLECTIVE_TIMEOUT)
    _team = Team(rank, world_size, local_rank, backend)
    return _team


def current_team() -> Team | None:
    """The team this process joined, if any."""
    return _team


def leave_team(together: bool) -> None:
    """Tear the process group down once this rank's part of the command is over.

    `together`: every rank got here normally, so they first wait for each other; otherwise one
    rank exiting while another still reads from it aborts the reader (gloo raises in a thread).
    """
    global _team
    _team = None
    if dist.is_initialized():
        if together:
            dist.barrier()
        dist.destroy_process_group()


def balanced_assignment(costs: Sequence[float], world_size: int) -> list[list[int]]:
    """Indices of `costs` per rank, largest first onto the least loaded rank; each rank's list in index order.

    Deterministic, so every rank that computed it would agree; rank 0 computes it and sends it.
    """
    loads = [0.0] * world_size
    shares: list[list[int]] = [[] for _ in range(world_size)]
    for index in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        rank = min(range(world_size), key=lambda r: (loads[r], r))
        shares[rank].append(index)
        loads[rank] += costs[index]
    return [sorted(share) for share in shares]
