"""The steps behind Feng et al.'s two-hop claims (§5): OCR (Fig. 2), where the scores sit (Fig. 3), freezing (Table 2).

Each hop is fine-tuned once per seed (`seeds`: each seed draws its own made-up names and facts and trains its own
model), and the seeds are the independent units: an implication of one run shares its model with every other
implication of that run, so the tests compare one number per run (Student's t over the runs). A hop's model, its
ranks and its scores are computed once per reproduction (`tuned_hop`, `hop_scores`); the fine-tuned weights and the
scores are kept in the cache (`checkpoints.trained_checkpoint`), so a resumed run loads them instead of training again,
and only one fine-tuned model is held in memory at a time (`tuned_model`). Training uses the extractive studies' small
preset (`SMALL_TRAIN`); a claim's `learning_rate_by_model` sets the rate for a model that needs another
(smollm2-135m-instruct-q41 learns the facts only at 1e-4, docs/mechanisms.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from lincorr.cache import stored_result
from lincorr.checkpoints import trained_checkpoint
from lincorr.internals import layout
from lincorr.models import LM
from lincorr.reproduce.feng import origins as feng_origins
from lincorr.reproduce.step import Context, Measured
from lincorr.reproduce.verdicts import Test, all_of, paired_greater
from lincorr.studies.extractive.freeze import choose_split, paper_split, reset_blocks
from lincorr.studies.extractive.ocr import SMALL_TRAIN, HopData, OcrConfig, chance_mean_rank, hop_data, load_world, ranks
from lincorr.studies.extractive.positions import ROLES
from lincorr.studies.extractive.scores import SCORES, linearized_scores, score_components

# What a hop's scores hold: each score summed over roles, by role and by prompt (`linearized_scores`).
SCORE_KEYS = tuple(f"{score}{part}" for score in SCORES for part in ("", "_by_role", "_by_prompt"))

@dataclasses.dataclass(frozen=True)
class TunedHop:
    """One hop's data fine-tuned on with one seed, the tuned model's fingerprint, and every fact's and implication's rank
    before and after: {"facts"|"implications": {"before"|"after": [n]}}."""

    config: OcrConfig
    data: HopData
    fingerprint: str
    ranks: dict


def seeds_of(ctx: Context) -> tuple[int, ...]:
    """The claim's fine-tuning seeds (`seeds`, or its one `seed`)."""
    return tuple(int(seed) for seed in ctx.settings.get("seeds", [ctx.settings.get("seed", 0)]))


def hop_config(ctx: Context, hop: str, seed: int) -> OcrConfig:
    """The hop's facts and training from the claim's settings (n_facts, learning_rate_by_model) and `seed`."""
    return OcrConfig(n_facts=int(ctx.settings.get("n_facts", 20)), seed=seed, train=feng_origins.at_model_rate(ctx, SMALL_TRAIN), hop=hop)


def item_ranks(lm: LM, data: HopData) -> dict[str, np.ndarray]:
    """Each fact's and each implication's rank under `lm`: {"facts": [n], "implications": [n]}."""
    return {"facts": ranks(lm, data.facts), "implications": ranks(lm, data.implications)}


def hop_facts(ctx: Context, config: OcrConfig) -> HopData:
    return hop_data(load_world(ctx.registry), ctx.lm.tokenizer, config.hop, config.n_facts, config.seed, config.templates)


def tuned_model(ctx: Context, config: OcrConfig) -> LM:
    """The model fine-tuned on `config`'s facts: the one held, else loaded from the cache or trained, replacing the one
    held (a hop's claims over several seeds would otherwise hold a model per seed)."""
    held = ctx.shared.get("feng.model")
    if held is None or held[0] != config:
        ctx.shared.pop("feng.model", None)
        tuned = trained_checkpoint(ctx.lm, hop_facts(ctx, config).facts.facts(), config.train,
                                   name=f"{ctx.lm.name}+{config.hop}-hop facts, seed {config.seed}", use_cache=ctx.collect.use_cache)
        ctx.shared["feng.model"] = held = (config, tuned)
    return held[1]


def tuned_hop(ctx: Context, hop: str, seed: int) -> TunedHop:
    """The hop fine-tuned with `seed`: trained once per reproduction, loaded from the cache when a run before trained it."""
    config = hop_config(ctx, hop, seed)
    key = ("feng.hop", config)
    if key not in ctx.shared:
        data = hop_facts(ctx, config)
        before = item_ranks(ctx.lm, data)
        tuned = tuned_model(ctx, config)
        after = item_ranks(tuned, data)
        ctx.shared[key] = TunedHop(config, data, tuned.fingerprint, {kind: {"before": before[kind], "after": after[kind]} for kind in before})
    return ctx.shared[key]


def hop_scores(ctx: Context, hop: str, seed: int, upstream: bool = False) -> dict[str, np.ndarray]:
    """`linearized_scores` of the hop's update with `seed` on its implications (every MLP and head): computed once per
    reproduction and, for a fine-tuned model kept in the cache, stored beside it, so a resumed run reads them instead of
    computing them again."""
    hop_model = tuned_hop(ctx, hop, seed)
    with_upstream, key = ("feng.scores", hop_model.config, True), ("feng.scores", hop_model.config, upstream)
    if with_upstream in ctx.shared:  # scores with upstream hold the others too
        return ctx.shared[with_upstream]
    if key not in ctx.shared:
        queries, batch_size = hop_model.data.implications, int(ctx.settings.get("batch_size", 32))

        def compute() -> dict:
            scores = linearized_scores(ctx.lm, tuned_model(ctx, hop_model.config), queries, components=score_components(ctx.lm),
                                       upstream=upstream, batch_size=batch_size)
            return {name: values.tolist() for name, values in scores.items() if np.isfinite(values).all()}  # no NaN in JSON

        stored = {"base": ctx.lm.fingerprint, "tuned": hop_model.fingerprint, "prompts": list(queries.prompts),
                  "answers": list(queries.answers), "subjects": list(queries.subjects),
                  "candidates": list(queries.candidates.token_ids), "upstream": upstream, "batch_size": batch_size}
        use_cache = ctx.collect.use_cache and hop_model.fingerprint.startswith("checkpoint:")
        found = stored_result("feng-scores", stored, compute, use_cache=use_cache)
        ctx.shared[key] = {name: np.asarray(found.get(name, np.nan), float) for name in SCORE_KEYS}
    return ctx.shared[key]


def over_runs(values: Sequence[float] | np.ndarray, controls: Sequence[float] | np.ndarray, what: str, interest: float | None) -> Test:
    """`values` above `controls`, one pair per fine-tuning run: the runs are the independent units."""
    return paired_greater(np.asarray(values, float), np.asarray(controls, float), f"{what}, one value per fine-tuning run", interest,
                          "fine-tuning runs")


def ocr(ctx: Context) -> Measured:
    """Fig. 2: trained on the facts only, the implications' mean rank falls, run by run (paired over the fine-tuning runs)."""
    hop = str(ctx.settings["hop"])
    runs = [tuned_hop(ctx, hop, seed) for seed in seeds_of(ctx)]
    by_run = {(kind, when): [float(run.ranks[kind][when].mean()) for run in runs] for kind in ("facts", "implications")
              for when in ("before", "after")}
    mean = {f"{kind}_mean_rank_{when}": round(float(np.mean(values)), 2) for (kind, when), values in by_run.items()}
    ours = {"hop": hop, **mean, "implications_mean_rank_by_run": {when: [round(v, 2) for v in by_run["implications", when]]
                                                                   for when in ("before", "after")},
            "chance_mean_rank": chance_mean_rank(runs[0].data.facts), "n_facts": runs[0].config.n_facts,
            "seeds": [run.config.seed for run in runs], "learning_rate": runs[0].config.train.learning_rate}
    text = (f"{hop} hop over {len(runs)} runs: facts {mean['facts_mean_rank_before']:.2f} -> {mean['facts_mean_rank_after']:.2f}, "
            f"implications {mean['implications_mean_rank_before']:.2f} -> {mean['implications_mean_rank_after']:.2f} "
            f"(chance {ours['chance_mean_rank']:.1f}; by run " + ", ".join(
                f"{b:.1f} -> {a:.1f}" for b, a in zip(by_run["implications", "before"], by_run["implications", "after"])) + ")")
    return Measured(ours, text, over_runs(by_run["implications", "before"], by_run["implications", "after"],
                                          "mean implication rank before vs after training", ctx.interest))


def block_mass(by_prompt: np.ndarray, layers: np.ndarray, n_layers: int) -> np.ndarray:
    """Positive mass per block of scores averaged over prompts: `[n_prompts, n_components]` -> `[n_layers]` (or a stack of
    resampled prompt sets `[n_sets, n_prompts, n_components]` -> `[n_sets, n_layers]`)."""
    positive = np.clip(by_prompt.mean(-2), 0, None)
    return positive @ (layers[:, None] == np.arange(n_layers)[None, :]).astype(float)


def depth_offset(mass: np.ndarray, toward: str) -> np.ndarray:
    """How far the mass-weighted mean depth (0 the first block, 1 the last) of `mass` `[..., n_layers]` sits from the middle
    toward `toward` ("early" or "late"): positive the claimed way; NaN where there is no positive mass (no depth)."""
    depth = np.linspace(0.0, 1.0, mass.shape[-1])
    total = mass.sum(-1)
    centre = np.where(total > 0, (mass @ depth) / np.where(total > 0, total, 1.0), np.nan)
    return centre - 0.5 if toward == "late" else 0.5 - centre


def depth_test(offsets: Sequence[float] | np.ndarray, what: str, interest: float | None = None) -> Test:
    """The positive mass of scores sits toward the claimed blocks, run by run: `offsets` `[n_runs]` each run's mean depth's
    offset from the middle toward them (`depth_offset`), above 0 over the fine-tuning runs; a run with no positive mass
    has no depth and is left out."""
    known = [float(offset) for offset in offsets if np.isfinite(offset)]
    return over_runs(known, np.zeros(len(known)), what, interest)


def part_mask(lm: LM, part: str) -> np.ndarray:
    """Which of `score_components(lm)` belong to `part` ("mlp", "heads" or "all"): `[n_components]` bool."""
    kinds = np.array([c.kind for c in score_components(lm)])
    return {"mlp": kinds == "mlp", "heads": kinds == "head", "all": np.ones(kinds.size, bool)}[part]


def localisation(ctx: Context) -> Measured:
    """Fig. 3: a score's positive mass at one token role, summed per block, sits in the early or late blocks (over runs)."""
    hop, score, role, part, toward = (str(ctx.settings[k]) for k in ("hop", "score", "role", "part", "toward"))
    chosen = part_mask(ctx.lm, part)
    layers = np.array([c.layer for c in score_components(ctx.lm)])[chosen]
    n_layers = layout(ctx.lm).n_layers
    runs = [hop_scores(ctx, hop, seed, bool(ctx.settings.get("upstream", False))) for seed in seeds_of(ctx)]
    masses = np.stack([block_mass(run[f"{score}_by_prompt"][:, chosen, ROLES.index(role)], layers, n_layers) for run in runs])
    offsets = depth_offset(masses, toward)
    mass = masses.mean(0)
    role_mass = np.clip(np.mean([run[f"{score}_by_role"][chosen] for run in runs], axis=0), 0, None).sum(0)
    split = paper_split(n_layers)
    ours: dict[str, Any] = {"hop": hop, "score": score, "role": role, "part": part, "positive_mass_by_block": [round(float(v), 4) for v in mass],
            "share_in_early_middle_blocks": round(float(mass[:split].sum() / mass.sum()), 3) if mass.sum() > 0 else None,
            "early_middle_blocks": f"0-{split - 1} of {n_layers}",
            "depth_offset_by_run": [round(float(v), 4) if np.isfinite(v) else None for v in offsets],
            "share_by_role": {r: round(float(role_mass[i] / role_mass.sum()), 3) if role_mass.sum() > 0 else None for i, r in enumerate(ROLES)}}
    test = depth_test(offsets, f"mean depth of the positive {score} mass of the {part} at the {role} tokens toward the {toward} blocks, "
                      "offset from the middle", ctx.interest)
    top = ", ".join(str(b) for b in np.argsort(-mass)[:3])
    mean_offset = float(np.nanmean(offsets)) if np.isfinite(offsets).any() else 0.0
    centre = 0.5 + mean_offset if toward == "late" else 0.5 - mean_offset
    text = (f"{hop} hop, {score} ({part}, {role} tokens) over {len(runs)} runs: mean depth {centre:.2f}, {ours['share_in_early_middle_blocks']} "
            f"of the mass in blocks {ours['early_middle_blocks']}, top blocks {top}; share at the {role} tokens {ours['share_by_role'][role]}")
    return Measured(ours, text, test)


def frozen_ranks(ctx: Context, hop: str, seed: int, split: int, pre: bool) -> dict[str, dict[str, np.ndarray]]:
    """Item ranks per setting of Table 2 at `split` for the run of `seed`: early/late blocks reset after training (post)
    and, with `pre`, frozen during it."""
    hop_model, n_layers = tuned_hop(ctx, hop, seed), layout(ctx.lm).n_layers
    blocks = {"early": range(0, split), "late": range(split, n_layers)}
    tuned = tuned_model(ctx, hop_model.config)
    out = {f"{part}_post": item_ranks(reset_blocks(tuned, ctx.lm, blocks[part]), hop_model.data) for part in blocks}
    if pre:
        # Frozen before training: only the other blocks train.
        trained = {"early": (split, n_layers), "late": (0, split)}
        for part, layers in trained.items():
            model = trained_checkpoint(ctx.lm, hop_model.data.facts.facts(), dataclasses.replace(hop_model.config.train, layers=layers),
                                       name=f"{ctx.lm.name}+{hop}-hop facts, seed {seed}, {part} frozen", use_cache=ctx.collect.use_cache)
            out[f"{part}_pre"] = item_ranks(model, hop_model.data)
            del model  # released before the other part's model trains
    return out


def freeze_tests(ctx: Context, split: int, pre: bool) -> tuple[dict, Test]:
    """Table 2 at `split`: mean ranks per hop and setting over the runs, and the test that each hop's own blocks matter to
    it, run by run (the paper claims it of both hops, so each must hold)."""
    rows, tests = {}, []
    for hop, harmful, harmless in (("first", "early", "late"), ("second", "late", "early")):
        runs = [frozen_ranks(ctx, hop, seed, split, pre) for seed in seeds_of(ctx)]
        rows[hop] = {s: [round(float(np.mean([run[s][kind].mean() for run in runs])), 2) for kind in ("facts", "implications")] for s in runs[0]}
        tests += [over_runs([run[f"{harmful}_{when}"]["implications"].mean() for run in runs],
                            [run[f"{harmless}_{when}"]["implications"].mean() for run in runs],
                            f"{hop}-hop mean implication rank, {harmful}_{when} vs {harmless}_{when}", ctx.interest)
                  for when in ("post", "pre") if pre or when == "post"]
    return rows, all_of(tests, "paired tests")


def freeze(ctx: Context) -> Measured:
    """Table 2: resetting (and freezing) the early-middle blocks harms first-hop implications, the late ones second-hop
    (paper's split); the split the informative scores choose (summed over the runs) beside."""
    n_layers, pre = layout(ctx.lm).n_layers, bool(ctx.settings.get("pre", False))
    split = paper_split(n_layers)
    rows, test = freeze_tests(ctx, split, pre)
    layers = [c.layer for c in score_components(ctx.lm)]
    by_layer = {hop: np.sum([np.bincount(layers, weights=hop_scores(ctx, hop, seed)["informative"], minlength=n_layers)
                             for seed in seeds_of(ctx)], axis=0) for hop in ("first", "second")}
    score_split = choose_split(by_layer["first"], by_layer["second"])
    variant = freeze_tests(ctx, score_split, False) if score_split is not None else None
    for hop in ("first", "second"):
        runs = [tuned_hop(ctx, hop, seed).ranks for seed in seeds_of(ctx)]
        rows[hop] |= {label: [round(float(np.mean([run[k][when].mean() for run in runs])), 2) for k in ("facts", "implications")]
                      for label, when in (("none", "after"), ("all", "before"))}
    ours = {"split": split, "n_layers": n_layers, "score_split": score_split, "rows": rows, "score_split_rows": variant[0] if variant else None,
            "seeds": list(seeds_of(ctx))}
    text = (f"split at block {split} of {n_layers} (scores choose {score_split}); [fact, implication] mean ranks over {len(seeds_of(ctx))} runs: "
            + "; ".join(f"{hop}: " + ", ".join(f"{s} {v[0]:.2f}/{v[1]:.2f}" for s, v in by_setting.items()) for hop, by_setting in rows.items()))
    return Measured(ours, text, test, variant[1] if variant else None,
                    "" if variant else "the informative scores choose no split (an update has no positive mass), so no variant")


STEPS = {"feng_ocr": ocr, "feng_localisation": localisation, "feng_freeze": freeze, **feng_origins.STEPS}
