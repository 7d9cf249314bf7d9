"""How fine-tuning fits the memory: the paper's AdamW in float32 where it fits, else a leaner plan that takes the same
steps, chosen from the model's size and the device's free memory before training starts.

A plan's peak, in bytes per trainable parameter beside the weights themselves:

    plan                            gradients   AdamW's two moments
    adamw-float32 (the paper's)     4           8
    adamw-step-in-backward          (one)       8       each parameter stepped as soon as its gradient is complete
    adamw-bfloat16-moments          (one)       4       the same, its moments kept in bfloat16

Stepping a parameter as its gradient completes (`torch.Tensor.register_post_accumulate_grad_hook`) means the model's
gradients are never all held: only the one being applied. Global gradient-norm clipping needs every gradient's norm
before any step, so a clipped step runs the backward pass twice: once for the norm, once to step (the same update,
about 1.5 times the compute). The weights stay float32 in every plan: an update of lr 5e-6 would vanish in bfloat16
weights (a weight of 1 moves by at least 2**-8 there).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from lincorr.errors import FreeMemoryError, LincorrError

FLOAT32, BFLOAT16 = 4, 2  # bytes of a value
# torch.optim.AdamW's defaults, which every plan's steps use.
ADAMW_BETAS, ADAMW_EPS = (0.9, 0.999), 1e-8
UPDATE_CHUNK = 1 << 22  # values updated at once in the backward pass: float32 temporaries of 16 MB each


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """How a fine-tuning step holds its gradients and AdamW's moments."""

    name: str
    step_in_backward: bool  # each parameter stepped as its gradient completes: no whole-model gradient is held
    moment_dtype: torch.dtype  # AdamW's first and second moments
    description: str
    sharded: bool = False  # the trained copy, its gradients and moments split among the processes of a run

    def bytes_per_trainable(self) -> int:
        """Gradient and moments per trainable parameter (a step-in-backward plan's one gradient at a time aside)."""
        gradient = 0 if self.step_in_backward else FLOAT32
        return gradient + 2 * torch.empty((), dtype=self.moment_dtype).element_size()


PLANS = (
    MemoryPlan("adamw-float32", False, torch.float32, "the paper's AdamW in float32, every gradient held for the step"),
    MemoryPlan("adamw-step-in-backward", True, torch.float32,
               "AdamW in float32, each parameter stepped as its gradient completes (no whole-model gradient)"),
    MemoryPlan("adamw-bfloat16-moments", True, torch.bfloat16,
               "AdamW stepped in the backward pass, its moments kept in bfloat16, weights and update in float32"),
)
# Never chosen by "auto": every process of the run must make the same call (`lincorr.sharded_training`).
SHARDED = MemoryPlan("adamw-sharded", False, torch.float32,
                     "the paper's AdamW with the trained copy, its gradients and moments sharded among the run's processes (FSDP)",
                     sharded=True)
PLAN_NAMES = tuple(plan.name for plan in (*PLANS, SHARDED))
AUTO = "auto"
# What a plan leaves free beside its prediction: the activations of a batch of facts, the allocator's slack and the
# process itself (Python, torch, the tokenizer) are not counted in bytes per parameter.
HEADROOM = 0.15


def plan_named(name: str) -> MemoryPlan:
    for plan in (*PLANS, SHARDED):
        if plan.name == name:
            return plan
    raise LincorrError(f"no memory plan is called {name!r}; one of {', '.join((AUTO, *PLAN_NAMES))}")


def predicted_peak(plan: MemoryPlan, n_trainable: int, largest_trainable: int, copy_bytes: int, processes: int = 1) -> int:
    """The bytes a training run adds, in each process, to what is loaded: the trained copy of the weights (`copy_bytes`, 0
    when trained in place), its gradients and AdamW's moments (a sharded plan's split among `processes`), and the
    backward pass's gradients in flight: two of the largest parameter (a tied embedding's gradient arrives from the head
    and from the input, then is summed), plus the one being applied in a step-in-backward plan, or the gathered one in a
    sharded plan."""
    in_flight = (3 if plan.step_in_backward or plan.sharded else 2) * largest_trainable * FLOAT32
    held = copy_bytes + n_trainable * plan.bytes_per_trainable()
    return (math.ceil(held / processes) if plan.sharded else held) + in_flight


def available_bytes(device: torch.device) -> int:
    """Memory free now for the tensors of `device`: the GPU's free memory, or the machine's available memory (psutil's
    `available`: Linux's MemAvailable, which counts the page cache the kernel would give back)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    import psutil

    return int(psutil.virtual_memory().available)


def chosen_plan(requested: str, n_trainable: int, largest_trainable: int, copy_bytes: int, available: int) -> MemoryPlan:
    """The plan `requested`, or under "auto" the first of PLANS whose predicted peak (with HEADROOM) fits `available`;
    a FreeMemoryError naming what each would need when none does (the memory free now: another moment may have more)."""
    if requested != AUTO:
        return plan_named(requested)
    needs = {plan.name: predicted_peak(plan, n_trainable, largest_trainable, copy_bytes) for plan in PLANS}
    for plan in PLANS:
        if needs[plan.name] * (1 + HEADROOM) <= available:
            return plan
    wanted = ", ".join(f"{name} {need / 1e9:.1f} GB" for name, need in needs.items())
    raise FreeMemoryError(f"fine-tuning {n_trainable:,} parameters fits no memory plan in the {available / 1e9:.1f} GB free "
                       f"({wanted}, each with {HEADROOM:.0%} to spare); train fewer parameters or use a device with more memory")


class WholeGradientSteps:
    """The paper's step: the gradients of the step's micro-batches added up and held, clipped by their global norm, then
    one AdamW step over them all."""

    def __init__(self, trainable: Sequence[torch.nn.Parameter], config, rate: Callable[[int], float]):
        self.trainable, self.config = trainable, config
        self.optimizer = torch.optim.AdamW(trainable, lr=config.learning_rate, weight_decay=config.weight_decay,
                                           fused=fusable(trainable))
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, rate)

    def step(self, loss_of: Callable[[Any], torch.Tensor], batches: Sequence) -> tuple[float, int]:
        """One optimiser step over micro-batches whose gradients add up: (the step's loss per answer token, its answer tokens)."""
        n_tokens = sum(b.n_answer_tokens for b in batches)
        self.optimizer.zero_grad(set_to_none=True)
        step_loss = clipped_gradients(loss_of, batches, n_tokens, self.trainable, self.config.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        return step_loss, n_tokens

    def close(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)


class StepsInBackward:
    """The same AdamW steps taken inside the backward pass: each parameter is stepped as soon as its gradient is complete
    and the gradient dropped, so the model's gradients are never all held. A clipped step (`max_grad_norm`) runs the
    backward pass twice, the first only to measure the global norm. A step of several micro-batches adds their gradients
    up first (they are held while it does); moments in bfloat16 are widened to float32 for each update."""

    def __init__(self, trainable: Sequence[torch.nn.Parameter], config, rate: Callable[[int], float], moment_dtype: torch.dtype):
        self.trainable, self.config, self.rate = trainable, config, rate
        self.steps_taken = 0
        self.moments: dict[torch.Tensor, tuple[torch.Tensor, torch.Tensor]] = {
            p: (torch.zeros_like(p, dtype=moment_dtype), torch.zeros_like(p, dtype=moment_dtype)) for p in trainable}
        self.mode = "accumulate"  # or "measure" (add the gradient's squared norm, drop it) or "apply" (step, drop it)
        self.squared_norms: list[torch.Tensor] = []
        self.scale = 1.0
        self.hooks = [p.register_post_accumulate_grad_hook(self.completed) for p in trainable]

    def completed(self, parameter: torch.Tensor) -> None:
        if self.mode == "accumulate" or parameter.grad is None:
            return
        if self.mode == "measure":
            self.squared_norms.append(torch.linalg.vector_norm(parameter.grad).square())
        else:
            self.apply(parameter, parameter.grad)
        parameter.grad = None

    @torch.no_grad()
    def apply(self, parameter: torch.Tensor, gradient: torch.Tensor) -> None:
        """torch.optim.AdamW's update of one parameter (decoupled weight decay, bias-corrected moments) in float32, a
        chunk of UPDATE_CHUNK values at a time: the float32 temporaries of a whole embedding would cost more than the
        gradients this plan does not hold."""
        beta1, beta2, eps = ADAMW_BETAS[0], ADAMW_BETAS[1], ADAMW_EPS
        rate = self.config.learning_rate * self.rate(self.steps_taken)
        step = self.steps_taken + 1
        values, gradients = parameter.view(-1), gradient.view(-1)
        moments = [moment.view(-1) for moment in self.moments[parameter]]
        for start in range(0, values.numel(), UPDATE_CHUNK):
            part = slice(start, start + UPDATE_CHUNK)
            change = gradients[part].float().mul_(self.scale)
            first, second = (moment[part].float() for moment in moments)  # the moments themselves when they are float32
            first.lerp_(change, 1 - beta1)
            second.mul_(beta2).addcmul_(change, change, value=1 - beta2)
            values[part].mul_(1 - rate * self.config.weight_decay)
            denominator = second.sqrt().div_(math.sqrt(1 - beta2**step)).add_(eps)
            values[part].addcdiv_(first, denominator, value=-rate / (1 - beta1**step))
            for moment, value in zip(moments, (first, second)):
                if moment.dtype != value.dtype:
                    moment[part].copy_(value)

    def step(self, loss_of: Callable[[Any], torch.Tensor], batches: Sequence) -> tuple[float, int]:
        """One step (see `WholeGradientSteps.step`)."""
        n_tokens = sum(b.n_answer_tokens for b in batches)
        self.scale = 1.0
        if len(batches) > 1:
            step_loss = self.accumulated(loss_of, batches, n_tokens)
        else:
            if self.config.max_grad_norm is not None:
                self.mode, self.squared_norms = "measure", []
                (loss_of(batches[0]) / n_tokens).backward()
                total = torch.stack(self.squared_norms).sum().sqrt() if self.squared_norms else torch.tensor(0.0)
                self.scale = min(self.config.max_grad_norm / (float(total) + 1e-6), 1.0)  # as clip_grad_norm_ clips
            self.mode = "apply"
            loss = loss_of(batches[0]) / n_tokens
            loss.backward()
            step_loss = loss.item()
        self.mode = "accumulate"
        self.steps_taken += 1
        return step_loss, n_tokens

    def accumulated(self, loss_of: Callable[[Any], torch.Tensor], batches: Sequence, n_tokens: int) -> float:
        """A step of several micro-batches: their gradients added up, clipped, then each parameter stepped."""
        self.mode = "accumulate"
        step_loss = clipped_gradients(loss_of, batches, n_tokens, self.trainable, self.config.max_grad_norm)
        for parameter in self.trainable:
            if parameter.grad is not None:
                self.apply(parameter, parameter.grad)
                parameter.grad = None
        return step_loss

    def close(self) -> None:
        for hook in self.hooks:
            hook.remove()
        for parameter in self.trainable:
            parameter.grad = None


def clipped_gradients(loss_of: Callable[[Any], torch.Tensor], batches: Sequence, n_tokens: int,
                      trainable: Sequence[torch.nn.Parameter], max_grad_norm: float | None) -> float:
    """The step's gradients added up over its micro-batches (each loss token-weighted, so that the sum is the gradient
    of the whole step) and clipped by their global norm; the step's loss per answer token."""
    step_loss = 0.0
    for batch in batches:
        loss = loss_of(batch) / n_tokens
        loss.backward()
        step_loss += loss.item()
    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(trainable, max_grad_norm)
    return step_loss


def fusable(parameters: Sequence[torch.nn.Parameter]) -> bool:
    """The fused AdamW kernel (3x faster than the per-tensor loop on CPU) takes float tensors on CPU or CUDA."""
    return all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in parameters)
