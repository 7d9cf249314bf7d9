"""The vocabulary ablation (§6, Table 7): frozen embeddings, mean pooling and one fresh feed-forward block.

Stage 1 teaches the block a composition from paired texts ("X lives in the city of" -> s,
"X lives in the country of" -> ref(s)); stage 2 teaches it new source facts about unseen
names Z; the test asks whether the target prompt about Z now answers ref(s). Everything
between the vocabulary and the block is gone, so whatever generalizes comes from the
vocabulary representations (and from what the block learned in stage 1).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar, cast

import numpy as np
import torch
from transformers.activations import ACT2FN

from lincorr.errors import LincorrError, UsageError
from lincorr.knowledge import load_registry
from lincorr.metrics import chance_top1
from lincorr.models import left_pad, tokenize_prompts
from lincorr.names import pseudo_names
from lincorr.progress import progress_bar
from lincorr.prompts import Prompt
from lincorr.relations import BoundRelation, RelationSpec, bind_relation
from lincorr.studies.training.token_pairs import TokenPairs, resolve_pairs
from lincorr.templates import fill

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = [
    "SOFTMAX_OVER", "Vocabulary", "AblationConfig", "AblationResult", "vocabulary_from_model", "pca_vocabularies", "pooled_embeddings",
    "measure_ablation", "ablate",
]


SOFTMAX_OVER = ("domains", "full")


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """A model's frozen token embeddings: what it reads `[vocab, d]`, what it scores against `[vocab, d]`, and its MLP shape."""

    input_embeddings: torch.Tensor
    output_embeddings: torch.Tensor
    intermediate_size: int
    activation: str
    gated: bool
    name: str = "in-memory"
    pca_width: int | None = None  # principal components kept by `pca_vocabularies`; None: the model's own embeddings
    explained_variance: float = 1.0  # share of the input embeddings' variance those components hold


@dataclasses.dataclass(frozen=True)
class AblationConfig:
    """Training settings of both stages; `None` widths and activations follow the source model's MLP.

    The epochs are lincorr's (10 and 20) over shuffled mini-batches; the paper trains 1,000 and 2,000
    epochs (§6) with no batch size given, which `batch_size=None` with those epochs reproduces (full batch,
    one step per epoch, about 30x the compute; docs/ablation.md).
    `softmax_over="domains"` normalises over the source and target domain tokens only (fast,
    the test is top-1 over a domain anyway); "full" over the whole vocabulary, as the paper's LM.
    """

    n_stage1: int = 1024
    n_stage2: int = 128
    stage1_epochs: int = 10
    stage2_epochs: int = 20
    batch_size: int | None = 32
    learning_rate: float = 1e-3
    weight_decay: float = 0.0
    hidden_size: int | None = None
    activation: str | None = None
    gated: bool | None = None
    init_std: float = 0.02
    softmax_over: str = "domains"

    def __post_init__(self) -> None:
        if self.softmax_over not in SOFTMAX_OVER:
            raise LincorrError(f"softmax_over must be one of {', '.join(SOFTMAX_OVER)}, got '{self.softmax_over}'")
        if min(self.n_stage1, self.n_stage2, self.stage1_epochs, self.stage2_epochs) < 1:
            raise LincorrError("n_stage1, n_stage2 and the epochs of both stages must be at least 1")


@dataclasses.dataclass(frozen=True)
class AblationResult:
    """Rates over the stage-2 names: target top-1 == ref(s) after stage 2 (and before), chance, source facts learned."""

    study: ClassVar[str] = "ablate"

    relation: str
    mapping: str
    seed: int
    generalization_rate: float
    rate_before: float
    random_baseline: float
    source_learned_rate: float
    stage1_source_accuracy: float
    stage1_target_accuracy: float
    n_pairs: int
    n_test: int
    target_domain_size: int
    seconds: float
    settings: Mapping[str, object]

    def summary(self) -> dict:
        """JSON-ready fields, rates as fractions in [0, 1]."""
        return dataclasses.asdict(self) | {"settings": dict(self.settings)}

    def text(self) -> str:
        """The relation, mapping and seed, then each rate, one per line."""
        summary = self.summary()
        return "\n".join(f"{key:<20} {summary[key]:.4f}" if isinstance(summary[key], float) else f"{key:<20} {summary[key]}"
                         for key in ("relation", "mapping", "seed", "generalization_rate", "rate_before", "random_baseline",
                                     "source_learned_rate", "n_test", "seconds"))


class FeedForward(torch.nn.Module):
    """One freshly initialised MLP block `[n, d] -> [n, d]`: gated (Llama, Gemma) or plain (GPT-2)."""

    def __init__(self, width: int, hidden: int, activation: str, gated: bool, init_std: float, generator: torch.Generator):
        super().__init__()
        self.up = torch.nn.Linear(width, hidden, bias=False)
        self.gate = torch.nn.Linear(width, hidden, bias=False) if gated else None
        self.down = torch.nn.Linear(hidden, width, bias=False)
        self.activation = ACT2FN[activation]
        for parameter in self.parameters():
            # The source models initialise their MLPs with N(0, initializer_range).
            parameter.data = torch.randn(parameter.shape, generator=generator) * init_std

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        if self.gate is None:
            return self.down(self.activation(self.up(pooled)))
        return self.down(self.activation(self.gate(pooled)) * self.up(pooled))


def vocabulary_from_model(model: PreTrainedModel, name: str = "in-memory") -> Vocabulary:
    """The frozen vocabulary of a HF causal LM: input embeddings as the model scales them, its head rows, its MLP shape."""
    embedding = cast(torch.nn.Embedding, model.get_input_embeddings())  # HF input embeddings: an Embedding (Gemma's scales it)
    with torch.no_grad():
        # Calling the module (not reading .weight) applies scaling such as Gemma's sqrt(d).
        ids = torch.arange(embedding.weight.shape[0], device=embedding.weight.device)
        inputs = torch.cat([embedding(chunk) for chunk in ids.split(65536)]).float().cpu()
        head = cast(torch.nn.Linear | None, model.get_output_embeddings())
        outputs = (embedding.weight if head is None else head.weight).detach().float().cpu()
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    width = inputs.shape[1]
    hidden = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * width
    activation = getattr(config, "hidden_activation", None) or getattr(config, "hidden_act", None) or getattr(config, "activation_function", "gelu")
    gated = any("gate_proj" in n or "gate_up_proj" in n for n, _ in model.named_parameters())
    return Vocabulary(inputs, outputs, int(hidden), str(activation), gated, name)


def pca_vocabularies(vocabulary: Vocabulary, widths: Sequence[int]) -> list[Vocabulary]:
    """The vocabulary reduced to its top-`width` principal components, one copy per width (scikit-learn's PCA).

    The input and the output embeddings each keep their own leading components over the whole
    vocabulary. Rows are the rank-`width` reconstruction in the model's own d coordinates (mean plus
    the projection onto the kept components), so the feed-forward block is the same size at every
    width and only the dimensionality of the vocabulary changes; at width d the rows are the
    originals up to rounding. One decomposition per matrix serves every width.
    """
    from sklearn.decomposition import PCA

    full = vocabulary.input_embeddings.shape[1]
    if not widths or any(not 1 <= width <= full for width in widths):
        raise UsageError(f"embedding widths must be between 1 and the model's embedding width {full}, got {list(widths)}")
    # Tied models (Gemma) read a scaled copy of the head rows; the same subspace, so one PCA would do, but
    # untied models (Llama) need their own, and fitting both keeps one code path.
    fitted = [PCA(svd_solver="full").fit(matrix.double().numpy())
              for matrix in (vocabulary.input_embeddings, vocabulary.output_embeddings)]

    def reconstruct(pca, matrix: torch.Tensor, width: int) -> torch.Tensor:
        components = pca.components_[:width]  # [width, d], orthonormal rows
        centered = matrix.double().numpy() - pca.mean_
        return torch.from_numpy(pca.mean_ + (centered @ components.T) @ components).to(matrix.dtype)

    return [
        dataclasses.replace(
            vocabulary,
            input_embeddings=reconstruct(fitted[0], vocabulary.input_embeddings, width),
            output_embeddings=reconstruct(fitted[1], vocabulary.output_embeddings, width),
            name=f"{vocabulary.name} (PCA {width})", pca_width=width,
            explained_variance=float(fitted[0].explained_variance_ratio_[:width].sum()),
        )
        for width in widths
    ]


def pooled_embeddings(prompts: Sequence[str], tokenizer, input_embeddings: torch.Tensor) -> torch.Tensor:
    """Mean of the input embeddings of each prompt's tokens (special tokens as the tokenizer adds them): `[n, d]`."""
    ids, mask = left_pad(tokenize_prompts(tokenizer, prompts), pad_id=0)
    mask = mask.float()
    summed = (input_embeddings[ids] * mask[..., None]).sum(1)
    return summed / mask.sum(1, keepdim=True)


def measure_ablation(vocabulary: Vocabulary, tokenizer, relation: BoundRelation, *, mapping: str = "real", seed: int = 0,
                 config: AblationConfig = AblationConfig()) -> AblationResult:
    """Both stages and the test for one relation (its templates, domains and reference pairs), mapping and seed."""
    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    generator = torch.Generator().manual_seed(seed)
    resolved = resolve_pairs(relation, tokenizer, mapping=mapping, rng=rng)
    data = stage_data(vocabulary, tokenizer, relation, resolved, config, rng, seed)
    hidden = config.hidden_size or vocabulary.intermediate_size
    activation = config.activation or vocabulary.activation
    gated = vocabulary.gated if config.gated is None else config.gated
    block = FeedForward(data.output.shape[1], hidden, activation, gated, config.init_std, generator)
    rates = train_and_test(block, data, config, generator)
    settings = dataclasses.asdict(config) | {
        "hidden_size": hidden,
        "activation": activation,
        "gated": gated,
        "vocabulary": vocabulary.name,
        "embedding_width": vocabulary.pca_width or vocabulary.input_embeddings.shape[1],
        "explained_variance": vocabulary.explained_variance,
        "source_template": relation.source.template,
        "target_template": relation.target.template,
        "n_candidates": len(data.candidates),
        "dropped_words": [d.word for d in relation.source.domain.dropped + relation.target.domain.dropped],
        "dropped_pairs": [dataclasses.asdict(pair) for pair in resolved.dropped],
    }
    return AblationResult(
        relation=relation.label,
        mapping=mapping,
        seed=seed,
        **rates,
        random_baseline=chance_top1(data.stage2_accepted, len(resolved.target_domain)),
        n_pairs=len(resolved.pairs),
        n_test=config.n_stage2,
        target_domain_size=len(resolved.target_domain),
        seconds=time.perf_counter() - started,
        settings=settings,
    )


@dataclasses.dataclass(frozen=True)
class StageData:
    """What both stages train and test on: pooled prompts `[n, d]`, their labels as candidate columns, the candidates' rows."""

    candidates: torch.Tensor  # [n_candidates] token ids the softmax runs over
    output: torch.Tensor  # [n_candidates, d]
    source_columns: torch.Tensor
    target_columns: torch.Tensor
    stage1_features: torch.Tensor  # [2 * n_stage1, d]: the source prompts, then the target prompts
    stage1_labels: torch.Tensor
    stage2_source: torch.Tensor
    stage2_target: torch.Tensor
    stage2_labels: torch.Tensor
    stage2_accepted: list[set[int]]


def stage_data(vocabulary: Vocabulary, tokenizer, relation: BoundRelation, resolved: TokenPairs, config: AblationConfig,
               rng: np.random.Generator, seed: int) -> StageData:
    """Made-up names for both stages, their pairs (every pair used about equally often, in a seeded order) and pooled prompts."""
    names = pseudo_names(config.n_stage1 + config.n_stage2, tokenizer, seed)
    stage1_names, stage2_names = names[: config.n_stage1], names[config.n_stage1 :]
    stage1_pairs = [resolved.pairs[i] for i in rng.permutation(np.resize(rng.permutation(len(resolved.pairs)), config.n_stage1))]
    stage2_pairs = [resolved.pairs[i] for i in rng.permutation(np.resize(rng.permutation(len(resolved.pairs)), config.n_stage2))]

    def pooled(prompt: Prompt, people: Sequence[str]) -> torch.Tensor:
        return pooled_embeddings([fill(prompt.template, x) for x in people], tokenizer, vocabulary.input_embeddings)

    if config.softmax_over == "domains":
        candidates = torch.tensor(sorted(set(resolved.source_domain) | set(resolved.target_domain)))
    else:
        candidates = torch.arange(vocabulary.output_embeddings.shape[0])
    column = {int(token): i for i, token in enumerate(candidates)}
    return StageData(
        candidates=candidates,
        output=vocabulary.output_embeddings[candidates],
        source_columns=torch.tensor([column[t] for t in resolved.source_domain]),
        target_columns=torch.tensor([column[t] for t in resolved.target_domain]),
        stage1_features=torch.cat([pooled(relation.source, stage1_names), pooled(relation.target, stage1_names)]),
        stage1_labels=torch.tensor([column[s] for s, _ in stage1_pairs] + [column[a[0]] for _, a in stage1_pairs]),
        stage2_source=pooled(relation.source, stage2_names),
        stage2_target=pooled(relation.target, stage2_names),
        stage2_labels=torch.tensor([column[s] for s, _ in stage2_pairs]),
        stage2_accepted=[{column[t] for t in accepted} for _, accepted in stage2_pairs],
    )


def train_and_test(block: FeedForward, data: StageData, config: AblationConfig, generator: torch.Generator) -> dict[str, float]:
    """Stage 1, the rate before stage 2, stage 2 and the test: every rate of an `AblationResult`."""
    _train(block, data.stage1_features, data.stage1_labels, data.output, config.stage1_epochs, config, generator, "stage 1")
    with torch.no_grad():
        n1 = config.n_stage1
        stage1_logits = block(data.stage1_features) @ data.output.T
        stage1_source_accuracy = _top1_rate(stage1_logits[:n1], data.source_columns, [{int(y)} for y in data.stage1_labels[:n1]])
        stage1_target_accuracy = _top1_rate(stage1_logits[n1:], data.target_columns, [{int(y)} for y in data.stage1_labels[n1:]])
        rate_before = _top1_rate(block(data.stage2_target) @ data.output.T, data.target_columns, data.stage2_accepted)
    _train(block, data.stage2_source, data.stage2_labels, data.output, config.stage2_epochs, config, generator, "stage 2")
    with torch.no_grad():
        source_learned_rate = _top1_rate(block(data.stage2_source) @ data.output.T, data.source_columns,
                                         [{int(y)} for y in data.stage2_labels])
        generalization_rate = _top1_rate(block(data.stage2_target) @ data.output.T, data.target_columns, data.stage2_accepted)
    return {"generalization_rate": generalization_rate, "rate_before": rate_before, "source_learned_rate": source_learned_rate,
            "stage1_source_accuracy": stage1_source_accuracy, "stage1_target_accuracy": stage1_target_accuracy}


def ablate(
    vocabulary: Vocabulary,
    tokenizer,
    relation: RelationSpec = RelationSpec("city", "country"),
    *,
    mapping: str = "real",
    seed: int = 0,
    config: AblationConfig = AblationConfig(),
    registry=None,
) -> AblationResult:
    """measure_ablation for a registry relation: its prompts' templates, their domains and the reference pairs.

    Under "letters" the words' own tokens do not matter (only their first letters are taught), so subwords stay in.
    """
    bound = bind_relation(registry or load_registry(), relation, tokenizer, keep_subwords=mapping == "letters", require_pairs=False)
    if not bound.pairs:
        raise LincorrError(f"the registry has no reference pairs from '{relation.source}' to '{relation.target}'; add a references entry")
    return measure_ablation(vocabulary, tokenizer, bound, mapping=mapping, seed=seed, config=config)


def _train(
    block: FeedForward,
    features: torch.Tensor,
    labels: torch.Tensor,
    output: torch.Tensor,
    epochs: int,
    config: AblationConfig,
    generator: torch.Generator,
    stage: str,
) -> None:
    """AdamW on cross-entropy of `block(features) @ output.T` `[n, n_candidates]`; a fresh optimiser per stage."""
    optimizer = torch.optim.AdamW(block.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    size = config.batch_size or len(features)
    with progress_bar(range(epochs), desc=stage) as bar:
        for _ in bar:
            order = torch.randperm(len(features), generator=generator) if size < len(features) else torch.arange(len(features))
            for batch in order.split(size):
                loss = torch.nn.functional.cross_entropy(block(features[batch]) @ output.T, labels[batch])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            bar.set_postfix(loss=f"{loss.item():.4f}", refresh=False)


def _top1_rate(logits: torch.Tensor, domain_columns: torch.Tensor, accepted: Sequence[set[int]]) -> float:
    """Share of rows whose top-1 among `domain_columns` of `logits` `[n, n_candidates]` is an accepted column."""
    top = domain_columns[logits[:, domain_columns].argmax(-1)]
    return float(np.mean([int(t) in ok for t, ok in zip(top, accepted)]))
