"""The steps behind Feng et al.'s two-hop claims (§5): OCR (Fig. 2), where the scores sit (Fig. 3), freezing (Table 2).

Each hop's model is fine-tuned once per reproduction (`tuned_hop`) and scored once (`hop_scores`),
both kept in `ctx.shared`, so every claim on a hop reads the same model. Training is seeded and
uses the extractive studies' small preset (`SMALL_TRAIN`); a claim's `learning_rate_by_model`
sets the rate for a model that needs another (smollm2-135m-instruct-q41 learns the facts only at 1e-4,
docs/mechanisms.md). The tests compare ranks item by item: each fact or implication's rank of
its right answer among the candidates (the paper's mean rank is their mean).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.stats

from lincorr.internals import layout
from lincorr.models import LM
from lincorr.reproduce import feng_origins
from lincorr.reproduce.step import Context, Measured
from lincorr.reproduce.verdicts import Test, combined, paired_greater
from lincorr.studies.extractive.freeze import choose_split, paper_split, reset_blocks
from lincorr.studies.extractive.ocr import SMALL_TRAIN, HopData, OcrConfig, chance_mean_rank, hop_data, load_world, ranks, train_model
from lincorr.studies.extractive.positions import ROLES
from lincorr.studies.extractive.scores import linearized_scores, score_components

@dataclasses.dataclass(frozen=True)
class TunedHop:
    """One hop's data and fine-tuned model, with every fact's and implication's rank: {"facts"|"implications": {"before"|"after": [n]}}."""

    config: OcrConfig
    data: HopData
    tuned: LM
    ranks: dict


def hop_config(ctx: Context, hop: str) -> OcrConfig:
    """The hop's facts and training from the claim's settings (n_facts, seed, learning_rate_by_model)."""
    return OcrConfig(n_facts=int(ctx.settings.get("n_facts", 20)), seed=int(ctx.settings.get("seed", 0)),
                     train=feng_origins.at_model_rate(ctx, SMALL_TRAIN), hop=hop)


def item_ranks(lm: LM, data: HopData) -> dict[str, np.ndarray]:
    """Each fact's and each implication's rank under `lm`: {"facts": [n], "implications": [n]}."""
    return {"facts": ranks(lm, data.facts), "implications": ranks(lm, data.implications)}


def tuned_hop(ctx: Context, hop: str) -> TunedHop:
    """The hop's model fine-tuned on its facts, trained once per reproduction."""
    config = hop_config(ctx, hop)
    key = ("feng.hop", config)
    if key not in ctx.shared:
        data = hop_data(load_world(ctx.registry), ctx.lm.tokenizer, hop, config.n_facts, config.seed, config.templates)
        before = item_ranks(ctx.lm, data)
        tuned, _ = train_model(ctx.lm, data.facts.facts(), config.train, name=f"{ctx.lm.name}+{hop}-hop facts")
        after = item_ranks(tuned, data)
        ctx.shared[key] = TunedHop(config, data, tuned, {kind: {"before": before[kind], "after": after[kind]} for kind in before})
    return ctx.shared[key]


def hop_scores(ctx: Context, hop: str, upstream: bool = False) -> dict[str, np.ndarray]:
    """`linearized_scores` of the hop's update on its implications (every MLP and head), computed once per reproduction."""
    hop_model = tuned_hop(ctx, hop)
    with_upstream, key = ("feng.scores", hop_model.config, True), ("feng.scores", hop_model.config, upstream)
    if with_upstream in ctx.shared:  # scores with upstream hold the others too
        return ctx.shared[with_upstream]
    if key not in ctx.shared:
        ctx.shared[key] = linearized_scores(ctx.lm, hop_model.tuned, hop_model.data.implications, components=score_components(ctx.lm),
                                            upstream=upstream, batch_size=int(ctx.settings.get("batch_size", 32)))
    return ctx.shared[key]


def ocr(ctx: Context) -> Measured:
    """Fig. 2: trained on the facts only, the implications' ranks fall (paired Wilcoxon of before against after)."""
    hop = str(ctx.settings["hop"])
    hop_model = tuned_hop(ctx, hop)
    mean = {f"{kind}_mean_rank_{when}": round(float(values.mean()), 2) for kind, by_time in hop_model.ranks.items()
            for when, values in by_time.items()}
    ours = {"hop": hop, **mean, "chance_mean_rank": chance_mean_rank(hop_model.data.facts), "n_facts": hop_model.config.n_facts,
            "learning_rate": hop_model.config.train.learning_rate}
    text = (f"{hop} hop: facts {mean['facts_mean_rank_before']:.2f} -> {mean['facts_mean_rank_after']:.2f}, implications "
            f"{mean['implications_mean_rank_before']:.2f} -> {mean['implications_mean_rank_after']:.2f} (chance {ours['chance_mean_rank']:.1f})")
    implications = hop_model.ranks["implications"]
    return Measured(ours, text, paired_greater(implications["before"], implications["after"], "implication rank before vs after training"))


def depth_test(mass: np.ndarray, toward: str, what: str, n_resamples: int = 9999, seed: int = 0) -> Test:
    """Positive per-block `mass` `[n_layers]` sits toward the "early" or "late" blocks.

    The statistic is its mass-weighted mean depth (0 the first block, 1 the last); the one-sided p
    is how often the same masses in a random block order sit as far that way (permutation test).
    """
    depth = np.linspace(0.0, 1.0, len(mass))
    name = f"permutation over blocks: mean depth of {what} toward the {toward} blocks"
    if not np.any(mass > 0):
        return Test(f"{name}: no positive mass", 0.5, 1.0, False)
    result = scipy.stats.permutation_test((mass,), lambda m: float(m @ depth / m.sum()), permutation_type="pairings",
                                          alternative="less" if toward == "early" else "greater", n_resamples=n_resamples,
                                          random_state=seed, vectorized=False)
    centre = float(result.statistic)
    return Test(name, centre, float(result.pvalue), centre < 0.5 if toward == "early" else centre > 0.5)


def part_mask(lm: LM, part: str) -> np.ndarray:
    """Which of `score_components(lm)` belong to `part` ("mlp", "heads" or "all"): `[n_components]` bool."""
    kinds = np.array([c.kind for c in score_components(lm)])
    return {"mlp": kinds == "mlp", "heads": kinds == "head", "all": np.ones(kinds.size, bool)}[part]


def localisation(ctx: Context) -> Measured:
    """Fig. 3: a score's positive mass at one token role, summed per block, sits in the early or late blocks (permutation test)."""
    hop, score, role, part, toward = (str(ctx.settings[k]) for k in ("hop", "score", "role", "part", "toward"))
    by_role = hop_scores(ctx, hop, bool(ctx.settings.get("upstream", False)))[f"{score}_by_role"]
    chosen = part_mask(ctx.lm, part)
    layers = np.array([c.layer for c in score_components(ctx.lm)])[chosen]
    n_layers = layout(ctx.lm).n_layers
    mass = np.bincount(layers, weights=np.clip(by_role[chosen, ROLES.index(role)], 0, None), minlength=n_layers)
    role_mass = np.clip(by_role[chosen], 0, None).sum(0)
    split = paper_split(n_layers)
    ours = {"hop": hop, "score": score, "role": role, "part": part, "positive_mass_by_block": [round(float(v), 4) for v in mass],
            "share_in_early_middle_blocks": round(float(mass[:split].sum() / mass.sum()), 3) if mass.sum() > 0 else None,
            "early_middle_blocks": f"0-{split - 1} of {n_layers}",
            "share_by_role": {r: round(float(role_mass[i] / role_mass.sum()), 3) if role_mass.sum() > 0 else None for i, r in enumerate(ROLES)}}
    test = depth_test(mass, toward, f"positive {score} mass of the {part} at the {role} tokens")
    top = ", ".join(str(b) for b in np.argsort(-mass)[:3])
    text = (f"{hop} hop, {score} ({part}, {role} tokens): mean depth {test.statistic:.2f}, {ours['share_in_early_middle_blocks']} of the "
            f"mass in blocks {ours['early_middle_blocks']}, top blocks {top}; share at the {role} tokens {ours['share_by_role'][role]}")
    return Measured(ours, text, test)


def implication_test(hop: str, harmful: str, harmless: str, implications: dict) -> Test:
    """`harmful` (the blocks that hold this hop's facts made original) worsens the implications more than `harmless` (paired Wilcoxon)."""
    return paired_greater(implications[harmful], implications[harmless], f"{hop}-hop implication rank, {harmful} vs {harmless}")


def frozen_ranks(ctx: Context, hop: str, split: int, pre: bool) -> dict[str, dict[str, np.ndarray]]:
    """Item ranks per setting of Table 2 at `split`: early/late blocks reset after training (post) and, with `pre`, frozen during it."""
    hop_model, n_layers = tuned_hop(ctx, hop), layout(ctx.lm).n_layers
    blocks = {"early": range(0, split), "late": range(split, n_layers)}
    out = {f"{part}_post": item_ranks(reset_blocks(hop_model.tuned, ctx.lm, blocks[part]), hop_model.data) for part in blocks}
    if pre:
        # Frozen before training: only the other blocks train.
        trained = {"early": (split, n_layers), "late": (0, split)}
        for part, layers in trained.items():
            model, _ = train_model(ctx.lm, hop_model.data.facts.facts(), dataclasses.replace(hop_model.config.train, layers=layers),
                                   name=f"{ctx.lm.name}+{hop}-hop facts, {part} frozen")
            out[f"{part}_pre"] = item_ranks(model, hop_model.data)
    return out


def freeze_tests(ctx: Context, split: int, pre: bool) -> tuple[dict, Test]:
    """Table 2 at `split`: mean ranks per hop and setting, and the combined test that each hop's own blocks matter to it."""
    rows, tests = {}, []
    for hop, harmful, harmless in (("first", "early", "late"), ("second", "late", "early")):
        settings = frozen_ranks(ctx, hop, split, pre)
        rows[hop] = {s: [round(float(r["facts"].mean()), 2), round(float(r["implications"].mean()), 2)] for s, r in settings.items()}
        implications = {s: r["implications"] for s, r in settings.items()}
        tests += [implication_test(hop, f"{harmful}_{when}", f"{harmless}_{when}", implications) for when in ("post", "pre") if pre or when == "post"]
    test = combined(tests, "paired tests")
    # A numpy bool would stop the variant's summary from being stored as JSON.
    return rows, dataclasses.replace(test, direction_holds=bool(test.direction_holds))


def freeze(ctx: Context) -> Measured:
    """Table 2: resetting (and freezing) the early-middle blocks harms first-hop implications, the late ones second-hop (paper's split)."""
    n_layers, pre = layout(ctx.lm).n_layers, bool(ctx.settings.get("pre", False))
    split = paper_split(n_layers)
    rows, test = freeze_tests(ctx, split, pre)
    by_layer = {hop: np.bincount([c.layer for c in score_components(ctx.lm)], weights=hop_scores(ctx, hop)["informative"], minlength=n_layers)
                for hop in ("first", "second")}
    score_split = choose_split(by_layer["first"], by_layer["second"])
    variant = freeze_tests(ctx, score_split, False) if score_split is not None else None
    for hop in ("first", "second"):
        hop_ranks = tuned_hop(ctx, hop).ranks
        rows[hop] |= {"none": [round(float(hop_ranks[k]["after"].mean()), 2) for k in ("facts", "implications")],
                      "all": [round(float(hop_ranks[k]["before"].mean()), 2) for k in ("facts", "implications")]}
    ours = {"split": split, "n_layers": n_layers, "score_split": score_split, "rows": rows, "score_split_rows": variant[0] if variant else None}
    text = (f"split at block {split} of {n_layers} (scores choose {score_split}); [fact, implication] mean ranks: "
            + "; ".join(f"{hop}: " + ", ".join(f"{s} {v[0]:.2f}/{v[1]:.2f}" for s, v in by_setting.items()) for hop, by_setting in rows.items()))
    return Measured(ours, text, test, variant[1] if variant else None,
                    "" if variant else "the informative scores choose no split (an update has no positive mass), so no variant")


STEPS = {"feng_ocr": ocr, "feng_localisation": localisation, "feng_freeze": freeze, **feng_origins.STEPS}
