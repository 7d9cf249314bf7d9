"""Extractive structures (Feng et al.): two-hop data, the mean-rank metric, and out-of-context reasoning (Fig. 2).

A model is fine-tuned on facts about made-up people and asked about their implications, which
need a fact it already knows for the second hop:

- first-hop update: facts "{name} lives in" -> city, implications "The people in the city {name}
  is from speak" -> the city's language (the new fact is the first hop);
- second-hop update: facts "The mayor of {city} is" -> name, implications "The mayor of the city
  that contains {landmark} is" -> name (the new fact is the second hop).

The metric is the paper's: the 0-based rank of the right answer's first token among the first
tokens of the candidate answers (the 20 cities, languages or names), from the last-position
logits; a candidate ranks above the answer only with a strictly higher logit. Its mean over a set
is 0 when every answer is on top and (k - 1) / 2 by chance (9.5 for 20 candidates).

Cities, languages, landmarks and animals come from the registry (knowledge/data/extractive.yaml);
names from `names.pseudo_names`. The other extractive studies build on this module:
`extractive_scores` (Fig. 3), `extractive_freeze` (Table 2), `extractive_origins` (§6) and
`extractive_predict` (our W as a predictor of OCR).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import TYPE_CHECKING, ClassVar
import time
import uuid
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch

from lincorr.domains import Domain, build_domain
from lincorr.errors import LincorrError
from lincorr.finetune import Fact, TrainConfig, train_on_facts
from lincorr.internals import run
from lincorr.models import LM
from lincorr.names import pseudo_names
from lincorr.outputs import settings_key, staged_directory, write_csv, write_json
from lincorr.results import Stored, record
from lincorr.templates import fill, validate_template

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = [
    "HOPS", "PAPER_TRAIN", "SMALL_TRAIN", "Templates", "World", "QuerySet", "HopData", "load_world",
    "usable_cities", "made_up_names", "hop_data", "ranks", "mean_rank", "chance_mean_rank", "token_report", "train_model",
    "snapshot", "train_and_measure", "FactsConfig", "OcrConfig", "OcrResult", "measure_ocr", "training_settings", "saved_figure",
]

HOPS = ("first", "second")
# The paper's settings (§5.1, OLMo-7B): Adam (no weight decay), lr 3e-6, betas (0.9, 0.999), batch 8,
# 8 epochs, linear decay with 10% warm-up, full fine-tuning, loss on answer tokens. No clipping is mentioned.
PAPER_TRAIN = TrainConfig(learning_rate=3e-6, epochs=8, batch_size=8, schedule="linear", warmup=0.1, max_grad_norm=None)
# At the paper's rate gemma-3-270m-q4km does not learn 20 facts in 8 epochs (fact mean rank 3.50); at 10x it
# does, and batch 4 with a constant rate on the blocks alone gave the strongest OCR of the settings tried
# (docs/mechanisms.md; smollm2-135m-instruct-q41 needs --lr 1e-4). Blocks only: embeddings stay as they
# are, so "early" and "late" in the freezing and scoring studies partition everything that trains.
SMALL_TRAIN = TrainConfig(learning_rate=3e-5, epochs=8, batch_size=4, blocks_only=True)


@dataclasses.dataclass(frozen=True)
class Templates:
    """The prompt templates; "{}" is the name, city or landmark. Answers follow after a space.

    `novel_*` teach the made-up relations of §6: "{name} dax" -> city and "{name} wug the" -> the
    city's animal, an association no model has before training.
    """

    first_fact: str = "{} lives in"
    first_implication: str = "The people in the city {} is from speak"
    second_fact: str = "The mayor of {} is"
    second_implication: str = "The mayor of the city that contains {} is"
    novel_fact: str = "{} dax"
    novel_implication: str = "{} wug the"

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            validate_template(getattr(self, field.name))


@dataclasses.dataclass(frozen=True)
class World:
    """The registry's two-hop data: per city (in file order) its language and landmark, and the animals of §6."""

    cities: tuple[str, ...]
    languages: tuple[str, ...]
    landmarks: tuple[str, ...]
    animals: tuple[str, ...]


def load_world(registry) -> World:
    """Cities with their language and landmark from the references `extractive/city->language` and `->landmark`."""
    languages = dict(registry.reference("extractive/city->language").pairs)
    landmarks = dict(registry.reference("extractive/city->landmark").pairs)
    cities = tuple(city for city in registry.domain_words("extractive/city") if city in languages and city in landmarks)
    return World(cities, tuple(languages[c][0] for c in cities), tuple(landmarks[c][0] for c in cities),
                 registry.domain_words("extractive/animal"))


@dataclasses.dataclass(frozen=True)
class QuerySet:
    """Prompts with their right answers among shared candidates: `answers[i]` is a column of `candidates`.

    `subjects[i]`, when given, is the text in prompt i that the query is about (the made-up name, the
    landmark): the extractive scores resolve positions by it.
    """

    prompts: tuple[str, ...]
    answers: tuple[int, ...]
    candidates: Domain
    subjects: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(self.prompts) != len(self.answers) or not self.prompts:
            raise LincorrError("a query set needs one answer per prompt and at least one prompt")
        if self.subjects and len(self.subjects) != len(self.prompts):
            raise LincorrError("a query set's subjects, when given, are one per prompt")

    def __len__(self) -> int:
        return len(self.prompts)

    def answer_words(self) -> list[str]:
        return [self.candidates.words[a] for a in self.answers]

    def facts(self) -> list[Fact]:
        """The set as training facts (answer after a space)."""
        return [Fact(p, w) for p, w in zip(self.prompts, self.answer_words())]

    def rows(self) -> list[dict]:
        return [{"prompt": p, "answer": w} for p, w in zip(self.prompts, self.answer_words())]


@dataclasses.dataclass(frozen=True)
class HopData:
    """One update's dataset: facts to train on and their implications to test, about `names` paired with `cities`."""

    hop: str
    names: tuple[str, ...]
    cities: tuple[str, ...]  # cities[i] is names[i]'s city
    facts: QuerySet
    implications: QuerySet


def usable_cities(world: World, tokenizer) -> tuple[list[int], list[str]]:
    """Indices of the cities whose own and whose language's first tokens are unique, and why the others were dropped."""
    cities = build_domain(world.cities, tokenizer, name="extractive/city", keep_subwords=True)
    languages = build_domain(world.languages, tokenizer, name="extractive/language", keep_subwords=True)
    dropped = [f"{d.word}: {d.reason}" for d in cities.dropped + languages.dropped]
    kept = [i for i, (c, l) in enumerate(zip(world.cities, world.languages)) if c in cities.words and l in languages.words]
    return kept, dropped


def made_up_names(n: int, tokenizer, seed: int) -> list[str]:
    """`n` made-up names with pairwise different first tokens (they are answers of the second hop)."""
    domain = build_domain(pseudo_names(4 * n, tokenizer, seed), tokenizer, name="names", keep_subwords=True)
    if len(domain) < n:
        raise LincorrError(f"only {len(domain)} made-up names with distinct first tokens; ask for fewer than {n}")
    return list(domain.words[:n])


def hop_data(world: World, tokenizer, hop: str, n: int = 20, seed: int = 0, templates: Templates = Templates()) -> HopData:
    """The first- or second-hop dataset: the first `n` usable cities, each paired with one made-up name (a seeded permutation)."""
    if hop not in HOPS:
        raise LincorrError(f"unknown hop '{hop}'; use one of {', '.join(HOPS)}")
    kept, dropped = usable_cities(world, tokenizer)
    if len(kept) < n:
        raise LincorrError(f"only {len(kept)} cities are usable with this tokenizer ({'; '.join(dropped)}); ask for n <= {len(kept)}")
    kept = kept[:n]
    names = made_up_names(n, tokenizer, seed)
    order = np.random.default_rng(seed).permutation(n)
    cities = [world.cities[kept[i]] for i in order]
    city_domain = build_domain(cities, tokenizer, name="city", keep_subwords=True)
    if hop == "first":
        languages = [world.languages[kept[i]] for i in order]
        facts = QuerySet(tuple(fill(templates.first_fact, x) for x in names), tuple(range(n)), city_domain, tuple(names))
        implications = QuerySet(tuple(fill(templates.first_implication, x) for x in names), tuple(range(n)),
                                build_domain(languages, tokenizer, name="language", keep_subwords=True), tuple(names))
    else:
        name_domain = build_domain(names, tokenizer, name="name", keep_subwords=True)
        landmarks = [world.landmarks[kept[i]] for i in order]
        facts = QuerySet(tuple(fill(templates.second_fact, c) for c in cities), tuple(range(n)), name_domain, tuple(cities))
        implications = QuerySet(tuple(fill(templates.second_implication, m) for m in landmarks), tuple(range(n)), name_domain,
                                tuple(landmarks))
    return HopData(hop, tuple(names), tuple(cities), facts, implications)


def ranks(lm: LM, queries: QuerySet) -> np.ndarray:
    """Each prompt's 0-based rank of its right answer among the candidates' first tokens: `[n_prompts]`."""
    logits = run(lm, list(queries.prompts), token_ids=torch.tensor(queries.candidates.token_ids)).logits.float().cpu()
    right = logits[torch.arange(len(queries)), torch.tensor(queries.answers)]
    return (logits > right[:, None]).sum(1).numpy()


def mean_rank(lm: LM, queries: QuerySet) -> float:
    """The paper's metric: mean rank of the right answers (0 = always on top)."""
    return float(ranks(lm, queries).mean())


def chance_mean_rank(queries: QuerySet) -> float:
    """The mean rank of a random ordering of the candidates: (k - 1) / 2."""
    return (len(queries.candidates) - 1) / 2


def token_report(world: World, tokenizer) -> dict:
    """How the registry words tokenize: single-token answers per domain, the usable cities and why others were dropped.

    Landmarks are never answers (they sit inside second-hop prompts), so only their length in tokens is reported.
    """
    report: dict[str, object] = {}
    for name, words in (("city", world.cities), ("language", world.languages), ("animal", world.animals)):
        domain = build_domain(words, tokenizer, name=name, keep_subwords=True)
        multi = [w for w in words if len(tokenizer(" " + w, add_special_tokens=False)["input_ids"]) > 1]
        report[name] = {"n": len(words), "single_token": len(words) - len(multi), "distinct_first_tokens": len(domain),
                        "multi_token": multi}
    lengths = [len(tokenizer(" " + w, add_special_tokens=False)["input_ids"]) for w in world.landmarks]
    report["landmark"] = {"n": len(lengths), "mean_tokens": float(np.mean(lengths)), "max_tokens": max(lengths)}
    kept, dropped = usable_cities(world, tokenizer)
    report["usable_cities"] = len(kept)
    report["dropped"] = dropped
    return report


def snapshot(model: PreTrainedModel, tokenizer, name: str) -> LM:
    """An LM over a trained (or still training) model, for evaluation.

    Its fingerprint is unique instead of a hash of a gigabyte of weights: these studies never
    cache a trained model's tables, and a unique key can never collide with a cached one.
    """
    return LM(name, model, tokenizer, f"snapshot:{uuid.uuid4().hex}")


def train_model(lm: LM, facts: Sequence[Fact], config: TrainConfig, *, name: str,
                after_epoch: Callable[[int, PreTrainedModel], None] | None = None) -> tuple[LM, tuple[float, ...]]:
    """A fine-tuned copy of `lm` (the caller's model is untouched, see `snapshot`) and the mean loss of each epoch."""
    trained = train_on_facts(lm.model, lm.tokenizer, facts, config, after_epoch=after_epoch)
    return snapshot(trained.model, lm.tokenizer, name), trained.losses


@contextlib.contextmanager
def saved_figure(path, rows: int = 1, columns: int = 1, **options) -> Iterator:
    """`(figure, axes)` of `plt.subplots(rows, columns, **options)`, laid out, written to `path` and closed after the block."""
    import lincorr.plots  # noqa: F401  (selects the Agg backend)
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(rows, columns, **options)
    try:
        yield figure, axes
        figure.tight_layout()
        figure.savefig(path, dpi=120)
    finally:
        plt.close(figure)


def training_settings(config: TrainConfig) -> dict:
    """The JSON record of how a model was trained."""
    return {"optimizer": "AdamW", "learning_rate": config.learning_rate, "batch_size": config.batch_size, "epochs": config.epochs,
            "weight_decay": config.weight_decay, "schedule": config.schedule, "warmup": config.warmup,
            "max_grad_norm": config.max_grad_norm, "trainable": config.trained_parts(),
            "layers": list(config.layers) if config.layers else None, "seed": config.seed}


@dataclasses.dataclass(frozen=True)
class FactsConfig:
    """What every study that teaches made-up facts shares: how many, the pairing seed, how to train (`SMALL_TRAIN` or the
    paper's `PAPER_TRAIN`) and the templates."""

    n_facts: int = 20
    seed: int = 0
    train: TrainConfig = SMALL_TRAIN
    templates: Templates = Templates()


@dataclasses.dataclass(frozen=True)
class OcrConfig(FactsConfig):
    """The facts and their training (`FactsConfig`), and which update: the first hop's or the second's."""

    hop: str = "first"

    def __post_init__(self) -> None:
        if self.hop not in HOPS:
            raise LincorrError(f"unknown hop '{self.hop}'; use one of {', '.join(HOPS)}")
        if self.n_facts < 2:
            raise LincorrError("the OCR study needs at least 2 facts, so that a rank means something")


@dataclasses.dataclass(frozen=True)
class OcrResult(Stored):
    """Mean ranks of facts and implications before training and after every epoch (Fig. 2)."""

    study: ClassVar[str] = "extractive-ocr"

    model_name: str
    config: OcrConfig
    data: HopData
    chance: float
    per_epoch: tuple[dict, ...]  # {epoch, fact_mean_rank, implication_mean_rank}; epoch 0 is the untrained model
    losses: tuple[float, ...]
    seconds: float

    def summary(self) -> dict:
        """The JSON contract of `lincorr extractive ocr --json`."""
        before, after = self.per_epoch[0], self.per_epoch[-1]
        return {
            "hop": self.config.hop, "model": self.model_name, "n_facts": self.config.n_facts, "epochs": len(self.per_epoch) - 1,
            "chance_mean_rank": self.chance,
            "fact_mean_rank_before": before["fact_mean_rank"], "fact_mean_rank_after": after["fact_mean_rank"],
            "implication_mean_rank_before": before["implication_mean_rank"],
            "implication_mean_rank_after": after["implication_mean_rank"],
            "per_epoch": [dict(row) for row in self.per_epoch],
            "training": training_settings(self.config.train), "losses": list(self.losses), "seed": self.config.seed,
            "templates": dataclasses.asdict(self.config.templates), "seconds": self.seconds,
        }

    def text(self) -> str:
        """Mean ranks per epoch, one line each."""
        lines = [f"{self.config.hop}-hop OCR on {self.model_name}: {self.config.n_facts} facts, chance {self.chance:.2f}",
                 f"{'epoch':>5}  {'facts':>6}  {'implications':>12}"]
        lines += [f"{r['epoch']:>5}  {r['fact_mean_rank']:>6.2f}  {r['implication_mean_rank']:>12.2f}" for r in self.per_epoch]
        return "\n".join(lines)

    def plot(self, path) -> None:
        """Fig. 2: implication against fact mean rank, one point per checkpoint (the untrained model is marked)."""
        with saved_figure(path, figsize=(4, 3.6)) as (_, axis):
            facts = [r["fact_mean_rank"] for r in self.per_epoch]
            implications = [r["implication_mean_rank"] for r in self.per_epoch]
            axis.plot(facts, implications, "o-", color="C0")
            axis.plot(facts[:1], implications[:1], "s", color="C3", label="before training")
            axis.axhline(self.chance, color="grey", lw=0.8, ls="--", label=f"chance ({self.chance:.1f})")
            axis.set_xlabel("fact mean rank")
            axis.set_ylabel("implication mean rank")
            axis.set_title(f"{self.config.hop}-hop update, {self.model_name}", fontsize=9)
            axis.legend(fontsize=7)

    def save(self, directory) -> None:
        """ocr.json (summary and the dataset), per_epoch.csv, ocr.png."""
        with staged_directory(directory) as out:
            record(out, self, settings=settings_key(self.config))
            write_json(out / "ocr.json", {**self.summary(), "facts": self.data.facts.rows(), "implications": self.data.implications.rows()})
            write_csv(out / "per_epoch.csv", ["epoch", "fact_mean_rank", "implication_mean_rank"],
                      [[r["epoch"], r["fact_mean_rank"], r["implication_mean_rank"]] for r in self.per_epoch])
            self.plot(out / "ocr.png")


def train_and_measure(lm: LM, data: HopData, config: TrainConfig) -> tuple[LM, tuple[dict, ...], tuple[float, ...]]:
    """Fine-tune on the hop's facts; mean ranks of facts and implications before training (epoch 0) and after every epoch.

    Returns the fine-tuned model, the rows {epoch, fact_mean_rank, implication_mean_rank} and the epoch losses.
    """

    def measure(epoch: int, model_lm: LM) -> dict:
        return {"epoch": epoch, "fact_mean_rank": mean_rank(model_lm, data.facts),
                "implication_mean_rank": mean_rank(model_lm, data.implications)}

    per_epoch = [measure(0, lm)]
    tuned, losses = train_model(lm, data.facts.facts(), config, name=f"{lm.name}+{data.hop}-hop facts",
                                after_epoch=lambda epoch, model: per_epoch.append(measure(epoch, snapshot(model, lm.tokenizer, lm.name))))
    return tuned, tuple(per_epoch), losses


def measure_ocr(lm: LM, registry, config: OcrConfig = OcrConfig()) -> OcrResult:
    """Fine-tune on the hop's facts only and measure both mean ranks before training and after every epoch."""
    started = time.perf_counter()
    data = hop_data(load_world(registry), lm.tokenizer, config.hop, config.n_facts, config.seed, config.templates)
    _, per_epoch, losses = train_and_measure(lm, data, config.train)
    return OcrResult(lm.name, config, data, chance_mean_rank(data.facts), per_epoch, losses, time.perf_counter() - started)
