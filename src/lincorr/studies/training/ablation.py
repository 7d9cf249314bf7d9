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

import numpy as np
import torch
from transformers.activations import ACT2FN

from lincorr.models import left_pad, tokenize_prompts
from lincorr.domains import build_domain, tokenize_word
from lincorr.errors import LincorrError, UsageError
from lincorr.knowledge import load_registry
from lincorr.metrics import chance_top1
from lincorr.names import pseudo_names
from lincorr.outputs import staged_directory, write_json, write_provenance
from lincorr.paper import paper_table
from lincorr.progress import progress_bar
from lincorr.relations import RelationSpec, registry_reference
from lincorr.templates import fill, validate_template

__all__ = [
    "MAPPINGS", "SOFTMAX_OVER", "Vocabulary", "AblationConfig", "AblationResult", "AblationTable", "TokenPairs", "WidthSweep", "vocabulary_from_model", "pca_vocabularies", "resolve_pairs", "run_ablation", "ablate",
    "run_table7", "run_width_sweep",
]


MAPPINGS = ("real", "shuffled", "letters")
SOFTMAX_OVER = ("domains", "full")

Pair = tuple[str, "str | Sequence[str]"]


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

    The epochs are the paper's (10 and 20) over shuffled mini-batches; `batch_size=None` trains
    full-batch instead, one step per epoch, which needs ~100x the epochs and compute.
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


@dataclasses.dataclass(frozen=True)
class TokenPairs:
    """A relation's reference pairs as the ablation sees them: token ids under a mapping (real, shuffled, letters).

    Each source token comes with its accepted target tokens (first = the one taught). Not a relation type of
    its own: under "letters" and "shuffled" these pairs are deliberately not the relation's reference.
    """

    pairs: tuple[tuple[int, tuple[int, ...]], ...]
    source_domain: tuple[int, ...]
    target_domain: tuple[int, ...]
    dropped: tuple[str, ...]


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


def vocabulary_from_model(model: torch.nn.Module, name: str = "in-memory") -> Vocabulary:
    """The frozen vocabulary of a HF causal LM: input embeddings as the model scales them, its head rows, its MLP shape."""
    embedding = model.get_input_embeddings()
    with torch.no_grad():
        # Calling the module (not reading .weight) applies scaling such as Gemma's sqrt(d).
        ids = torch.arange(embedding.weight.shape[0], device=embedding.weight.device)
        inputs = torch.cat([embedding(chunk) for chunk in ids.split(65536)]).float().cpu()
        head = model.get_output_embeddings()
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


def resolve_pairs(
    pairs: Sequence[Pair],
    tokenizer,
    *,
    mapping: str,
    rng: np.random.Generator,
    source_prefix: str = " ",
    target_prefix: str = " ",
    source_domain_words: Sequence[str] = (),
    target_domain_words: Sequence[str] = (),
) -> TokenPairs:
    """Token ids of the pairs and domains under `mapping` ("real", "shuffled" = derangement, "letters" = first letters)."""
    if mapping not in MAPPINGS:
        raise LincorrError(f"mapping must be one of {', '.join(MAPPINGS)}, got '{mapping}'")
    word_pairs = [(s.strip(), tuple(o.strip() for o in ((t,) if isinstance(t, str) else t))) for s, t in pairs]
    source_words = list(dict.fromkeys([s for s, _ in word_pairs] + [w.strip() for w in source_domain_words]))
    target_words = list(dict.fromkeys([o for _, objs in word_pairs for o in objs[:1]] + [w.strip() for w in target_domain_words]))
    if mapping == "letters":
        word_pairs = [(s[0], (objs[0][0],)) for s, objs in word_pairs]
        source_words = list(dict.fromkeys(w[0] for w in source_words))
        target_words = list(dict.fromkeys(w[0] for w in target_words))
    source_domain = build_domain(source_words, tokenizer, name="source", answer_prefix=source_prefix)
    target_domain = build_domain(target_words, tokenizer, name="target", answer_prefix=target_prefix)
    source_ids = dict(zip(source_domain.words, source_domain.token_ids))
    target_ids = dict(zip(target_domain.words, target_domain.token_ids))
    resolved: list[tuple[int, tuple[int, ...]]] = []
    dropped = [d.word for d in source_domain.dropped + target_domain.dropped]
    for source, objects in word_pairs:
        accepted = tuple(i for i in dict.fromkeys(_alias_id(o, target_ids, tokenizer, target_prefix) for o in objects) if i is not None)
        # Under "letters" many pairs share a source letter (Seattle, Sydney -> S): all of them stay.
        if source in source_ids and accepted:
            resolved.append((source_ids[source], accepted))
    if len(resolved) < 2:
        raise LincorrError(f"only {len(resolved)} reference pairs have whole-word tokens; the ablation needs at least 2")
    if mapping == "shuffled":
        resolved = _derange(resolved, rng)
    return TokenPairs(tuple(resolved), source_domain.token_ids, target_domain.token_ids, tuple(dropped))


def _alias_id(word: str, domain_ids: Mapping[str, int], tokenizer, prefix: str) -> int | None:
    """The token of an accepted answer: its domain column, else its own whole-word first token."""
    if word in domain_ids:
        return domain_ids[word]
    entry = tokenize_word(word, tokenizer, prefix)
    return entry.token_id if entry is not None and entry.category != "subword" and entry.token_id in domain_ids.values() else None


def _derange(pairs: list[tuple[int, tuple[int, ...]]], rng: np.random.Generator) -> list[tuple[int, tuple[int, ...]]]:
    """Give every source the taught target of another pair, never one of its own accepted answers."""
    targets = [accepted[0] for _, accepted in pairs]
    for _ in range(1000):
        order = rng.permutation(len(pairs))
        if all(targets[j] not in pairs[i][1] for i, j in enumerate(order)):
            return [(source, (targets[j],)) for (source, _), j in zip(pairs, order)]
    # Random permutations of a heavily repeated target (many cities -> USA) rarely derange; repair by swaps.
    order = list(rng.permutation(len(pairs)))
    for _ in range(100 * len(pairs)):
        bad = [i for i, j in enumerate(order) if targets[j] in pairs[i][1]]
        if not bad:
            return [(source, (targets[j],)) for (source, _), j in zip(pairs, order)]
        i, k = bad[0], int(rng.integers(len(pairs)))
        order[i], order[k] = order[k], order[i]
    raise LincorrError("cannot shuffle these pairs so that no source keeps its target; one target covers most sources")


def pooled_embeddings(prompts: Sequence[str], tokenizer, input_embeddings: torch.Tensor) -> torch.Tensor:
    """Mean of the input embeddings of each prompt's tokens (special tokens as the tokenizer adds them): `[n, d]`."""
    ids, mask = left_pad(tokenize_prompts(tokenizer, prompts), pad_id=0)
    mask = mask.float()
    summed = (input_embeddings[ids] * mask[..., None]).sum(1)
    return summed / mask.sum(1, keepdim=True)


def run_ablation(
    vocabulary: Vocabulary,
    tokenizer,
    *,
    source_template: str,
    target_template: str,
    pairs: Sequence[Pair],
    mapping: str = "real",
    seed: int = 0,
    config: AblationConfig = AblationConfig(),
    source_prefix: str = " ",
    target_prefix: str = " ",
    source_domain_words: Sequence[str] = (),
    target_domain_words: Sequence[str] = (),
    relation: str = "custom",
) -> AblationResult:
    """Both stages and the test for one relation, mapping and seed; `pairs` are (s, t) or (s, (t, alias, ...))."""
    started = time.perf_counter()
    for template in (source_template, target_template):
        validate_template(template)
    rng = np.random.default_rng(seed)
    generator = torch.Generator().manual_seed(seed)
    resolved = resolve_pairs(
        pairs, tokenizer, mapping=mapping, rng=rng, source_prefix=source_prefix, target_prefix=target_prefix,
        source_domain_words=source_domain_words, target_domain_words=target_domain_words,
    )
    names = pseudo_names(config.n_stage1 + config.n_stage2, tokenizer, seed)
    stage1_names, stage2_names = names[: config.n_stage1], names[config.n_stage1 :]
    # Every pair is used about equally often, in a seeded order.
    stage1_pairs = [resolved.pairs[i] for i in rng.permutation(np.resize(rng.permutation(len(resolved.pairs)), config.n_stage1))]
    stage2_pairs = [resolved.pairs[i] for i in rng.permutation(np.resize(rng.permutation(len(resolved.pairs)), config.n_stage2))]

    def pooled(template: str, people: Sequence[str]) -> torch.Tensor:
        return pooled_embeddings([fill(template, x) for x in people], tokenizer, vocabulary.input_embeddings)

    if config.softmax_over == "domains":
        candidates = torch.tensor(sorted(set(resolved.source_domain) | set(resolved.target_domain)))
    else:
        candidates = torch.arange(vocabulary.output_embeddings.shape[0])
    column = {int(token): i for i, token in enumerate(candidates)}
    output = vocabulary.output_embeddings[candidates]  # [n_candidates, d]
    source_columns = torch.tensor([column[t] for t in resolved.source_domain])
    target_columns = torch.tensor([column[t] for t in resolved.target_domain])

    stage1_features = torch.cat([pooled(source_template, stage1_names), pooled(target_template, stage1_names)])
    stage1_labels = torch.tensor([column[s] for s, _ in stage1_pairs] + [column[a[0]] for _, a in stage1_pairs])
    stage2_source = pooled(source_template, stage2_names)
    stage2_target = pooled(target_template, stage2_names)
    stage2_labels = torch.tensor([column[s] for s, _ in stage2_pairs])
    stage2_accepted = [{column[t] for t in accepted} for _, accepted in stage2_pairs]

    hidden = config.hidden_size or vocabulary.intermediate_size
    activation = config.activation or vocabulary.activation
    gated = vocabulary.gated if config.gated is None else config.gated
    block = FeedForward(output.shape[1], hidden, activation, gated, config.init_std, generator)

    _train(block, stage1_features, stage1_labels, output, config.stage1_epochs, config, generator, "stage 1")
    with torch.no_grad():
        n1 = config.n_stage1
        stage1_logits = block(stage1_features) @ output.T
        stage1_source_accuracy = _top1_rate(stage1_logits[:n1], source_columns, [{int(y)} for y in stage1_labels[:n1]])
        stage1_target_accuracy = _top1_rate(stage1_logits[n1:], target_columns, [{int(y)} for y in stage1_labels[n1:]])
        rate_before = _top1_rate(block(stage2_target) @ output.T, target_columns, stage2_accepted)
    _train(block, stage2_source, stage2_labels, output, config.stage2_epochs, config, generator, "stage 2")
    with torch.no_grad():
        source_learned_rate = _top1_rate(block(stage2_source) @ output.T, source_columns, [{int(y)} for y in stage2_labels])
        generalization_rate = _top1_rate(block(stage2_target) @ output.T, target_columns, stage2_accepted)

    settings = dataclasses.asdict(config) | {
        "hidden_size": hidden,
        "activation": activation,
        "gated": gated,
        "vocabulary": vocabulary.name,
        "embedding_width": vocabulary.pca_width or vocabulary.input_embeddings.shape[1],
        "explained_variance": vocabulary.explained_variance,
        "source_template": source_template,
        "target_template": target_template,
        "n_candidates": len(candidates),
        "dropped_words": list(resolved.dropped),
    }
    return AblationResult(
        relation=relation,
        mapping=mapping,
        seed=seed,
        generalization_rate=generalization_rate,
        rate_before=rate_before,
        random_baseline=chance_top1(stage2_accepted, len(resolved.target_domain)),
        source_learned_rate=source_learned_rate,
        stage1_source_accuracy=stage1_source_accuracy,
        stage1_target_accuracy=stage1_target_accuracy,
        n_pairs=len(resolved.pairs),
        n_test=config.n_stage2,
        target_domain_size=len(resolved.target_domain),
        seconds=time.perf_counter() - started,
        settings=settings,
    )


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
    """run_ablation for a registry relation: its prompts' templates, their domains and the reference pairs."""
    registry = registry or load_registry()
    source_spec, target_spec = registry.prompt(relation.source), registry.prompt(relation.target)
    pairs, _ = registry_reference(registry, relation)
    if not pairs:
        raise LincorrError(f"the registry has no reference pairs from '{relation.source}' to '{relation.target}'; add a references entry")
    return run_ablation(
        vocabulary,
        tokenizer,
        source_template=source_spec.template,
        target_template=target_spec.template,
        pairs=pairs,
        mapping=mapping,
        seed=seed,
        config=config,
        source_prefix=source_spec.answer_prefix,
        target_prefix=target_spec.answer_prefix,
        source_domain_words=registry.domain_words(source_spec.domain),
        target_domain_words=registry.domain_words(target_spec.domain),
        relation=relation.label,
    )


@dataclasses.dataclass(frozen=True)
class AblationTable:
    """Table 7 over several seeds: one AblationResult per (row, seed)."""

    results: tuple[AblationResult, ...]

    def rows(self) -> list[dict]:
        """Per (relation, mapping): mean and standard deviation over seeds, in percent, beside the paper's number."""
        groups: dict[tuple[str, str], list[AblationResult]] = {}
        for result in self.results:
            groups.setdefault((result.relation, result.mapping), []).append(result)
        paper = paper_table("table7")
        rows = []
        for (relation, mapping), results in groups.items():
            published = next((row for row in paper.rows if row.relation.source + "->" + row.relation.target == relation
                              and row["mapping"] == mapping), None)
            rates = 100 * np.array([r.generalization_rate for r in results])
            rows.append({
                "relation": relation,
                "mapping": mapping,
                "generalization_mean": float(rates.mean()),
                "generalization_std": float(rates.std(ddof=1)) if len(rates) > 1 else 0.0,
                "rate_before": 100 * float(np.mean([r.rate_before for r in results])),
                "source_learned": 100 * float(np.mean([r.source_learned_rate for r in results])),
                # Aliases make the baseline depend on which pairs a seed tests, so it is averaged too.
                "random_baseline": 100 * float(np.mean([r.random_baseline for r in results])),
                "paper": published["generalization"] if published else None,
                "paper_model": paper.model,
                "seeds": [r.seed for r in results],
                "seconds": float(np.mean([r.seconds for r in results])),
            })
        return rows

    def markdown(self) -> str:
        """A Markdown table: ours (mean ± sd over seeds) next to the paper's Table 7."""
        lines = [
            f"| relation | mapping | generalization % | before stage 2 % | source learned % | random % | {paper_table('table7').column_title} % | s / run |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for row in self.rows():
            paper = "–" if row["paper"] is None else f"{row['paper']:.2f}"
            lines.append(
                f"| {row['relation']} | {row['mapping']} | {row['generalization_mean']:.2f} ± {row['generalization_std']:.2f} "
                f"| {row['rate_before']:.2f} | {row['source_learned']:.2f} | {row['random_baseline']:.2f} | {paper} "
                f"| {row['seconds']:.0f} |"
            )
        return "\n".join(lines) + "\n"

    def save(self, directory) -> None:
        """table7.md, table7.json (the rows) and provenance.json (the settings every row shares)."""
        with staged_directory(directory) as out:
            write_provenance(out, settings=shared_settings(self.results))
            (out / "table7.md").write_text(self.markdown(), encoding="utf-8")
            write_json(out / "table7.json", self.rows())


def shared_settings(results: Sequence[AblationResult]) -> dict:
    """The settings every one of `results` was run with (what a table's provenance records once)."""
    first = results[0].settings if results else {}
    return {key: value for key, value in first.items() if all(r.settings.get(key) == value for r in results)}


def run_table7(
    vocabulary: Vocabulary,
    tokenizer,
    *,
    seeds: Sequence[int] = (0, 1, 2),
    config: AblationConfig = AblationConfig(),
    rows: Sequence[tuple[RelationSpec, str]] | None = None,
    registry=None,
) -> AblationTable:
    """Every (relation, mapping) row (default: the paper's Table 7) for every seed."""
    registry = registry or load_registry()
    if rows is None:
        rows = [(RelationSpec(row.relation.source, row.relation.target), row["mapping"]) for row in paper_table("table7").rows]
    results = [
        ablate(vocabulary, tokenizer, relation, mapping=mapping, seed=seed, config=config, registry=registry)
        for relation, mapping in rows
        for seed in seeds
    ]
    return AblationTable(tuple(results))


@dataclasses.dataclass(frozen=True)
class WidthSweep:
    """The ablation of one relation on PCA-reduced copies of one vocabulary: every width, mapping and seed."""

    results: tuple[AblationResult, ...]

    def rows(self) -> list[dict]:
        """Per (width, mapping): generalization mean and sd over seeds, the rate before stage 2, stage-1 fit and chance, in percent."""
        groups: dict[tuple[int, str], list[AblationResult]] = {}
        for result in self.results:
            groups.setdefault((result.settings["embedding_width"], result.mapping), []).append(result)
        rows = []
        for (width, mapping), results in sorted(groups.items(), key=lambda item: (item[0][0], MAPPINGS.index(item[0][1]))):
            rates = 100 * np.array([r.generalization_rate for r in results])
            rows.append({
                "relation": results[0].relation, "embedding_width": width, "mapping": mapping,
                "explained_variance": results[0].settings["explained_variance"],
                "generalization_mean": float(rates.mean()), "generalization_std": float(rates.std(ddof=1)) if len(rates) > 1 else 0.0,
                "rate_before": 100 * float(np.mean([r.rate_before for r in results])),
                "source_learned": 100 * float(np.mean([r.source_learned_rate for r in results])),
                "stage1_target_accuracy": 100 * float(np.mean([r.stage1_target_accuracy for r in results])),
                "random_baseline": 100 * float(np.mean([r.random_baseline for r in results])),
                "seeds": [r.seed for r in results], "seconds": float(np.mean([r.seconds for r in results])),
            })
        return rows

    def markdown(self) -> str:
        """One line per width: each mapping's generalization (mean ± sd over seeds), stage-1 target fit and chance, in percent."""
        by_width: dict[int, dict[str, dict]] = {}
        for row in self.rows():
            by_width.setdefault(row["embedding_width"], {})[row["mapping"]] = row
        mappings = [m for m in MAPPINGS if any(m in rows for rows in by_width.values())]

        def cells(rows: dict[str, dict], key: str, digits: int) -> str:
            def shown(row: dict) -> str:
                spread = f" ± {row['generalization_std']:.{digits}f}" if key == "generalization_mean" else ""
                return f"{row[key]:.{digits}f}{spread}"
            return " / ".join(shown(rows[m]) if m in rows else "–" for m in mappings)

        names = " / ".join(mappings)
        lines = [f"| width | variance kept | generalization % ({names}) | stage-1 target fit % | random % |", "|---|---|---|---|---|"]
        for width, rows in by_width.items():
            variance = next(iter(rows.values()))["explained_variance"]
            lines.append(f"| {width} | {variance:.1%} | {cells(rows, 'generalization_mean', 2)} | {cells(rows, 'stage1_target_accuracy', 0)} "
                         f"| {cells(rows, 'random_baseline', 2)} |")
        return "\n".join(lines) + "\n"

    def save(self, directory) -> None:
        """widths.md, widths.json (the rows) and provenance.json (the settings every run shares)."""
        with staged_directory(directory) as out:
            write_provenance(out, settings=shared_settings(self.results))
            (out / "widths.md").write_text(self.markdown(), encoding="utf-8")
            write_json(out / "widths.json", self.rows())


def run_width_sweep(
    vocabulary: Vocabulary,
    tokenizer,
    relation: RelationSpec = RelationSpec("city", "country"),
    *,
    widths: Sequence[int],
    seeds: Sequence[int] = (0, 1, 2),
    mappings: Sequence[str] = MAPPINGS,
    config: AblationConfig = AblationConfig(),
    registry=None,
) -> WidthSweep:
    """`ablate` on the vocabulary reduced to each of `widths` principal components (`pca_vocabularies`), every mapping and seed.

    The block, its training and the test are the same at every width, so a trend in the rates is the
    vocabulary's dimensionality at work (§6's hypothesis that generalization lives in the vocabulary).
    """
    registry = registry or load_registry()
    results = [
        ablate(reduced, tokenizer, relation, mapping=mapping, seed=seed, config=config, registry=registry)
        for reduced in pca_vocabularies(vocabulary, widths)
        for mapping in mappings
        for seed in seeds
    ]
    return WidthSweep(tuple(results))


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
