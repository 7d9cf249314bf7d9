"""The generated parts of docs/methods.md: the simulation's error rates and the worked examples.

    python docs/methods.py           # print both blocks
    python docs/methods.py --write   # rewrite them in docs/methods.md (between each block's markers)

The table is `lincorr.reproduce.calibration`'s (tests/test_calibration.py asserts its bounds and that the page prints
it); the examples are read from the committed reproductions under docs/reproductions/ (tests/test_calibration.py fails
when the page's differ), so neither can say what the code no longer does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generated_blocks import read_block, write_block  # noqa: E402

from lincorr.report.effects import effect_text, sensitivity_text, tests_text  # noqa: E402
from lincorr.reproduce.calibration import KINDS, calibrated, table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "methods.md"
# (model, paper, claim): a confident negative, a smaller effect, a part no outcome could decide, shown and not counted.
EXAMPLES = (("gemma-3-270m-q4km", "merullo", "merullo.ovector.capitals.zero-shot"),
            ("qwen2.5-coder-1.5b-instruct-q4km", "peng", "peng.fig3.simile"),
            ("gemma-3-270m-q4km", "peng", "peng.table2"))


def calibration_block() -> str:
    limits = "".join(f"\n- *{kind.name}*: {kind.limit}." for kind in KINDS if kind.limit)
    return table(calibrated()) + (f"\nKnown limits (shown, not held to the bounds):\n{limits}" if limits else "")


def example_block() -> str:
    lines = []
    for model, paper, claim_id in EXAMPLES:
        run = json.loads((ROOT / "docs" / "reproductions" / model / f"{paper}.json").read_text(encoding="utf-8"))
        claim = next(c for c in run["claims"] if c["id"] == claim_id)
        decision = claim["decision"]
        lines += [f"**{claim_id} on {model}** ({claim['where']}): `{claim['verdict']}`.", "",
                  f"- Measured: {claim['ours_text']}",
                  f"- Method: {decision['method']}; each test at {decision['level']:.3g} (0.05 over the run's "
                  f"{decision['claims']} measured claims).",
                  f"- Effect [interval] vs Δ: {effect_text(decision)}; {tests_text(decision)}.",
                  f"- Δ: {claim['interest_reason']}",
                  f"- Read at Δ/2 and 2Δ: {sensitivity_text(decision)}."
                  + (f" By design: {decision['by_design']}." if decision.get("by_design") else ""), ""]
    return "\n".join(lines).strip() + "\n"


BLOCKS = {"calibration": calibration_block, "examples": example_block}


def marked(name: str) -> tuple[str, str]:
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def current_block(name: str) -> str:
    return read_block(PAGE, *marked(name))


def main() -> None:
    if sys.argv[1:] == ["--write"]:
        for name, make in BLOCKS.items():
            write_block(PAGE, *marked(name), make())
    else:
        print("\n\n".join(make() for make in BLOCKS.values()))


if __name__ == "__main__":
    main()
