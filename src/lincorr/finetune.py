"""The one shared training loop: fine-tune a causal LM on (prompt, answer) facts, loss on answers only."""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
import re
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

import torch

from lincorr.errors import LincorrError
from lincorr import recording, sharded_training
from lincorr.memory_plan import (AUTO, PLANS, MemoryPlan, StepsInBackward, WholeGradientSteps, available_bytes, chosen_plan, plan_named,
                                 predicted_peak)
from lincorr.models import left_pad
from lincorr.models import apply_logit_transform, position_ids_from_mask
from lincorr.progress import progress_bar

log = logging.getLogger(__name__)

# The trained model is a copy of the one given (or that one, in place): of its type.
ModelT = TypeVar("ModelT", bound=torch.nn.Module)

IGNORE_INDEX = -100
MEMORY_PLAN = "memory-plan"  # the kind of choice a training notes in the record of what it computes (`recording.note`)
SCHEDULES = ("constant", "linear")
# Transformer blocks are named "model.layers.3.", "transformer.h.3.", "model.language_model.layers.3." ...
_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|layer|h|blocks)\.(\d+)\.")


@dataclasses.dataclass(frozen=True)
class Fact:
    """One fact to teach: the model should continue `prompt` with `answer_prefix + answer`."""

    prompt: str
    answer: str
    answer_prefix: str = " "


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Optimiser and selection settings; the paper uses AdamW at 5e-6 with full fine-tuning.

    `layers` is a half-open block range `(start, stop)`; `blocks_only` keeps every transformer block
    and freezes what lies outside them (embeddings, a tied or untied head, the final norm), whatever
    the architecture calls its blocks (`layer_index`); `trainable` holds regular expressions searched
    in parameter names. A parameter trains when it passes every filter (an unset filter passes
    everything); all others are frozen. `max_grad_norm` clips the global gradient norm of every step
    (None: no clipping). `schedule` "constant" keeps the rate; "linear" warms up linearly over the
    first `warmup` fraction of the steps and then decays linearly to 0.
    """

    learning_rate: float = 5e-6
    epochs: int = 1
    batch_size: int = 8
    weight_decay: float = 0.0
    seed: int = 0
    layers: tuple[int, int] | None = None
    blocks_only: bool = False
    trainable: tuple[str, ...] = ()
    max_grad_norm: float | None = 1.0
    schedule: str = "constant"
    warmup: float = 0.0
    memory_plan: str = AUTO  # `memory_plan.PLANS` by name, or the first that fits the free memory

    def __post_init__(self) -> None:
        if self.learning_rate <= 0 or self.epochs < 1 or self.batch_size < 1:
            raise LincorrError("TrainConfig needs learning_rate > 0, epochs >= 1 and batch_size >= 1")
        if self.schedule not in SCHEDULES or not 0 <= self.warmup < 1:
            raise LincorrError(f"TrainConfig schedule must be one of {', '.join(SCHEDULES)} and warmup a fraction in [0, 1)")
        if self.memory_plan != AUTO:
            plan_named(self.memory_plan)
        if self.layers is not None and not (0 <= self.layers[0] < self.layers[1]):
            raise LincorrError(f"layers={self.layers} is not a range; pass (start, stop) with 0 <= start < stop")

    def trained_parts(self) -> str:
        """In words, which parameters the filters let train (the JSON's "trainable")."""
        parts = []
        if self.layers is not None:
            parts.append(f"blocks {self.layers[0]} to {self.layers[1] - 1}")
        elif self.blocks_only:
            parts.append("transformer blocks (embeddings, head and final norm frozen)")
        if self.trainable:
            parts.append("parameters matching " + ", ".join(self.trainable))
        return " and ".join(parts) or "all parameters"


@dataclasses.dataclass(frozen=True)
class TrainResult(Generic[ModelT]):
    """The trained model, the mean answer-token loss of each epoch, and what was trained."""

    model: ModelT
    losses: tuple[float, ...]
    trained_parameters: tuple[str, ...]
    n_trainable_params: int
    steps: int
    seconds: float
    memory_plan: str  # the `memory_plan.PLANS` name it was trained with


@dataclasses.dataclass(frozen=True)
class EncodedFact:
    """A fact as token ids: the model reads `prompt_ids + answer_ids` and is scored on `answer_ids`."""

    prompt_ids: tuple[int, ...]
    answer_ids: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Batch:
    """Left-padded model inputs `[batch, pos]` and labels `[batch, pos]` (-100 outside answers)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    labels: torch.Tensor

    def to(self, device: torch.device) -> Batch:
        """The same batch on `device`."""
        return Batch(*(tensor.to(device) for tensor in dataclasses.astuple(self)))

    @property
    def n_answer_tokens(self) -> int:
        """How many tokens the loss is taken over."""
        return int((self.labels != IGNORE_INDEX).sum())


def encode_fact(tokenizer, fact: Fact) -> EncodedFact:
    """Tokenize the prompt and prompt+prefix+answer; the answer is whatever the prompt's ids are followed by."""
    prompt_ids = tokenizer(fact.prompt)["input_ids"]
    full_ids = tokenizer(fact.prompt + fact.answer_prefix + fact.answer)["input_ids"]
    if full_ids[: len(prompt_ids)] != prompt_ids:
        raise LincorrError(
            f"the prompt {fact.prompt!r} tokenizes differently once the answer {fact.answer!r} follows it; "
            "remove trailing spaces from the prompt and put them in answer_prefix"
        )
    answer_ids = full_ids[len(prompt_ids) :]
    if not answer_ids:
        raise LincorrError(f"the answer {fact.answer!r} of prompt {fact.prompt!r} tokenizes to nothing")
    return EncodedFact(tuple(prompt_ids), tuple(answer_ids))


def collate(encoded: Sequence[EncodedFact], pad_token_id: int) -> Batch:
    """Left-pad so every sequence ends at the last position; positions count real tokens only."""
    input_ids, attention_mask = left_pad([e.prompt_ids + e.answer_ids for e in encoded], pad_token_id)
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    for row, fact in enumerate(encoded):
        labels[row, labels.shape[1] - len(fact.answer_ids) :] = torch.tensor(fact.answer_ids)
    # Absolute-position models (GPT-2) would otherwise see left padding as the first positions.
    return Batch(input_ids, attention_mask, position_ids_from_mask(attention_mask), labels)


def layer_index(parameter_name: str) -> int | None:
    """The transformer block a parameter belongs to, or None for embeddings, final norm and head."""
    match = _LAYER_INDEX.search(parameter_name)
    return int(match.group(1)) if match else None


def select_trainable(model: torch.nn.Module, config: TrainConfig) -> tuple[str, ...]:
    """Names of the parameters that pass the block, layer range and name filters of `config`."""
    names = [name for name, _ in model.named_parameters()]
    selected = names
    if config.layers is not None or config.blocks_only:
        indices = {index for n in names if (index := layer_index(n)) is not None}
        if not indices:
            raise LincorrError("layers= or blocks_only= was given but no parameter name has a block index like 'layers.3.' or 'h.3.'")
        selected = [n for n in selected if layer_index(n) is not None]
    if config.layers is not None:
        start, stop = config.layers
        if start > max(indices):
            raise LincorrError(f"layers={config.layers} starts past the last block {max(indices)}")
        selected = [n for n in selected if (index := layer_index(n)) is not None and start <= index < stop]
    if config.trainable:
        patterns = [re.compile(p) for p in config.trainable]
        selected = [n for n in selected if any(p.search(n) for p in patterns)]
    if not selected:
        raise LincorrError(
            f"no parameter matches layers={config.layers}, blocks_only={config.blocks_only} and trainable={config.trainable}; "
            f"parameter names look like {names[0]!r}"
        )
    return tuple(selected)


def train_on_facts(
    model: ModelT,
    tokenizer,
    facts: Sequence[Fact],
    config: TrainConfig = TrainConfig(),
    *,
    inplace: bool = False,
    stop_when: Callable[[ModelT], bool] | None = None,
    after_epoch: Callable[[int, ModelT], None] | None = None,
) -> TrainResult[ModelT]:
    """Fine-tune on `facts` for `config.epochs` epochs of shuffled batches; the caller's model is untouched unless `inplace`.

    After every epoch (model in eval mode, no gradients) `after_epoch(epoch, model)` is called
    (epochs count from 1), then `stop_when(model)` is asked; True ends training early.
    """
    encoded = _encode_all(tokenizer, facts)
    generator = torch.Generator().manual_seed(config.seed)
    n_batches = math.ceil(len(encoded) / config.batch_size)

    def epochs():
        for _ in range(config.epochs):
            order = torch.randperm(len(encoded), generator=generator).tolist()
            size = config.batch_size
            batches = [[encoded[i] for i in order[start : start + size]] for start in range(0, len(order), size)]
            yield [[batch] for batch in batches]  # each step is a single micro-batch

    return _run(model, tokenizer, epochs(), config, inplace=inplace, total_steps=config.epochs * n_batches, stop_when=stop_when,
                after_epoch=after_epoch)


def single_step(
    model: ModelT,
    tokenizer,
    facts: Sequence[Fact],
    config: TrainConfig = TrainConfig(),
    *,
    inplace: bool = False,
) -> TrainResult[ModelT]:
    """One optimiser step on the gradient of all `facts` together (accumulated in chunks of `config.batch_size`)."""
    encoded = _encode_all(tokenizer, facts)
    chunks = [encoded[i : i + config.batch_size] for i in range(0, len(encoded), config.batch_size)]
    return _run(model, tokenizer, [[chunks]], config, inplace=inplace, total_steps=1)


def _encode_all(tokenizer, facts: Sequence[Fact]) -> list[EncodedFact]:
    if not facts:
        raise LincorrError("no facts to train on; pass at least one Fact(prompt, answer)")
    return [encode_fact(tokenizer, fact) for fact in facts]


def _run(model, tokenizer, epochs, config: TrainConfig, *, inplace: bool, total_steps: int, stop_when=None,
         after_epoch=None) -> TrainResult:
    """Train over `epochs`: each is a list of steps, each step a list of micro-batches whose gradients add up."""
    started = time.perf_counter()
    torch.manual_seed(config.seed)
    target = model if inplace else copy.deepcopy(model)
    trained = select_trainable(target, config)
    trained_set = set(trained)
    parameters = dict(target.named_parameters())
    saved_requires_grad = {name: p.requires_grad for name, p in parameters.items()}
    for name, parameter in parameters.items():
        parameter.requires_grad_(name in trained_set)
    trainable = [parameters[name] for name in trained]
    plan = _plan_for(target, trainable, config, copied=not inplace)
    if plan.sharded:
        if inplace:
            raise LincorrError("sharded fine-tuning trains a copy and gathers it back; call it without inplace=True")
        sharded_training.require_process_group()
        trainable = [p for name, p in sharded_training.shard(target).named_parameters() if name in trained_set]
    steps_of = (sharded_training.ShardedSteps(trainable, config, _rate_factor(config, total_steps)) if plan.sharded
                else StepsInBackward(trainable, config, _rate_factor(config, total_steps), plan.moment_dtype) if plan.step_in_backward
                else WholeGradientSteps(trainable, config, _rate_factor(config, total_steps)))
    pad_token_id = _pad_token_id(tokenizer)
    was_training = target.training
    # Dropout off: a fact edit and a one-step gradient should not depend on a random mask.
    target.eval()
    losses: list[float] = []
    steps = 0
    try:
        with progress_bar(total=total_steps, desc="fine-tune") as bar:
            for epoch in epochs:
                loss_sum, token_sum = 0.0, 0
                for step in epoch:
                    batches = [collate(chunk, pad_token_id) for chunk in step]
                    step_loss, n_tokens = steps_of.step(lambda batch: _answer_loss_sum(target, batch, plan.sharded), batches)
                    steps += 1
                    loss_sum += step_loss * n_tokens
                    token_sum += n_tokens
                    bar.update(1)
                    bar.set_postfix(loss=f"{step_loss:.4f}")
                losses.append(loss_sum / token_sum)
                with torch.no_grad():
                    if after_epoch is not None:
                        after_epoch(len(losses), target)
                    if stop_when is not None and stop_when(target):
                        break
    finally:
        steps_of.close()
        for name, parameter in parameters.items():
            parameter.requires_grad_(saved_requires_grad[name])
        target.train(was_training)
    return TrainResult(
        model=sharded_training.gathered(model, target) if plan.sharded else target,
        losses=tuple(losses),
        trained_parameters=trained,
        n_trainable_params=sum(p.numel() for p in trainable),
        steps=steps,
        seconds=time.perf_counter() - started,
        memory_plan=plan.name,
    )



def _plan_for(target, trainable: Sequence[torch.nn.Parameter], config: TrainConfig, *, copied: bool) -> MemoryPlan:
    """The memory plan of this run (`memory_plan.chosen_plan`), logged with what it predicts and noted in the record of
    what is computing (`recording.note`): under "auto" it depends on the memory free, which no key names."""
    copy_bytes = sum(p.numel() * p.element_size() for p in target.parameters()) if copied else 0
    device = trainable[0].device if trainable else torch.device("cpu")
    largest = max((p.numel() for p in trainable), default=0)
    n_trainable = sum(p.numel() for p in trainable)
    # The copy is made already: the memory free now is short of it, and the predicted peak counts it.
    available = available_bytes(device) + copy_bytes
    plan = chosen_plan(config.memory_plan, n_trainable, largest, copy_bytes, available)
    recording.note(MEMORY_PLAN, plan.name)
    paper_plan = PLANS[0]
    if plan is not paper_plan and config.memory_plan == AUTO:
        log.warning("fine-tuning with %s (%s): the paper's %s would need about %.1f GB of the %.1f GB free", plan.name,
                    plan.description, paper_plan.name, predicted_peak(paper_plan, n_trainable, largest, copy_bytes) / 1e9, available / 1e9)
    else:
        log.info("fine-tuning %s parameters with %s: %s", f"{n_trainable:,}", plan.name, plan.description)
    return plan


def _rate_factor(config: TrainConfig, total_steps: int) -> Callable[[int], float]:
    """The multiplier of the learning rate before optimiser step `step` (0-based)."""
    if config.schedule == "constant":
        return lambda step: 1.0
    warmup = math.ceil(config.warmup * total_steps)

    def linear(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(total_steps - step, 0) / max(total_steps - warmup, 1)

    return linear


def _answer_loss_sum(model, batch: Batch, whole_forward: bool = False) -> torch.Tensor:
    """Summed cross-entropy of the answer tokens of `batch`, a scalar tensor; `whole_forward` through the model's own
    forward (a sharded model gathers its outer weights there, and only there)."""
    # Only positions that predict an answer token go through the head: with a 262k vocabulary the
    # full head is most of a step's time and memory (and slicing inside the model's own forward
    # makes a strided copy of the unembedding per row).
    batch = batch.to(model.device)
    predicts_answer = batch.labels[:, 1:] != IGNORE_INDEX  # position p predicts token p + 1
    head = model.get_output_embeddings()
    if head is None or whole_forward:
        logits = _forward(model, batch).logits[:, :-1][predicts_answer]
    else:
        hidden = _forward(model.base_model, batch).last_hidden_state[:, :-1][predicts_answer]  # [n_answer, d_model]
        logits = apply_logit_transform(head(hidden), model.config)
    return torch.nn.functional.cross_entropy(logits.float(), batch.labels[:, 1:][predicts_answer], reduction="sum")


def _forward(module, batch: Batch):
    return module(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids, use_cache=False)


def _pad_token_id(tokenizer) -> int:
    """Any id works for padding because it is masked; prefer the tokenizer's own pad, then eos."""
    for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if candidate is not None:
            return int(candidate)
    return 0
