"""Resilience (§4.2, Fig. 8, Appendix G): does W fitted on model A still predict the logits of model B?

B is another checkpoint with the same tokenizer (base -> instruct in the paper), or A after a
short fine-tuning run on a text file (`finetune_on_text`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import numpy as np

from lincorr.errors import LincorrError
from lincorr.reading import read_text
from lincorr.fit import FitConfig
from lincorr.collection import CollectSettings, collect
from lincorr.studies.logits.matrix import Grid, MatrixResult, matrix_from_tables, prepare_grid
from lincorr.finetune import Fact, TrainConfig, train_on_facts
from lincorr.models import LM, wrap_model
from lincorr.outputs import none_if_nan, settings_key, staged_directory, write_csv, write_json
from lincorr.results import Stored, record

__all__ = ["ResilienceResult", "check_same_tokenizer", "measure_resilience", "text_facts", "finetune_on_text"]


MAX_WORDS_PER_EXAMPLE = 48  # long paragraphs are cut into pieces: a 262k-vocabulary model keeps logits for every position


def check_same_tokenizer(a: LM, b: LM) -> None:
    """W maps domain tokens of A to domain tokens of A: it only means something on B if B reads the same tokens."""
    if a.tokenizer.get_vocab() != b.tokenizer.get_vocab():
        raise LincorrError(
            f"'{a.name}' and '{b.name}' have different tokenizers ({len(a.tokenizer)} vs {len(b.tokenizer)} tokens); "
            "resilience needs two checkpoints of one model family, e.g. a base model and its instruct version"
        )


@dataclasses.dataclass(frozen=True)
class ResilienceResult(Stored):
    """Three matrices over one grid: A's W on A, A's W on B's logits, and B's own W on B."""

    study: ClassVar[str] = "resilience"

    fit_on_fit: MatrixResult
    fit_on_eval: MatrixResult
    eval_on_eval: MatrixResult
    training: dict | None = None  # how B was made, when B is A fine-tuned by `finetune_on_text`

    @property
    def difference(self) -> np.ndarray:
        """Label-wise r of A's W on B minus on A, `[n_rows, n_cols]` (negative: the map lost ground)."""
        return self.fit_on_eval.labelwise_r - self.fit_on_fit.labelwise_r

    def pairs(self) -> list[dict]:
        """One row per pair: the three label-wise r and the difference."""
        rows = []
        for fit_row, eval_row, own_row in zip(self.fit_on_fit.pairs(), self.fit_on_eval.pairs(), self.eval_on_eval.pairs()):
            a_on_a, a_on_b = fit_row["labelwise_r"], eval_row["labelwise_r"]
            rows.append({
                "source": fit_row["source"], "target": fit_row["target"], "r_fit_on_fit": a_on_a, "r_fit_on_eval": a_on_b,
                "r_eval_on_eval": own_row["labelwise_r"],
                "difference": None if a_on_a is None or a_on_b is None else a_on_b - a_on_a,
            })
        return rows

    def means(self) -> dict[str, float]:
        """Mean label-wise r over the off-diagonal cells (a prompt onto itself is trivially predictable)."""
        cells = [p for p in self.pairs() if p["source"] != p["target"] and p["r_fit_on_fit"] is not None]
        return {key: float(np.nanmean([np.nan if p[key] is None else p[key] for p in cells])) if cells else float("nan")
                for key in ("r_fit_on_fit", "r_fit_on_eval", "r_eval_on_eval", "difference")}

    def summary(self) -> dict:
        """JSON: the models, the mean scores, every pair, and the three matrices."""
        return {
            "fit_model": self.fit_on_fit.model_name,
            "eval_model": self.fit_on_eval.evaluated_on,
            "n_inputs": self.fit_on_fit.n_inputs,
            "estimator": self.fit_on_fit.config.estimator,
            "mean_offdiagonal": {k: none_if_nan(v) for k, v in self.means().items()},
            "pairs": self.pairs(),
            "training": self.training,
            "rows": list(self.fit_on_fit.grid.row_labels),
            "columns": list(self.fit_on_fit.grid.column_labels),
            "labelwise_r_fit_on_fit": [[none_if_nan(v) for v in row] for row in self.fit_on_fit.labelwise_r],
            "labelwise_r_fit_on_eval": [[none_if_nan(v) for v in row] for row in self.fit_on_eval.labelwise_r],
            "labelwise_r_eval_on_eval": [[none_if_nan(v) for v in row] for row in self.eval_on_eval.labelwise_r],
            "skipped": [{"prompt": name, "reason": reason} for name, reason in self.fit_on_fit.skipped],
        }

    def save(self, directory) -> None:
        """resilience.json, pairs.csv, difference.csv/.png and each matrix's files in its own folder."""
        from lincorr.plots import matrix_heatmap

        grid = self.fit_on_fit.grid
        with staged_directory(directory) as out:
            for name in ("fit_on_fit", "fit_on_eval", "eval_on_eval"):
                (out / name).mkdir()
                getattr(self, name).write_into(out / name)
            write_json(out / "resilience.json", self.summary())
            record(out, self, model_fingerprint={self.fit_on_fit.model_name: self.fit_on_fit.model_fingerprint,
                                                 self.eval_on_eval.model_name: self.eval_on_eval.model_fingerprint},
                   settings={**settings_key(self.fit_on_fit.config), "n_inputs": self.fit_on_fit.n_inputs,
                             "kind": self.fit_on_fit.kind, "training": self.training})
            rows = self.pairs()
            write_csv(out / "pairs.csv", list(rows[0]), [list(r.values()) for r in rows])
            write_csv(out / "difference.csv", ["source", *grid.column_labels],
                      [[label, *(none_if_nan(v) for v in row)] for label, row in zip(grid.row_labels, self.difference)])
            matrix_heatmap(
                self.difference, grid.row_labels, grid.column_labels, out / "difference.png",
                f"label-wise r of W fitted on {self.fit_on_fit.model_name}: on {self.fit_on_eval.evaluated_on} minus on itself",
                colour_label="difference in label-wise r", row_axis=grid.row_axis, column_axis=grid.column_axis,
            )

    def text(self, max_pairs: int = 15) -> str:
        """How B was made (when fine-tuned here), mean scores, then the pairs (all of them when few, else the largest drops)."""
        fit, evaluated = self.fit_on_fit.model_name, self.fit_on_eval.evaluated_on
        means = self.means()
        training = self.training
        lines = [
            *([f"fine-tuned on {training['n_examples']} passages of {training['text_file']}: {training['steps']} steps, "
               f"loss per epoch {', '.join(f'{v:.3f}' for v in training['losses'])}, {training['seconds']:.0f} s\n"] if training else []),
            f"W fitted on {fit}, evaluated on {evaluated} ({self.fit_on_fit.n_inputs} inputs, {self.fit_on_fit.config.estimator})",
            f"mean label-wise r over off-diagonal pairs: {fit} on itself {means['r_fit_on_fit']:.3f}   "
            f"{fit}'s W on {evaluated} {means['r_fit_on_eval']:.3f}   {evaluated} refitted {means['r_eval_on_eval']:.3f}",
        ]
        pairs = [p for p in self.pairs() if p["source"] != p["target"] and p["difference"] is not None]
        if len(pairs) > max_pairs:
            pairs = sorted(pairs, key=lambda p: p["difference"])[:max_pairs]
            lines.append(f"\nthe {max_pairs} largest drops:")
        width = max([len(f"{p['source']} -> {p['target']}") for p in pairs] + [4])
        lines.append(f"{'pair':<{width}}  A on A  A's W on B  B on B  difference")
        for p in pairs:
            lines.append(f"{p['source'] + ' -> ' + p['target']:<{width}}  {p['r_fit_on_fit']:6.3f}  {p['r_fit_on_eval']:10.3f}  "
                         f"{p['r_eval_on_eval']:6.3f}  {p['difference']:+10.3f}")
        return "\n".join(lines)


def measure_resilience(
    fit_lm: LM,
    eval_lm: LM,
    registry,
    grid: Grid,
    inputs: Sequence[str],
    config: FitConfig = FitConfig(),
    *,
    training: dict | None = None,
    settings: CollectSettings = CollectSettings(),
) -> ResilienceResult:
    """Collect the grid's prompts on both models and score A's W on A, A's W on B, and B's W on B."""
    check_same_tokenizer(fit_lm, eval_lm)
    grid, prompts, skipped = prepare_grid(registry, grid, fit_lm.tokenizer, len(inputs), config)
    started = time.perf_counter()
    on_fit = collect(fit_lm, prompts, inputs, settings)
    seconds_fit_model = time.perf_counter() - started
    on_eval = collect(eval_lm, prompts, inputs, settings)
    seconds_eval_model = time.perf_counter() - started - seconds_fit_model
    return ResilienceResult(
        fit_on_fit=matrix_from_tables(grid, on_fit, config, model_name=fit_lm.name, seconds_collect=seconds_fit_model, skipped=skipped),
        fit_on_eval=matrix_from_tables(grid, on_fit, config, evaluate_on=on_eval, model_name=fit_lm.name,
                                       evaluated_on=eval_lm.name, skipped=skipped),
        eval_on_eval=matrix_from_tables(grid, on_eval, config, model_name=eval_lm.name, seconds_collect=seconds_eval_model, skipped=skipped),
        training=training,
    )


def text_facts(path, max_words: int = MAX_WORDS_PER_EXAMPLE) -> list[Fact]:
    """Each non-empty line of a text file (cut into pieces of at most `max_words` words) as a plain language-modelling example.

    A Fact with an empty prompt and no answer prefix puts the loss on every token of the text
    (after the first, which nothing predicts when the tokenizer adds no BOS), so the shared
    training loop of `lincorr.finetune` does ordinary causal-LM fine-tuning.
    """
    lines = read_text(path, "training text").splitlines()
    pieces = []
    for line in lines:
        words = line.split()
        pieces += [" ".join(words[i:i + max_words]) for i in range(0, len(words), max_words)]
    if not pieces:
        raise LincorrError(f"training text {path} is empty; put some text in it, one passage per line")
    return [Fact(prompt="", answer=piece, answer_prefix="") for piece in pieces]


def finetune_on_text(lm: LM, path, config: TrainConfig = TrainConfig()) -> tuple[LM, dict]:
    """A fine-tuned copy of `lm` (the original is untouched) named after the text file, and what the training did."""
    facts = text_facts(path)
    result = train_on_facts(lm.model, lm.tokenizer, facts, config)
    tuned = wrap_model(result.model, lm.tokenizer, name=f"{lm.name}+ft({Path(path).name})")
    training = {
        "text_file": str(path), "n_examples": len(facts), "learning_rate": config.learning_rate, "epochs": config.epochs,
        "batch_size": config.batch_size, "seed": config.seed, "steps": result.steps, "losses": list(result.losses),
        "n_trainable_params": result.n_trainable_params, "seconds": result.seconds,
    }
    return tuned, training
