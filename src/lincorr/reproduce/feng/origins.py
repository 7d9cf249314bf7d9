"""The steps behind Feng et al.'s claims on the origins of extractive structures (§6): data ordering (Fig. 4), grafting (Table 3, Fig. 6).

The made-up implicature of the origins study (`OriginsConfig.data`): "{name} dax" -> city and
"{name} wug the" -> the city's animal. The weight sets of grafting are trained once per
reproduction (`grafted`, kept in `ctx.shared`) and read by Table 3 and Fig. 6. Ranks are compared
item by item over the same names, as in the two-hop steps.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from lincorr.errors import LincorrError
from lincorr.finetune import TrainConfig
from lincorr.metrics import pearson, pearson_permutation_p
from lincorr.reproduce.step import Context, Measured
from lincorr.reproduce.verdicts import Test, any_of, paired_greater
from lincorr.studies.extractive.ocr import SMALL_TRAIN, mean_rank, ranks, train_model
from lincorr.studies.extractive.origins import CONTINUED_TRAIN, ORDERS, OriginsConfig, graft_weights, ordering_phases
from lincorr.studies.extractive.scores import linearized_scores, score_components

# Table 3's columns: what each weight set is asked.
ASKED = ("impl_counterfactual", "impl_original", "facts_counterfactual")


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
    rows, test_ranks = {}, {}
    for order in config.orders:
        model = ctx.lm
        for phase, examples in ordering_phases(data, order):
            model, _ = train_model(model, examples, config.continued, name=f"{ctx.lm.name}+{order} ({phase})")
        learned = {"train_facts": mean_rank(model, data.train_facts), "train_implications": mean_rank(model, data.train_implications)}
        model, _ = train_model(model, data.test_facts.facts(), config.train, name=f"{ctx.lm.name}+{order}+test facts")
        test_ranks[order] = ranks(model, data.test_implications)
        rows[order] = {k: round(float(v), 2) for k, v in {**learned, "test_facts": mean_rank(model, data.test_facts),
                                                            "test_implications": test_ranks[order].mean()}.items()}
        del model
    tests = [paired_greater(test_ranks["implications_then_facts"], test_ranks[order], f"test implication rank, implications first vs {order}")
             for order in config.orders if order != "implications_then_facts"]
    text = "; ".join(f"{order}: training facts/implications {r['train_facts']:.2f}/{r['train_implications']:.2f}, test implications "
                     f"{r['test_implications']:.2f}" for order, r in rows.items())
    return Measured({"orders": rows, "n_train": config.n_train, "n_test": config.n_test}, text, any_of(tests, "paired tests"))


@dataclasses.dataclass(frozen=True)
class Grafted:
    """Item ranks of the weight sets Table 3 prints ({weights: {asked: [n_train]}}) and Fig. 6's two scores per component."""

    ranks: dict
    components: tuple[str, ...]
    downstream: np.ndarray  # [n_components]: W_F,ImplF fine-tuned on the test facts, on their implications
    informative: np.ndarray  # [n_components]: the update W_F' -> W_graft, on Impl F'


def grafted(ctx: Context) -> Grafted:
    """Train W_F, W_F,ImplF, W_F', W_ImplF, graft, rank and score: once per reproduction (each weight set is a full model copy)."""
    config = origins_config(ctx)
    key = ("feng.graft", config)
    if key in ctx.shared:
        return ctx.shared[key]
    data = config.data(ctx.registry, ctx.lm.tokenizer)

    def trained(base, examples, name: str):
        return train_model(base, examples.facts(), config.continued, name=name)[0]

    def asked(model) -> dict:
        return dict(zip(ASKED, (ranks(model, q) for q in (data.counterfactual_implications, data.train_implications, data.counterfactual_facts))))

    with_facts = trained(ctx.lm, data.train_facts, "W_F")
    extracting = trained(with_facts, data.train_implications, "W_F,ImplF")
    counterfactual = trained(ctx.lm, data.counterfactual_facts, "W_F'")
    graft = graft_weights(counterfactual, extracting, with_facts, "W_graft")
    del with_facts
    control = graft_weights(counterfactual, trained(ctx.lm, data.train_implications, "W_ImplF"), ctx.lm, "W~_graft")
    measured = {"W_F'": asked(counterfactual), "W_graft": asked(graft), "W~_graft": asked(control)}
    del control
    components = score_components(ctx.lm)
    informative = linearized_scores(counterfactual, graft, data.counterfactual_implications, components=components, upstream=False,
                                    batch_size=config.batch_size)["informative"]
    del graft, counterfactual
    tested = train_model(extracting, data.test_facts.facts(), config.train, name="W_F,ImplF+test facts")[0]
    downstream = linearized_scores(extracting, tested, data.test_implications, components=components, upstream=False,
                                   batch_size=config.batch_size)["downstream"]
    ctx.shared[key] = Grafted(measured, tuple(str(c) for c in components), downstream, informative)
    return ctx.shared[key]


def graft(ctx: Context) -> Measured:
    """Table 3: W_graft answers the counterfactual implications better than W_F' and than the control W~_graft (paired Wilcoxon)."""
    result = grafted(ctx)
    rows = {weights: [round(float(result.ranks[weights][k].mean()), 2) for k in ASKED] for weights in result.ranks}
    counterfactual = {weights: by_asked["impl_counterfactual"] for weights, by_asked in result.ranks.items()}
    tests = [paired_greater(counterfactual[other], counterfactual["W_graft"], f"Impl F' rank, {other} vs W_graft") for other in ("W_F'", "W~_graft")]
    text = "[Impl F', Impl F, F'] mean ranks: " + "; ".join(f"{w} {v[0]:.2f}/{v[1]:.2f}/{v[2]:.2f}" for w, v in rows.items())
    return Measured({"rows": rows}, text, any_of(tests, "paired tests"))


def graft_correlation(ctx: Context) -> Measured:
    """Fig. 6: downstream scores correlate with the graft update's informative scores, for MLPs and for heads (permutation p each)."""
    result = grafted(ctx)
    kinds = np.array([c.split("[")[0] for c in result.components])
    ours, tests = {}, []
    for kind in ("mlp", "head"):
        chosen = kinds == kind
        r = pearson(result.downstream[chosen], result.informative[chosen])
        p = pearson_permutation_p(result.downstream[chosen], result.informative[chosen])
        defined = bool(np.isfinite(r) and np.isfinite(p))  # a constant score has no r
        ours[kind] = {"r": round(float(r), 3) if defined else None, "p": p if defined else None, "n": int(chosen.sum())}
        tests.append(Test(f"{kind}s: Pearson r, permutation over {int(chosen.sum())} components", float(r) if defined else 0.0,
                          p if defined else 1.0, defined and r > 0))
    text = ", ".join(f"{kind}s r {v['r']} (p {v['p'] if v['p'] is None else format(v['p'], '.2g')}, {v['n']})" for kind, v in ours.items())
    return Measured(ours, text, any_of(tests, "permutation tests"))


STEPS = {"feng_ordering": ordering, "feng_graft": graft, "feng_graft_correlation": graft_correlation}
