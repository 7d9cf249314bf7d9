"""Origins of extractive structures (Feng et al. §6): data ordering (Fig. 4) and weight grafting (Table 3, Fig. 6).

Both use a made-up implicature no model knows: every city gets a random animal, facts are
"{name} dax" -> city and implications "{name} wug the" -> the city's animal (`Templates.novel_*`).
`n_train` training names get a random city each (cities repeat), `n_test` new names one city
each, and the counterfactual facts F' re-assign every training name to a different random city.

- Ordering: continued training on the training facts and implications in three orders
  (`ORDERS`: facts then implications, implications then facts, both shuffled together; every
  order sees each example for the same number of epochs), then fine-tuning on the test facts
  only; OCR shows as a falling mean rank of the test implications.
- Grafting: W_F (W trained on F), W_F,ImplF (W_F then trained on Impl F), W_ImplF (W trained on
  Impl F), W_F' (W trained on F'); W_graft = W_F' + (W_F,ImplF - W_F) should answer Impl F' (the
  extraction learned from Impl F applied to the new facts), while the control W~_graft =
  W_F' + (W_ImplF - W) should answer Impl F. Fig. 6 correlates, per component, the downstream
  scores of W_F,ImplF fine-tuned on the test facts with the informative scores of the update
  W_F' -> W_graft, both on their implications.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, ClassVar
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from lincorr.domains import build_domain
from lincorr.errors import LincorrError
from lincorr.paper import published_values
from lincorr.studies.extractive.ocr import (
    SMALL_TRAIN, QuerySet, Templates, chance_mean_rank, load_world, mean_rank, saved_figure, snapshot, train_model, training_settings,
    usable_cities,
)
from lincorr.studies.extractive.scores import linearized_scores, score_components
from lincorr.checkpoints import trained_checkpoint
from lincorr.finetune import Fact, TrainConfig
from lincorr.metrics import pearson, pearson_permutation_p
from lincorr.models import LM
from lincorr.names import pseudo_names
from lincorr.outputs import settings_key, staged_directory, write_csv, write_json
from lincorr.results import Stored, record
from lincorr.templates import fill

__all__ = [
    "ORDERS", "PAPER_TABLE3", "WEIGHT_SETS", "CONTINUED_TRAIN", "NovelData", "novel_data", "ordering_phases", "OriginsConfig", "OrderingResult", "measure_ordering",
    "graft_weights", "graft_measures", "GraftResult", "measure_graft",
]

ORDERS = ("facts_then_implications", "implications_then_facts", "shuffled")
PAPER_TABLE3 = published_values("feng_table3")  # mean ranks of (Impl F', Impl F, F') for three weight sets
# Table 3's rows, in the order of §6.2.
WEIGHT_SETS = ("W", "W_F", "W_F,ImplF", "W_ImplF", "W_F'", "W_graft", "W~_graft")
# Continued training sees 160 examples per epoch; batches of 8 (the paper's size) halve its steps.
CONTINUED_TRAIN = dataclasses.replace(SMALL_TRAIN, batch_size=8)


@dataclasses.dataclass(frozen=True)
class NovelData:
    """The made-up implicature: `animals[i]` belongs to `cities[i]`; query sets over the city and animal candidates."""

    cities: tuple[str, ...]
    animals: tuple[str, ...]
    train_facts: QuerySet
    train_implications: QuerySet
    test_facts: QuerySet
    test_implications: QuerySet
    counterfactual_facts: QuerySet  # F': the training names, each at another city
    counterfactual_implications: QuerySet


def novel_data(world, tokenizer, n_train: int = 80, n_test: int = 20, n_cities: int = 20, seed: int = 0,
               templates: Templates = Templates()) -> NovelData:
    """Seeded assignment of animals to the first `n_cities` usable cities, and of cities to made-up names."""
    kept, dropped = usable_cities(world, tokenizer)
    animals = build_domain(world.animals, tokenizer, name="animal", keep_subwords=True)
    if len(kept) < n_cities or len(animals) < n_cities:
        raise LincorrError(f"{len(kept)} cities and {len(animals)} animals are usable with this tokenizer; ask for n_cities <= "
                           f"{min(len(kept), len(animals))}")
    if n_train < 1 or not 1 <= n_test <= n_cities:
        raise LincorrError(f"the novel dataset needs n_train >= 1 and 1 <= n_test <= n_cities ({n_cities})")
    rng = np.random.default_rng(seed)
    cities = [world.cities[i] for i in kept[:n_cities]]
    animal_of = [animals.words[i] for i in rng.permutation(len(animals))[:n_cities]]
    city_domain = build_domain(cities, tokenizer, name="city", keep_subwords=True)
    animal_domain = build_domain(animal_of, tokenizer, name="animal", keep_subwords=True)
    names = pseudo_names(n_train + n_test, tokenizer, seed + 20_000)
    train_names, test_names = names[:n_train], names[n_train:]
    train_city = rng.integers(n_cities, size=n_train)
    counterfactual_city = (train_city + rng.integers(1, n_cities, size=n_train)) % n_cities
    test_city = rng.permutation(n_cities)[:n_test]

    def sets(people: Sequence[str], city_rows: np.ndarray) -> tuple[QuerySet, QuerySet]:
        rows = tuple(int(c) for c in city_rows)
        return (QuerySet(tuple(fill(templates.novel_fact, p) for p in people), rows, city_domain),
                QuerySet(tuple(fill(templates.novel_implication, p) for p in people), rows, animal_domain))

    return NovelData(tuple(cities), tuple(animal_of), *sets(train_names, train_city), *sets(test_names, test_city),
                     *sets(train_names, counterfactual_city))


def ordering_phases(data: NovelData, order: str) -> list[tuple[str, list[Fact]]]:
    """The continued-training sequence of one order: (phase name, examples) in the order they are trained on.

    Each phase trains for the configured epochs with a fresh shuffle per epoch; "shuffled" is one
    phase over the facts and implications together, so every order sees each example equally often.
    """
    facts, implications = data.train_facts.facts(), data.train_implications.facts()
    if order == "facts_then_implications":
        return [("facts", facts), ("implications", implications)]
    if order == "implications_then_facts":
        return [("implications", implications), ("facts", facts)]
    if order == "shuffled":
        return [("shuffled", facts + implications)]
    raise LincorrError(f"unknown order '{order}'; use one of {', '.join(ORDERS)}")


@dataclasses.dataclass(frozen=True)
class OriginsConfig:
    """The novel dataset (sizes, seed, templates), continued training (ordering phases; every weight set of grafting),
    fine-tuning on the test facts, the orders the ordering study runs and the batch size of grafting's scores."""

    n_train: int = 80
    n_test: int = 20
    n_cities: int = 20
    seed: int = 0
    continued: TrainConfig = CONTINUED_TRAIN
    train: TrainConfig = SMALL_TRAIN
    templates: Templates = Templates()
    orders: tuple[str, ...] = ORDERS
    batch_size: int = 32

    def data(self, registry, tokenizer) -> NovelData:
        return novel_data(load_world(registry), tokenizer, self.n_train, self.n_test, self.n_cities, self.seed, self.templates)


def _measured(lm: LM, facts: QuerySet, implications: QuerySet, **fields) -> dict:
    return {**fields, "fact_mean_rank": mean_rank(lm, facts), "implication_mean_rank": mean_rank(lm, implications)}


@dataclasses.dataclass(frozen=True)
class OrderingResult(Stored):
    """Fig. 4: per order, mean ranks through continued training (training sets) and test fine-tuning (test sets)."""

    study: ClassVar[str] = "extractive-ordering"

    model_name: str
    config: OriginsConfig
    data: NovelData
    continued: dict  # order -> [{phase, epoch, fact_mean_rank, implication_mean_rank}], first row before training
    test: dict  # order -> [{epoch, fact_mean_rank, implication_mean_rank}], epoch 0 after continued training
    seconds: float

    def summary(self) -> dict:
        """The JSON contract of `lincorr extractive ordering --json`."""
        orders = []
        for order in self.config.orders:
            continued, test = self.continued[order], self.test[order]
            orders.append({
                "order": order, "phases": [name for name, _ in ordering_phases(self.data, order)],
                "train_fact_mean_rank_after": continued[-1]["fact_mean_rank"],
                "train_implication_mean_rank_after": continued[-1]["implication_mean_rank"],
                "test_fact_mean_rank_before": test[0]["fact_mean_rank"], "test_fact_mean_rank_after": test[-1]["fact_mean_rank"],
                "test_implication_mean_rank_before": test[0]["implication_mean_rank"],
                "test_implication_mean_rank_after": test[-1]["implication_mean_rank"],
                "continued_curve": [dict(r) for r in continued], "test_curve": [dict(r) for r in test],
            })
        return {"model": self.model_name, "n_train": self.config.n_train, "n_test": self.config.n_test, "n_cities": self.config.n_cities,
                "chance_mean_rank": chance_mean_rank(self.data.test_facts), "before_training": dict(self.continued[self.config.orders[0]][0]),
                "orders": orders, "continued_training": training_settings(self.config.continued),
                "test_training": training_settings(self.config.train), "seed": self.config.seed,
                "templates": {"fact": self.config.templates.novel_fact, "implication": self.config.templates.novel_implication},
                "seconds": self.seconds}

    def text(self) -> str:
        """Per order: training-set ranks after continued training, test ranks before and after test fine-tuning."""
        lines = [f"Data ordering on {self.model_name} (chance {chance_mean_rank(self.data.test_facts):.2f})",
                 f"{'order':<26} {'train facts':>11} {'train impl':>10} {'test facts':>14} {'test impl':>14}"]
        for row in self.summary()["orders"]:
            lines.append(f"{row['order']:<26} {row['train_fact_mean_rank_after']:>11.2f} {row['train_implication_mean_rank_after']:>10.2f} "
                         f"{row['test_fact_mean_rank_before']:>6.2f} -> {row['test_fact_mean_rank_after']:<4.2f} "
                         f"{row['test_implication_mean_rank_before']:>6.2f} -> {row['test_implication_mean_rank_after']:<4.2f}")
        return "\n".join(lines)

    def plot(self, path) -> None:
        """Fig. 4: left, continued training (training facts dashed, implications solid); right, test fine-tuning."""
        with saved_figure(path, 1, 2, figsize=(9, 3.4), sharey=True) as (_, axes):
            for colour, order in enumerate(self.config.orders):
                for axis, rows in ((axes[0], self.continued[order]), (axes[1], self.test[order])):
                    steps = range(len(rows))
                    axis.plot(steps, [r["implication_mean_rank"] for r in rows], "-", color=f"C{colour}", label=f"{order}: implications")
                    axis.plot(steps, [r["fact_mean_rank"] for r in rows], "--", color=f"C{colour}", label=f"{order}: facts")
            axes[0].set_xlabel("epoch of continued training (all phases)")
            axes[1].set_xlabel("epoch of fine-tuning on test facts")
            axes[0].set_ylabel("mean rank")
            axes[0].set_title("training facts and implications", fontsize=9)
            axes[1].set_title("test facts and implications (OCR)", fontsize=9)
            axes[1].legend(fontsize=6)

    def save(self, directory) -> None:
        """ordering.json (summary), ordering.csv (every curve point), ordering.png."""
        with staged_directory(directory) as out:
            record(out, self, settings=settings_key(self.config))
            write_json(out / "ordering.json", self.summary())
            rows = [[order, "continued", r.get("phase", ""), r["epoch"], r["fact_mean_rank"], r["implication_mean_rank"]]
                    for order in self.config.orders for r in self.continued[order]]
            rows += [[order, "test", "test facts", r["epoch"], r["fact_mean_rank"], r["implication_mean_rank"]]
                     for order in self.config.orders for r in self.test[order]]
            write_csv(out / "ordering.csv", ["order", "stage", "phase", "epoch", "fact_mean_rank", "implication_mean_rank"], rows)
            self.plot(out / "ordering.png")


def _train_measuring(lm: LM, facts: list[Fact], config: TrainConfig, name: str, measure, curve: list, **fields) -> LM:
    """Train, appending `measure(model) | fields | {"epoch": e}` to `curve` after every epoch."""
    return train_model(lm, facts, config, name=name, after_epoch=lambda epoch, model: curve.append(
        measure(snapshot(model, lm.tokenizer, name), **fields, epoch=epoch)))[0]


def measure_ordering(lm: LM, registry, config: OriginsConfig = OriginsConfig()) -> OrderingResult:
    """Fig. 4: continued training in each order, then fine-tuning on the test facts, measuring after every epoch."""
    started = time.perf_counter()
    data = config.data(registry, lm.tokenizer)

    def on_train(model: LM, **fields) -> dict:
        return _measured(model, data.train_facts, data.train_implications, **fields)

    def on_test(model: LM, **fields) -> dict:
        return _measured(model, data.test_facts, data.test_implications, **fields)

    before = on_train(lm, phase="before", epoch=0)
    continued, test = {}, {}
    for order in config.orders:
        curve, model = [before], lm
        for phase, examples in ordering_phases(data, order):
            model = _train_measuring(model, examples, config.continued, f"{lm.name}+{order}", on_train, curve, phase=phase)
        continued[order] = curve
        test[order] = [on_test(model, epoch=0)]
        _train_measuring(model, data.test_facts.facts(), config.train, f"{lm.name}+{order}+test facts", on_test, test[order])
        del model
    return OrderingResult(lm.name, config, data, continued, test, time.perf_counter() - started)


def graft_weights(base: LM, plus: LM, minus: LM, name: str) -> LM:
    """base + (plus - minus), parameter by parameter, in the parameters' own dtype."""
    model = copy.deepcopy(base.model)
    add, subtract = dict(plus.model.named_parameters()), dict(minus.model.named_parameters())
    with torch.no_grad():
        for parameter_name, parameter in model.named_parameters():
            parameter.add_(add[parameter_name] - subtract[parameter_name])
    return snapshot(model, base.tokenizer, name)


@dataclasses.dataclass(frozen=True)
class GraftResult(Stored):
    """Table 3 (mean ranks of Impl F', Impl F and F' per weight set) and Fig. 6 (downstream against informative scores)."""

    study: ClassVar[str] = "extractive-graft"

    model_name: str
    config: OriginsConfig
    rows: tuple[dict, ...]  # {weights, impl_counterfactual, impl_original, facts_counterfactual, facts_original}
    components: tuple[str, ...]
    downstream: np.ndarray  # [n_components]: W_F,ImplF fine-tuned on the test facts, on Impl F_test
    informative: np.ndarray  # [n_components]: the update W_F' -> W_graft, on Impl F'
    chance: float
    seconds: float

    def correlation(self) -> dict:
        """Pearson r of downstream against informative scores, for MLPs and heads separately, each with its permutation p.

        The paper calls Fig. 6's correlation "statistically significant": p is the one-sided permutation test over the
        components (scores shuffled among them), so it says how often a pairing of no relation reaches r.
        """
        out = {}
        for kind in ("mlp", "head"):
            chosen = np.array([c.startswith(kind) for c in self.components])
            out[kind] = pearson(self.downstream[chosen], self.informative[chosen])
            out[f"p_{kind}"] = pearson_permutation_p(self.downstream[chosen], self.informative[chosen])
            out[f"n_{kind}"] = int(chosen.sum())
        return out

    def summary(self) -> dict:
        """The JSON contract of `lincorr extractive graft --json`."""
        return {"model": self.model_name, "rows": [dict(r) for r in self.rows], "chance_mean_rank": self.chance,
                "downstream_informative_r": self.correlation(),
                "paper": {"model": PAPER_TABLE3.model, "rows": [{"weights": w, "impl_counterfactual": v[0], "impl_original": v[1],
                                                                 "facts_counterfactual": v[2]} for w, v in PAPER_TABLE3.values.items()]},
                "n_train": self.config.n_train, "n_test": self.config.n_test, "n_cities": self.config.n_cities, "seed": self.config.seed,
                "continued_training": training_settings(self.config.continued), "test_training": training_settings(self.config.train),
                "seconds": self.seconds}

    def text(self) -> str:
        """Table 3 with the paper's OLMo-7B numbers in brackets where it has them, and Fig. 6's correlations."""
        lines = [f"Table 3 on {self.model_name} (chance {self.chance:.2f}); paper ({PAPER_TABLE3.model}) in brackets",
                 f"{'weights':<12} {'Impl F_cf':>14} {'Impl F':>14} {'F_cf':>14} {'F':>6}"]
        for row in self.rows:
            paper = PAPER_TABLE3.values.get(row["weights"])
            cells = [f"{row[key]:5.2f}" + (f" ({paper[i]:4.2f})" if paper else "")
                     for i, key in enumerate(("impl_counterfactual", "impl_original", "facts_counterfactual"))]
            lines.append(f"{row['weights']:<12} " + " ".join(f"{c:>14}" for c in cells) + f" {row['facts_original']:>6.2f}")
        r = self.correlation()
        lines.append(f"Fig. 6: r(downstream, informative) = {r['mlp']:.3f} (p {r['p_mlp']:.2g}) over {r['n_mlp']} MLPs, "
                     f"{r['head']:.3f} (p {r['p_head']:.2g}) over {r['n_head']} heads")
        return "\n".join(lines)

    def plot(self, path) -> None:
        """Fig. 6: downstream against informative score per component, MLPs and heads in separate panels."""
        r = self.correlation()
        with saved_figure(path, 1, 2, figsize=(8, 3.4)) as (_, axes):
            for axis, kind in zip(axes, ("mlp", "head")):
                chosen = np.array([c.startswith(kind) for c in self.components])
                axis.scatter(self.informative[chosen], self.downstream[chosen], s=10)
                axis.set_xlabel("informative score of W_F' -> W_graft")
                axis.set_ylabel("downstream score (test facts)")
                axis.set_title(f"{kind}s: r = {r[kind]:.3f}", fontsize=9)

    def save(self, directory) -> None:
        """graft.json (summary), graft_scores.csv (both scores per component), graft.png (Fig. 6)."""
        with staged_directory(directory) as out:
            record(out, self, settings=settings_key(self.config))
            write_json(out / "graft.json", self.summary())
            write_csv(out / "graft_scores.csv", ["component", "downstream", "informative"],
                      [[c, float(d), float(i)] for c, d, i in zip(self.components, self.downstream, self.informative)])
            self.plot(out / "graft.png")


def graft_measures(lm: LM, data: NovelData, config: OriginsConfig, measure: Callable[[str, LM], Any] | None, *,
                   scores: bool = True, use_cache: bool = True) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Train every weight set of Table 3, graft, and `measure(name, model)` each (names of `WEIGHT_SETS`; none without
    `measure`); with `scores`, Fig. 6's two scores per component: {"downstream": W_F,ImplF fine-tuned on the test facts,
    on their implications, "informative": the update W_F' -> W_graft, on Impl F'}, each `[n_components]`.

    The one place the weight sets are built (the origins study and `lincorr reproduce feng` both call it). Each is a full
    copy of the model, measured as soon as it exists and dropped once nothing needs it; each trained one is kept in the
    cache (`checkpoints.trained_checkpoint`, unless `use_cache` is False), so a later call (Fig. 6 after Table 3, a
    resumed run, the ordering phases that train the same facts from the same weights) loads it instead of training again.
    """
    def trained(base: LM, examples: QuerySet, name: str, train: TrainConfig = config.continued) -> LM:
        return trained_checkpoint(base, examples.facts(), train, name=name, use_cache=use_cache)

    measured = {}

    def keep(name: str, model: LM) -> None:
        if measure is not None:
            measured[name] = measure(name, model)

    keep("W", lm)
    w_f = trained(lm, data.train_facts, "W_F")
    keep("W_F", w_f)
    w_f_impl = trained(w_f, data.train_implications, "W_F,ImplF")
    keep("W_F,ImplF", w_f_impl)
    w_cf = trained(lm, data.counterfactual_facts, "W_F'")
    keep("W_F'", w_cf)
    grafted = graft_weights(w_cf, w_f_impl, w_f, "W_graft")
    del w_f
    keep("W_graft", grafted)
    components, found = score_components(lm), {}
    if scores:
        found["informative"] = linearized_scores(w_cf, grafted, data.counterfactual_implications, components=components,
                                                 upstream=False, batch_size=config.batch_size)["informative"]
    del grafted
    if measure is not None:
        w_impl = trained(lm, data.train_implications, "W_ImplF")
        keep("W_ImplF", w_impl)
        keep("W~_graft", graft_weights(w_cf, w_impl, lm, "W~_graft"))
        del w_impl
    del w_cf
    if scores:
        tested = trained(w_f_impl, data.test_facts, "W_F,ImplF+test facts", config.train)
        found["downstream"] = linearized_scores(w_f_impl, tested, data.test_implications, components=components, upstream=False,
                                                batch_size=config.batch_size)["downstream"]
    return {name: measured[name] for name in WEIGHT_SETS if name in measured}, found


def measure_graft(lm: LM, registry, config: OriginsConfig = OriginsConfig(), *, use_cache: bool = True) -> GraftResult:
    """Table 3 and Fig. 6: train the four weight sets, graft, measure; then score both updates (`graft_measures`)."""
    started = time.perf_counter()
    data = config.data(registry, lm.tokenizer)

    def measure(name: str, model: LM) -> dict:
        return {"weights": name, "impl_counterfactual": mean_rank(model, data.counterfactual_implications),
                "impl_original": mean_rank(model, data.train_implications),
                "facts_counterfactual": mean_rank(model, data.counterfactual_facts), "facts_original": mean_rank(model, data.train_facts)}

    rows, scores = graft_measures(lm, data, config, measure, use_cache=use_cache)
    components = score_components(lm)
    return GraftResult(lm.name, config, tuple(rows.values()), tuple(str(c) for c in components), scores["downstream"],
                       scores["informative"], chance_mean_rank(data.test_facts), time.perf_counter() - started)
