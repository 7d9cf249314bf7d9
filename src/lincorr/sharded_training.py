"""Fine-tuning sharded over the processes of a run: the paper's AdamW step with the trained copy's weights, gradients and
moments split among K processes (FSDP, `torch.distributed.fsdp.fully_shard`), so each holds about 1/K of them.

Every process of the run calls `finetune.train_on_facts` with the same facts and `TrainConfig(memory_plan=
"adamw-sharded")` (a script under `torchrun`, each rank the same call); each computes the loss of its share of every
micro-batch's facts, and the shares' gradients, reduce-scattered by FSDP, add up to the whole step's gradient. Each of
the model's blocks (the classes transformers keeps whole, `_no_split_modules`, as accelerate's FSDP wrapping picks
them) is a unit gathered only while it runs; the rest (embeddings, tied head, final norm) is the root unit. The trained
weights are gathered back into an ordinary model on every process. A `lincorr` command under torchrun does not use it:
its other ranks serve the collection of logit tables, not the same call. A `train_on_facts` callback (`after_epoch`,
`stop_when`) is handed the sharded model, and every process must call it alike: it may run the model's own forward,
which gathers the weights, but not lincorr's readers of its parts (the logit lens, the answer ranks of `LM` helpers).

Memory per process: the trained copy whole while it is made and again while the result is gathered (a deep copy of
the model, before and after sharding), the shard of its weights, gradients and AdamW's moments in between, and one
gathered block at a time (`predicted_peak`).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from lincorr.errors import LincorrError
from lincorr.memory_plan import FLOAT32, SHARDED


def predicted_peak(n_trainable: int, largest_trainable: int, copy_bytes: int, processes: int) -> int:
    """The bytes sharded training adds, in each of `processes`, to the loaded model: the trained copy whole (while it is
    made and while the result is gathered), the shard of its gradients and AdamW's moments, and the gradients in flight
    (two of the largest parameter, and the gathered one)."""
    states = n_trainable * SHARDED.bytes_per_trainable()
    return copy_bytes + math.ceil(states / processes) + 3 * largest_trainable * FLOAT32


def process_count() -> int:
    """The processes of the current process group (1 where none is initialised)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def require_process_group() -> None:
    """A LincorrError unless a process group of at least two processes is running."""
    if process_count() < 2:
        raise LincorrError("memory_plan='adamw-sharded' splits the training among the processes of a run: start every process "
                           "with torchrun (torch.distributed initialised, two or more processes), each making the same call")


def shard(model: torch.nn.Module) -> torch.nn.Module:
    """`model`, in place, with each block (a module whose class is in its `_no_split_modules`) and then the whole sharded
    over the process group; the whole weights it held are released, though a caller still refers to their parameters."""
    from torch.distributed.fsdp import fully_shard

    whole_weights = list(model.parameters())
    blocks = set(getattr(model, "_no_split_modules", None) or ())
    for module in list(model.modules()):
        if module is not model and type(module).__name__ in blocks:
            fully_shard(module)
    fully_shard(model)
    for parameter in whole_weights:  # each process now holds its shard; the whole copy would stay beside it
        parameter.data = torch.empty(0, dtype=parameter.dtype, device=parameter.device)
    return model


def share_of(batch: Any) -> tuple[Any, float]:
    """This process's rows of `batch` (every K-th from its rank) and the weight of their loss: a process with none takes
    the first row at weight 0, so that it still joins the step's collective operations and adds nothing."""
    rank, count = dist.get_rank(), process_count()
    fields = [getattr(batch, field.name) for field in dataclasses.fields(batch)]  # astuple would copy every tensor
    if rank < fields[0].shape[0]:
        return type(batch)(*(tensor[rank::count] for tensor in fields)), 1.0
    return type(batch)(*(tensor[:1] for tensor in fields)), 0.0


class ShardedSteps:
    """The paper's step over sharded parameters: the micro-batches' gradients added up (each process its share of each),
    clipped by their global norm (torch's clipping reads the norm across the shards), then AdamW on each shard."""

    def __init__(self, trainable: Sequence[torch.nn.Parameter], config, rate: Callable[[int], float]):
        self.trainable, self.config = trainable, config
        self.optimizer = torch.optim.AdamW(trainable, lr=config.learning_rate, weight_decay=config.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, rate)

    def step(self, loss_of: Callable[[Any], torch.Tensor], batches: Sequence) -> tuple[float, int]:
        """One optimiser step: (the whole step's loss per answer token, its answer tokens)."""
        n_tokens = sum(b.n_answer_tokens for b in batches)
        count = process_count()
        self.optimizer.zero_grad(set_to_none=True)
        step_loss: torch.Tensor | None = None
        for batch in batches:
            share, weight = share_of(batch)
            loss = loss_of(share) * weight / n_tokens
            # FSDP averages the processes' gradients; each holds a share of the sum, so the sum is K times the mean.
            (loss * count).backward()
            step_loss = loss.detach() if step_loss is None else step_loss + loss.detach()
        assert step_loss is not None, "a step has at least one micro-batch"
        if self.config.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.trainable, self.config.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        dist.all_reduce(step_loss)  # on the loss's device: the CPU under gloo, the GPU under nccl
        return float(step_loss), n_tokens

    def close(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)


def gathered(original: torch.nn.Module, trained: torch.nn.Module) -> torch.nn.Module:
    """A copy of `original` holding `trained`'s weights, gathered from every process's shard one tensor at a time."""
    result = copy.deepcopy(original)
    own = dict(result.named_parameters())
    with torch.no_grad():
        for name, parameter in trained.named_parameters():
            value = parameter.full_tensor() if hasattr(parameter, "full_tensor") else parameter
            own[name].copy_(value)
    return result
