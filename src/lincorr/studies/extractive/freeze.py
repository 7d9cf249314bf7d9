"""Where facts are stored (Feng et al. §5.3, Table 2): reset or freeze early-middle or late blocks.

For each hop the model is fine-tuned on the facts ("none": all blocks train), and then

- `early_post` / `late_post`: the early-middle (blocks < split) or late (blocks >= split) blocks
  of the fine-tuned model are reset to their original weights;
- `early_pre` / `late_pre`: the model is fine-tuned again with those blocks frozen;
- `all`: the original model (every block reset), the other baseline.

Mean ranks of facts and implications are measured for every setting. The split is the paper's by
default: early-middle = the first three quarters of the blocks (OLMo-7B's 0-23 of 32), so that
it is fixed before any score is seen. lincorr's variant (`split="scores"`) chooses it from the
informative scores of the "none" models (`extractive.scores`): the block that best separates
where the first-hop update is informative (before it) from where the second-hop update is (from
it on), i.e. the s maximising share_first(blocks < s) + share_second(blocks >= s) of the
positive informative mass per block; the block it would choose is reported beside the paper's
split either way. `FreezeConfig.split_layer` fixes the block by hand.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import ClassVar
import time

import numpy as np
import torch

from lincorr.errors import LincorrError
from lincorr.paper import published_values
from lincorr.studies.extractive.ocr import (
    HOPS, FactsConfig, chance_mean_rank, hop_data, load_world, mean_rank, saved_figure, snapshot, train_model,
    training_settings,
)
from lincorr.studies.extractive.scores import linearized_scores, score_components
from lincorr.finetune import layer_index
from lincorr.internals import layout
from lincorr.models import LM
from lincorr.outputs import settings_key, staged_directory, write_csv, write_json
from lincorr.results import Stored, record

__all__ = ["SETTINGS", "SPLITS", "FreezeConfig", "FreezeResult", "reset_blocks", "paper_split", "choose_split", "measure_freeze"]

SETTINGS = ("none", "all", "early_post", "late_post", "early_pre", "late_pre")
SPLITS = ("paper", "scores")
PAPER = published_values("feng_table2")
@dataclasses.dataclass(frozen=True)
class FreezeConfig(FactsConfig):
    """The facts and their training (`FactsConfig`), and the split: the paper's rule, the scores', or a block."""

    split: str = "paper"  # "paper": the first 3/4 of the blocks are early-middle; "scores": chosen from informative scores
    split_layer: int | None = None  # a block given by hand, overriding `split`
    batch_size: int = 32


def reset_blocks(tuned: LM, original: LM, blocks: range) -> LM:
    """A copy of `tuned` whose parameters in `blocks` hold `original`'s values again (everything else stays tuned)."""
    model = copy.deepcopy(tuned.model)
    source = dict(original.model.named_parameters())
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if layer_index(name) in blocks:
                parameter.copy_(source[name])
    return snapshot(model, tuned.tokenizer, f"{tuned.name} (blocks {blocks.start}-{blocks.stop - 1} reset)")


def paper_split(n_layers: int) -> int:
    """The first late block under the paper's split: early-middle is the first three quarters (OLMo-7B: blocks 0-23 of 32)."""
    return min(max(1, (3 * n_layers) // 4), n_layers - 1)


def choose_split(first: np.ndarray, second: np.ndarray) -> int | None:
    """The block s in 1..L-1 maximising first-hop mass before s plus second-hop mass from s on (shares of each hop's positive total).

    None when an update has no positive informative score anywhere: there is nothing to separate.
    """
    first, second = np.clip(first, 0, None), np.clip(second, 0, None)
    if first.sum() == 0 or second.sum() == 0:
        return None
    before = np.cumsum(first)[:-1] / first.sum()  # before[s - 1]: share of the first hop in blocks < s
    after = 1 - np.cumsum(second)[:-1] / second.sum()
    return int(np.argmax(before + after)) + 1


@dataclasses.dataclass(frozen=True)
class FreezeResult(Stored):
    """Table 2: mean ranks per setting and hop, the split, and the per-block informative mass it was chosen from."""

    study: ClassVar[str] = "extractive-freeze"

    model_name: str
    config: FreezeConfig
    n_layers: int
    split_layer: int
    split_rule: str  # "paper", "scores" or "given"
    score_split: int | None  # the block the informative scores would choose, beside the one used (None: they choose none)
    informative_by_layer: dict  # hop -> [n_layers], summed over each block's MLP and heads
    rows: tuple[dict, ...]  # {setting, hop, fact_mean_rank, implication_mean_rank}
    chance: float
    seconds: float

    def row(self, setting: str, hop: str) -> dict:
        return next(r for r in self.rows if r["setting"] == setting and r["hop"] == hop)

    def summary(self) -> dict:
        """The JSON contract of `lincorr extractive freeze --json`."""
        return {
            "model": self.model_name, "n_layers": self.n_layers, "split_layer": self.split_layer,
            "split": f"early-middle = blocks 0-{self.split_layer - 1}, late = blocks {self.split_layer}-{self.n_layers - 1}",
            "split_rule": self.split_rule, "score_split": self.score_split,
            "informative_by_layer": {hop: [float(v) for v in values] for hop, values in self.informative_by_layer.items()},
            "rows": [dict(r) for r in self.rows], "chance_mean_rank": self.chance, "n_facts": self.config.n_facts,
            "seed": self.config.seed, "training": training_settings(self.config.train),
            "paper": {"model": PAPER.model, "rows": [{"setting": s, "hop": h, "fact_mean_rank": v[0], "implication_mean_rank": v[1]}
                                                     for s, hops in PAPER.values.items() for h, v in hops.items()]},
            "seconds": self.seconds,
        }

    def text(self) -> str:
        """Table 2 with the paper's OLMo-7B numbers in brackets."""
        lines = [f"Table 2 on {self.model_name}: split at block {self.split_layer} of {self.n_layers} (chance {self.chance:.2f}); "
                 f"paper ({PAPER.model}) in brackets",
                 f"{'setting':<11} {'1st fact':>14} {'1st impl':>14} {'2nd fact':>14} {'2nd impl':>14}"]
        for setting in SETTINGS:
            cells = []
            for hop in HOPS:
                row, paper = self.row(setting, hop), PAPER.values[setting][hop]
                cells += [f"{row['fact_mean_rank']:5.2f} ({paper[0]:4.2f})", f"{row['implication_mean_rank']:5.2f} ({paper[1]:4.2f})"]
            lines.append(f"{setting:<11} " + " ".join(f"{c:>14}" for c in cells))
        return "\n".join(lines)

    def plot(self, path) -> None:
        """Implication mean rank per setting, both hops side by side (facts as hollow markers), with chance."""
        with saved_figure(path, 1, 2, figsize=(8, 3.2), sharey=True) as (figure, axes):
            x = np.arange(len(SETTINGS))
            for axis, hop in zip(axes, HOPS):
                axis.bar(x, [self.row(s, hop)["implication_mean_rank"] for s in SETTINGS], color="C0", label="implications")
                axis.plot(x, [self.row(s, hop)["fact_mean_rank"] for s in SETTINGS], "o", mfc="none", color="C3", label="facts")
                axis.axhline(self.chance, color="grey", lw=0.8, ls="--", label="chance")
                axis.set_xticks(x, SETTINGS, rotation=30, fontsize=7)
                axis.set_title(f"{hop}-hop update", fontsize=9)
            axes[0].set_ylabel("mean rank")
            axes[0].legend(fontsize=7)
            figure.suptitle(f"{self.model_name}: split at block {self.split_layer}", fontsize=9)

    def save(self, directory) -> None:
        """freeze.json (summary), freeze.csv (the rows), freeze.png."""
        with staged_directory(directory) as out:
            record(out, self, settings=settings_key(self.config))
            write_json(out / "freeze.json", self.summary())
            write_csv(out / "freeze.csv", ["setting", "hop", "fact_mean_rank", "implication_mean_rank"],
                      [[r["setting"], r["hop"], r["fact_mean_rank"], r["implication_mean_rank"]] for r in self.rows])
            self.plot(out / "freeze.png")


def measure_freeze(lm: LM, registry, config: FreezeConfig = FreezeConfig()) -> FreezeResult:
    """Table 2 for both hops: train, split the blocks (the paper's rule by default), reset (post) and freeze (pre)."""
    started = time.perf_counter()
    n_layers = layout(lm).n_layers
    if config.split not in SPLITS:
        raise LincorrError(f"split must be one of {', '.join(SPLITS)}, got '{config.split}'")
    if config.split_layer is not None and not 0 < config.split_layer < n_layers:
        raise LincorrError(f"split_layer must be in 1..{n_layers - 1} for this {n_layers}-block model")
    world = load_world(registry)
    data, tuned, informative = {}, {}, {}
    components = score_components(lm)
    for hop in HOPS:
        data[hop] = hop_data(world, lm.tokenizer, hop, config.n_facts, config.seed, config.templates)
        tuned[hop], _ = train_model(lm, data[hop].facts.facts(), config.train, name=f"{lm.name}+{hop}-hop facts")
        scores = linearized_scores(lm, tuned[hop], data[hop].implications, components=components, upstream=False,
                                   batch_size=config.batch_size)["informative"]
        informative[hop] = np.bincount([c.layer for c in components], weights=scores, minlength=n_layers)
    score_split = choose_split(informative["first"], informative["second"])
    rule = "given" if config.split_layer is not None else config.split
    split = {"given": config.split_layer, "paper": paper_split(n_layers), "scores": score_split}[rule]
    if split is None:
        raise LincorrError("an update has no positive informative score anywhere, so the scores choose no split; use the paper's")
    early, late = range(0, split), range(split, n_layers)
    rows = []
    for hop in HOPS:
        facts = data[hop].facts.facts()
        # Built one at a time: each is a full copy of the model.
        makers = {
            "none": lambda: tuned[hop], "all": lambda: lm,
            "early_post": lambda: reset_blocks(tuned[hop], lm, early), "late_post": lambda: reset_blocks(tuned[hop], lm, late),
            # Pre: only the other blocks train (the layer range is intersected with the training's own filters).
            "early_pre": lambda: train_model(lm, facts, dataclasses.replace(config.train, layers=(split, n_layers)),
                                             name=f"{lm.name}+{hop}-hop facts, early frozen")[0],
            "late_pre": lambda: train_model(lm, facts, dataclasses.replace(config.train, layers=(0, split)),
                                            name=f"{lm.name}+{hop}-hop facts, late frozen")[0],
        }
        for setting in SETTINGS:
            model = makers[setting]()
            rows.append({"setting": setting, "hop": hop, "fact_mean_rank": mean_rank(model, data[hop].facts),
                         "implication_mean_rank": mean_rank(model, data[hop].implications)})
            del model
        del tuned[hop]
    return FreezeResult(lm.name, config, n_layers, split, rule, score_split, informative, tuple(rows), chance_mean_rank(data["first"].facts),
                        time.perf_counter() - started)
