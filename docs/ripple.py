"""The generated part of docs/ripple.md: each committed ripple run's predictor table, paired differences and claims.

    python docs/ripple.py           # print the block
    python docs/ripple.py --write   # rewrite it in docs/ripple.md (between its markers)

Read from the committed runs under docs/ripple/ (tests/test_ripple.py fails when the page's block differs).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generated_blocks import read_block, write_block  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "ripple.md"
RUNS = ROOT / "docs" / "ripple"
MARKERS = "<!-- ripple-results:start -->", "<!-- ripple-results:end -->"


def number(value, bounds=None) -> str:
    if value is None:
        return "n/a"
    if bounds is None:
        return f"{value:.2f}"
    low, high = (f"{end:.2f}" if end is not None else "?" for end in bounds)
    return f"{value:.2f} [{low}, {high}]"


def run_block(path: Path) -> str:
    run = json.loads(path.read_text(encoding="utf-8"))
    costs = run["seconds_per_edit"]
    skipped = "; ".join(f"{count} {reason}" for reason, count in run["skipped"].items())
    settings = run["settings"]
    phrasing = settings.get("phrasing", "dataset")
    lines = [f"### {run['model']}" + (f", {phrasing} phrasing" if phrasing != "dataset" else ""), "",
             f"`lincorr ripple --model {run['model']}" + (f" --phrasing {phrasing}" if phrasing != "dataset" else "") + f" --out docs/ripple/{path.parent.name}` ({settings['n_inputs']} vocabulary inputs "
             f"per W, `--training {settings['training']}`, top-{settings['top_k']}, {settings['n_boot']} bootstrap resamples of "
             f"the edits): {run['n_queries_scored']} queries of {run['n_edits_scored']} edits scored of {run['n_edits']} edits "
             f"read. Left out: {skipped or 'none'}. GradSim over {run['gradient_parameters']}; the CLaRE-style layer "
             f"chosen on the other fold: " + ", ".join(f"{fold} layer {layer}" for fold, layer in run["benchmark"]["clare_layers"].items())
             + ".", ""]
    for subset in run["benchmark"]["subsets"].values():
        lines.append(f"**{subset['rows'][0].upper()}{subset['rows'][1:]}** ({subset['n_queries']} queries"
                     + (f", {subset['n_edits']} edits): the implied answer entered the top {settings['top_k']} in "
                        f"{subset['n_entered_top_k']} of the {subset['n_asked']} queries where it was not there; the model's "
                        f"own answer before the edit lost its place in {subset['n_held_displaced']} of the "
                        f"{subset['n_held_other']} where it was another." if subset["n_queries"] else ")."))
        lines.append("")
        if not subset["n_queries"]:
            continue
        lines += ["| predictor | AUC (enters top-k) [95%] | W minus it: AUC [95%] | Spearman with Δ log p [95%] | s per edit |",
                  "|---|---|---|---|---|"]
        differences = {row["predictor"]: row for row in subset["differences"]}
        for row in subset["predictors"]:
            name = row["predictor"]
            cost = costs.get("W (both fits)" if name.startswith("W ") else name, 0.0)
            difference = differences.get(name)
            lines.append(f"| {name} | {number(row['auc'], row['auc_ci95'])} | "
                         + (number(difference["auc_difference"], difference["auc_difference_ci95"]) if difference else "—")
                         + f" | {number(row['spearman'], row['spearman_ci95'])} | {cost:.2f} |")
        lines.append("")
        for claim in subset["claims"]:
            decision = claim["decision"]
            interval = decision["interval"] or [None, None]
            lines.append(f"- {claim['claim']}: **{decision['verdict']}** (AUC difference {number(decision['effect'], interval)} at "
                         f"level {decision['level']:.3g} on each side, against Δ = {decision['interest']:g}; {decision['units']} edits)")
        lines.append("")
    lines.append(f"The edit itself: {costs['edit']:.1f} s per edit on the machine that wrote the run.")
    return "\n".join(lines)


def block() -> str:
    runs = sorted(RUNS.glob("*/ripple.json"))
    return "\n\n".join(run_block(path) for path in runs) if runs else "No committed run yet."


def current_block() -> str:
    return read_block(PAGE, *MARKERS)


def main() -> None:
    if sys.argv[1:] == ["--write"]:
        write_block(PAGE, *MARKERS, block())
    else:
        print(block())


if __name__ == "__main__":
    main()
