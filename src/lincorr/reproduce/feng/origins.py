"""The steps behind Feng et al.'s claims on the origins of extractive structures (§6): data ordering (Fig. 4), grafting (Table 3, Fig. 6).

The made-up implicature of the origins study (`OriginsConfig.data`): "{name} dax" -> city and
"{name} wug the" -> the city's animal. The weight sets of grafting are built by the origins
study's `graft_measures` (the one place they are built): Table 3 ranks them (`graft_ranks`, once
per reproduction, kept in `ctx.shared`) and Fig. 6 scores the two updates (`graft_scores`). Every
trained model is kept in the cache (`checkpoints`), so Fig. 6, a resumed run, and the ordering
phases that train the same examples from the same weights as grafting (facts first: W_F, then
W_F,ImplF; implications first: W_ImplF) load it instead of training again. Ranks are compared name by name: each made-up
name is an independent unit. Fig. 6 correlates over the components, as the paper does.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from lincorr.checkpoints import trained_checkpoint
from lincorr.errors import LincorrError
from lincorr.finetune import TrainConfig
from lincorr.metrics import pearson, pearson_permutation_p
from lincorr.reproduce.step import Context, Measured
from lincorr.reproduce.verdicts import Test, all_of, correlation_above, paired_greater, untestable
from lincorr.studies.extractive.ocr import SMALL_TRAIN, mean_rank, ranks
from lincorr.studies.extractive.origins import CONTINUED_TRAIN, ORDERS, OriginsConfig, graft_measures, ordering_phases
from lincorr.studies.extractive.scores import score_components

# Table 3's columns: what each weight set is asked; its rows: the weight sets the paper prints.
ASKED = ("impl_counterfactual", "impl_original", "facts_counterfactual")
TABLE3_ROWS = ("W_F'", "W_graft", "W~_graft")


def at_model_rate(ctx: Context, train: TrainConfig) -> TrainConfig:
    """`train` at the claim's `learning_rate_by_model` rate for this model, when it names one."""
    rate = dict(ctx.settings.get("learning_rate_by_model") or {}).get(ctx.lm.name)
    return train if rate is None else dataclasses.replace(train, learning_rate=float(rate))


def origins_config(ctx: Context) -> OriginsConfig:
    """The novel data's sizes and the orders from the claim's settings; training as the origins study's, at the model's rate."""
    return OriginsConfig(n_train=int(ctx.settings.get("n_train", 80)), n_test=int(ctx.settings.get("n_test", 20)),
                         n_cities=int(ctx.settings.get("n_cities", 20)), seed=int(ctx.settings.get("seed", 0)),
                         continued=at_model_rate(ctx, CONTINUED_TRAIN), train=at_model_rate(ctx, SMALL_TRAIN),
                         orders=tuple(ctx.settings.get("orders", ORDERS)), batch_size=int(ctx.settings.get("batch_size", 32)))


def ordering(ctx: Context) -> Measured:
    """Fig. 4: after continued training with the implications first, new facts' implications rank worse than after the other orders."""
    config = origins_config(ctx)
    if "implications_then_facts" not in config.orders or len(config.orders) < 2:
        raise LincorrError("the ordering claim compares implications_then_facts with another order; name both in `orders`")
    data = config.data(ctx.registry, ctx.lm.tokenizer)
    rows, test_ranks, use_cache = {}, {}, ctx.collect.use_cache
    for order in config.orders:
        model = ctx.lm
        for phase, examples in ordering_phases(data, order):
            model = trained_checkpoint(model, examples, config.continued, name=f"{ctx.lm.name}+{order} ({phase})", use_cache=use_cache)
        learned = {"train_facts": mean_rank(model, data.train_facts), "train_implications": mean_rank(model, data.train_implications)}
        model = trained_checkpoint(model, data.test_facts.facts(), config.train, name=f"{ctx.lm.name}+{order}+test facts", use_cache=use_cache)
        test_ranks[order] = ranks(model, data.test_implications)
        rows[order] = {k: round(float(v), 2) for k, v in {**learned, "test_facts": mean_rank(model, data.test_facts),
                                                            "test_implications": test_ranks[order].mean()}.items()}
        del model
    tests = [paired_greater(test_ranks["implications_then_facts"], test_ranks[order], f"test implication rank, implications first vs {order}",
                            ctx.interest, "test names") for order in config.orders if order != "implications_then_facts"]
    text = "; ".join(f"{order}: training facts/implications {r['train_facts']:.2f}/{r['train_implications']:.2f}, test implications "
                     f"{r['test_implications']:.2f}" for order, r in rows.items())
    return Measured({"orders": rows, "n_train": config.n_train, "n_test": config.n_test}, text, all_of(tests, "paired tests"))


def graft_ranks(ctx: Context) -> dict:
    """Each name's ranks under the weight sets Table 3 prints: {weights: {asked: [n_train]}} (`graft_measures`), once per reproduction."""
    config = origins_config(ctx)
    key = ("feng.graft", config)
    if key not in ctx.shared:
        data = config.data(ctx.registry, ctx.lm.tokenizer)
        queries = (data.counterfactual_implications, data.train_implications, data.counterfactual_facts)

        def asked(name: str, model) -> dict | None:
            return dict(zip(ASKED, (ranks(model, q) for q in queries))) if name in TABLE3_ROWS else None

        measured, _ = graft_measures(ctx.lm, data, config, asked, scores=False, use_cache=ctx.collect.use_cache)
        ctx.shared[key] = {name: measured[name] for name in TABLE3_ROWS}
    return ctx.shared[key]


def graft_scores(ctx: Context) -> dict[str, np.ndarray]:
    """Fig. 6's scores per component of `score_components`: {"downstream", "informative"} (`graft_measures`; the weight sets
    Table 3 trained are loaded from the cache)."""
    config = origins_config(ctx)
    data = config.data(ctx.registry, ctx.lm.tokenizer)
    return graft_measures(ctx.lm, data, config, None, scores=True, use_cache=ctx.collect.use_cache)[1]


def graft(ctx: Context) -> Measured:
    """Table 3: W_graft answers the counterfactual implications better than W_F' and than the control W~_graft (paired Wilcoxon)."""
    measured = graft_ranks(ctx)
    rows = {weights: [round(float(measured[weights][k].mean()), 2) for k in ASKED] for weights in measured}
    counterfactual = {weights: by_asked["impl_counterfactual"] for weights, by_asked in measured.items()}
    tests = [paired_greater(counterfactual[other], counterfactual["W_graft"], f"Impl F' rank, {other} vs W_graft", ctx.interest, "training names")
             for other in ("W_F'", "W~_graft")]
    text = "[Impl F', Impl F, F'] mean ranks: " + "; ".join(f"{w} {v[0]:.2f}/{v[1]:.2f}/{v[2]:.2f}" for w, v in rows.items())
    return Measured({"rows": rows}, text, all_of(tests, "paired tests"))


def correlation_test(kind: str, downstream: np.ndarray, informative: np.ndarray, interest: float | None) -> Test:
    """Pearson r of the two scores over one kind's components above 0: p from shuffled pairings (permutation), the interval
    and the power at `interest` from Fisher's z over the components (`correlation_above`)."""
    n = len(downstream)
    r, p = pearson(downstream, informative), pearson_permutation_p(downstream, informative)
    name = f"{kind}s: Pearson r, permutation over {n} components"
    if not (np.isfinite(r) and np.isfinite(p)) or n < 4:  # a constant score has no r
        return untestable(f"{name}: undefined", units=n, unit=f"{kind}s")
    return correlation_above(name, r, p, n, f"{kind}s", interest)


def graft_correlation(ctx: Context) -> Measured:
    """Fig. 6: downstream scores correlate with the graft update's informative scores, for MLPs and for heads (each must hold)."""
    scores = graft_scores(ctx)
    kinds = np.array([c.kind for c in score_components(ctx.lm)])
    tests = {kind: correlation_test(kind, scores["downstream"][kinds == kind], scores["informative"][kinds == kind], ctx.interest)
             for kind in ("mlp", "head")}
    ours = {kind: {"r": round(t.statistic, 3) if t.units and t.interval else None, "p": t.p_value if t.interval else None, "n": t.units}
            for kind, t in tests.items()}
    text = ", ".join(f"{kind}s r {v['r']} (p {v['p'] if v['p'] is None else format(v['p'], '.2g')}, {v['n']})" for kind, v in ours.items())
    return Measured(ours, text, all_of(list(tests.values()), "permutation tests"))


STEPS = {"feng_ordering": ordering, "feng_graft": graft, "feng_graft_correlation": graft_correlation}
