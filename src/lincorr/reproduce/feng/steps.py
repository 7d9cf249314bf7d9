"""The steps behind Feng et al.'s two-hop claims (§5): OCR (Fig. 2), where the scores sit (Fig. 3), freezing (Table 2).

Each hop's model is fine-tuned once per reproduction (`tuned_hop`) and scored once (`hop_scores`),
both kept in `ctx.shared`, so every claim on a hop reads the same model; the fine-tuned weights
are also kept in the cache (`checkpoints.trained_checkpoint`), so a resumed run loads them
instead of training again. Training is seeded and uses the extractive studies' small preset
(`SMALL_TRAIN`); a claim's `learning_rate_by_model` sets the rate for a model that needs another
(smollm2-135m-instruct-q41 learns the facts only at 1e-4, docs/mechanisms.md). The independent units
are the implications, one per made-up name: the tests compare ranks implication by implication
(the paper's mean rank is their mean), and where the scores sit is judged by resampling the
implications the scores are averaged over.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from lincorr.cache import stored_result
from lincorr.checkpoints import trained_checkpoint
from lincorr.internals import layout
from lincorr.models import LM
from lincorr.reproduce.feng import origins as feng_origins
from lincorr.reproduce.step import Context, Measured
from lincorr.reproduce.verdicts import Test, all_of, bootstrap_greater, paired_greater
from lincorr.studies.extractive.freeze import choose_split, paper_split, reset_blocks
from lincorr.studies.extractive.ocr import SMALL_TRAIN, HopData, OcrConfig, chance_mean_rank, hop_data, load_world, ranks
from lincorr.studies.extractive.positions import ROLES
from lincorr.studies.extractive.scores import SCORES, linearized_scores, score_components

# What a hop's scores hold: each score summed over roles, by role and by prompt (`linearized_scores`).
SCORE_KEYS = tuple(f"{score}{part}" for score in SCORES for part in ("", "_by_role", "_by_prompt"))

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
    """The hop's model fine-tuned on its facts: trained once per reproduction, loaded from the cache when a run before trained it."""
    config = hop_config(ctx, hop)
    key = ("feng.hop", config)
    if key not in ctx.shared:
        data = hop_data(load_world(ctx.registry), ctx.lm.tokenizer, hop, config.n_facts, config.seed, config.templates)
        before = item_ranks(ctx.lm, data)
        tuned = trained_checkpoint(ctx.lm, data.facts.facts(), config.train, name=f"{ctx.lm.name}+{hop}-hop facts",
                                   use_cache=ctx.collect.use_cache)
        after = item_ranks(tuned, data)
        ctx.shared[key] = TunedHop(config, data, tuned, {kind: {"before": before[kind], "after": after[kind]} for kind in before})
    return ctx.shared[key]


def hop_scores(ctx: Context, hop: str, upstream: bool = False) -> dict[str, np.ndarray]:
    """`linearized_scores` of the hop's update on its implications (every MLP and head): computed once per reproduction and,
    for a fine-tuned model kept in the cache, stored beside it, so a resumed run reads them instead of computing them again."""
    hop_model = tuned_hop(ctx, hop)
    with_upstream, key = ("feng.scores", hop_model.config, True), ("feng.scores", hop_model.config, upstream)
    if with_upstream in ctx.shared:  # scores with upstream hold the others too
        return ctx.shared[with_upstream]
    if key not in ctx.shared:
        queries, batch_size = hop_model.data.implications, int(ctx.settings.get("batch_size", 32))

        def compute() -> dict:
            scores = linearized_scores(ctx.lm, hop_model.tuned, queries, components=score_components(ctx.lm), upstream=upstream,
                                       batch_size=batch_size)
            return {name: values.tolist() for name, values in scores.items() if np.isfinite(values).all()}  # no NaN in JSON

        stored = {"base": ctx.lm.fingerprint, "tuned": hop_model.tuned.fingerprint, "prompts": list(queries.prompts),
                  "answers": list(queries.answers), "subjects": list(queries.subjects),
                  "candidates": list(queries.candidates.token_ids), "upstream": upstream, "batch_size": batch_size}
        use_cache = ctx.collect.use_cache and hop_model.tuned.fingerprint.startswith("checkpoint:")
        found = stored_result("feng-scores", stored, compute, use_cache=use_cache)
        ctx.shared[key] = {name: np.asarray(found.get(name, np.nan), float) for name in SCORE_KEYS}
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
    return Measured(ours, text, paired_greater(implications["before"], implications["after"], "implication rank before vs after training",
                                               ctx.interest, "implications"))


def block_mass(by_prompt: np.ndarray, layers: np.ndarray, n_layers: int) -> np.ndarray:
    """Positive mass per block of scores averaged over prompts: `[n_prompts, n_components]` -> `[n_layers]` (or a stack of
    resampled prompt sets `[n_sets, n_prompts, n_components]` -> `[n_sets, n_layers]`)."""
    positive = np.clip(by_prompt.mean(-2), 0, None)
    return positive @ (layers[:, None] == np.arange(n_layers)[None, :]).astype(float)


def depth_offset(mass: np.ndarray, toward: str) -> np.ndarray:
    """How far the mass-weighted mean depth (0 the first block, 1 the last) of `mass` `[..., n_layers]` sits from the middle
    toward `toward` ("early" or "late"): positive the claimed way; 0 where there is no positive mass."""
    depth = np.linspace(0.0, 1.0, mass.shape[-1])
    total = mass.sum(-1)
    centre = np.where(total > 0, (mass @ depth) / np.where(total > 0, total, 1.0), 0.5)
    return centre - 0.5 if toward == "late" else 0.5 - centre


def depth_test(by_prompt: np.ndarray, layers: np.ndarray, n_layers: int, toward: str, what: str, interest: float | None = None,
               n_resamples: int = 2000, seed: int = 0) -> Test:
    """The positive mass of scores `[n_prompts, n_components]` (components in blocks `layers`) sits toward the "early" or "late" blocks.

    The effect is the mean depth's offset from the middle toward `toward` (`depth_offset`); its p-value, interval and
    power come from resampling the prompts, each an implication about one made-up name (`bootstrap_greater`).
    """
    offset = float(depth_offset(block_mass(by_prompt, layers, n_layers), toward))
    picks = np.random.default_rng(seed).integers(len(by_prompt), size=(n_resamples, len(by_prompt)))
    resampled = depth_offset(block_mass(by_prompt[picks], layers, n_layers), toward)
    return bootstrap_greater(offset, resampled, f"mean depth of {what} toward the {toward} blocks, offset from the middle",
                             interest, len(by_prompt), "implications")


def part_mask(lm: LM, part: str) -> np.ndarray:
    """Which of `score_components(lm)` belong to `part` ("mlp", "heads" or "all"): `[n_components]` bool."""
    kinds = np.array([c.kind for c in score_components(lm)])
    return {"mlp": kinds == "mlp", "heads": kinds == "head", "all": np.ones(kinds.size, bool)}[part]


def localisation(ctx: Context) -> Measured:
    """Fig. 3: a score's positive mass at one token role, summed per block, sits in the early or late blocks (bootstrap over implications)."""
    hop, score, role, part, toward = (str(ctx.settings[k]) for k in ("hop", "score", "role", "part", "toward"))
    scores = hop_scores(ctx, hop, bool(ctx.settings.get("upstream", False)))
    by_role, by_prompt = scores[f"{score}_by_role"], scores[f"{score}_by_prompt"]
    chosen = part_mask(ctx.lm, part)
    layers = np.array([c.layer for c in score_components(ctx.lm)])[chosen]
    n_layers = layout(ctx.lm).n_layers
    at_role = by_prompt[:, chosen, ROLES.index(role)]
    mass = block_mass(at_role, layers, n_layers)
    role_mass = np.clip(by_role[chosen], 0, None).sum(0)
    split = paper_split(n_layers)
    ours: dict[str, Any] = {"hop": hop, "score": score, "role": role, "part": part, "positive_mass_by_block": [round(float(v), 4) for v in mass],
            "share_in_early_middle_blocks": round(float(mass[:split].sum() / mass.sum()), 3) if mass.sum() > 0 else None,
            "early_middle_blocks": f"0-{split - 1} of {n_layers}",
            "share_by_role": {r: round(float(role_mass[i] / role_mass.sum()), 3) if role_mass.sum() > 0 else None for i, r in enumerate(ROLES)}}
    test = depth_test(at_role, layers, n_layers, toward, f"positive {score} mass of the {part} at the {role} tokens", ctx.interest)
    top = ", ".join(str(b) for b in np.argsort(-mass)[:3])
    assert test.effect is not None, "depth_test measures an effect"
    centre = 0.5 + test.effect if toward == "late" else 0.5 - test.effect
    text = (f"{hop} hop, {score} ({part}, {role} tokens): mean depth {centre:.2f}, {ours['share_in_early_middle_blocks']} of the "
            f"mass in blocks {ours['early_middle_blocks']}, top blocks {top}; share at the {role} tokens {ours['share_by_role'][role]}")
    return Measured(ours, text, test)


def implication_test(hop: str, harmful: str, harmless: str, implications: dict, interest: float | None = None) -> Test:
    """`harmful` (the blocks that hold this hop's facts made original) worsens the implications more than `harmless` (paired Wilcoxon)."""
    return paired_greater(implications[harmful], implications[harmless], f"{hop}-hop implication rank, {harmful} vs {harmless}",
                          interest, "implications")


def frozen_ranks(ctx: Context, hop: str, split: int, pre: bool) -> dict[str, dict[str, np.ndarray]]:
    """Item ranks per setting of Table 2 at `split`: early/late blocks reset after training (post) and, with `pre`, frozen during it."""
    hop_model, n_layers = tuned_hop(ctx, hop), layout(ctx.lm).n_layers
    blocks = {"early": range(0, split), "late": range(split, n_layers)}
    out = {f"{part}_post": item_ranks(reset_blocks(hop_model.tuned, ctx.lm, blocks[part]), hop_model.data) for part in blocks}
    if pre:
        # Frozen before training: only the other blocks train.
        trained = {"early": (split, n_layers), "late": (0, split)}
        for part, layers in trained.items():
            model = trained_checkpoint(ctx.lm, hop_model.data.facts.facts(), dataclasses.replace(hop_model.config.train, layers=layers),
                                       name=f"{ctx.lm.name}+{hop}-hop facts, {part} frozen", use_cache=ctx.collect.use_cache)
            out[f"{part}_pre"] = item_ranks(model, hop_model.data)
    return out


def freeze_tests(ctx: Context, split: int, pre: bool) -> tuple[dict, Test]:
    """Table 2 at `split`: mean ranks per hop and setting, and the test that each hop's own blocks matter to it (the paper
    claims it of both hops, so each must hold)."""
    rows, tests = {}, []
    for hop, harmful, harmless in (("first", "early", "late"), ("second", "late", "early")):
        settings = frozen_ranks(ctx, hop, split, pre)
        rows[hop] = {s: [round(float(r["facts"].mean()), 2), round(float(r["implications"].mean()), 2)] for s, r in settings.items()}
        implications = {s: r["implications"] for s, r in settings.items()}
        tests += [implication_test(hop, f"{harmful}_{when}", f"{harmless}_{when}", implications, ctx.interest)
                  for when in ("post", "pre") if pre or when == "post"]
    return rows, all_of(tests, "paired tests")


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
