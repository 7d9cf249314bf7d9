"""Does the lean memory plan measure what the paper's AdamW in float32 measures? Each fine-tuning claim measured twice on
one model, once under each plan, and judged in the family of the committed reproduction it belongs to.

    python benchmarks/lean_plan_agreement.py --paper peng --only peng.table4,peng.table5,peng.fig5,peng.table6 \
        [--model qwen2.5-coder-0.5b-instruct-q4km] [--lean adamw-bfloat16-moments] [--work /tmp/lean-plan]

Each plan runs in a fresh process with a cache of its own (results and trained checkpoints; the converted model and the
base model's logit tables are shared: no training touches them), where `auto` is answered with that plan, which is
what a machine with too little free memory for the paper's plan gets. Both runs' claims are then swapped into the
committed reproduction (docs/reproductions/MODEL/PAPER.json) and the file judged again, so each verdict is decided at
the committed run's level, among its claims. Agreement: the same verdict, and the lean plan's effect inside the float32
run's interval. The float32 run is also compared with the committed file: equal numbers say the committed claims were
trained under the paper's plan (training is seeded).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
PAPER_PLAN = "adamw-float32"
SHARED = ("models", "logits")  # in the cache root: the converted weights and the base model's tables


def measure_under(plan: str, paper: str, model: str, only: str, out: Path) -> None:
    """In this process: `paper`'s claims in `only` measured with every `auto` plan answered by `plan`, saved to `out`."""
    from lincorr import finetune
    from lincorr.__main__ import hand_back_freed_memory
    from lincorr.reproduce.runner import reproduce

    hand_back_freed_memory()
    chosen, used = finetune.chosen_plan, set()

    def forced(requested: str, *sizes):
        plan_of_run = chosen(plan if requested == "auto" else requested, *sizes)
        used.add(plan_of_run.name)
        return plan_of_run

    finetune.chosen_plan = forced
    result = reproduce(paper, model, only=only, budget="quick")
    result.save(out)
    (out / "plans.json").write_text(json.dumps(sorted(used)) + "\n", encoding="utf-8")


def run_plan(plan: str, args: argparse.Namespace) -> Path:
    """A child process measuring under `plan` in a cache of its own; its saved directory (reused when already there)."""
    out = args.work / plan / args.paper
    if (out / "reproduction.json").exists():
        return out
    from lincorr.cache import cache_root

    cache = args.work / plan / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    for name in SHARED:
        if not (cache / name).exists():
            (cache_root() / name).mkdir(parents=True, exist_ok=True)
            (cache / name).symlink_to(cache_root() / name)
    subprocess.run([sys.executable, __file__, "--paper", args.paper, "--model", args.model, "--only", args.only, "--one", plan,
                    "--work", str(args.work)], env={**os.environ, "LINCORR_CACHE_DIR": str(cache)}, check=True)
    return out


def swapped_in(committed, measured):
    """The committed reproduction with `measured`'s claims in place of its own, judged again as a whole."""
    from lincorr.reproduce.judging import judged, retested
    from lincorr.reproduce.runner import alpha_of

    by_id = {claim.id: claim for claim in measured.claims}
    claims = [by_id.get(claim.id, claim) for claim in committed.claims]
    return dataclasses.replace(committed, claims=judged([retested(claim) for claim in claims], alpha_of(committed.budget)))


def cell(claim) -> str:
    decision = claim.decision or {}
    if decision.get("effect") is None:
        return claim.verdict
    low, high = decision["interval"]
    return f"{claim.verdict}: {decision['effect']:.3g} [{low:.3g}, {high:.3g}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--paper", required=True)
    parser.add_argument("--only", required=True, help="the claims that fine-tune, comma-separated")
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct-q4km")
    parser.add_argument("--lean", default="adamw-bfloat16-moments")
    parser.add_argument("--work", type=Path, default=Path("/tmp/lean-plan"))
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # the child process's plan
    args = parser.parse_args()
    if args.one:
        measure_under(args.one, args.paper, args.model, args.only, args.work / args.one / args.paper)
        return
    from lincorr.reproduce.runner import ReproductionResult

    committed = ReproductionResult.load(ROOT / "docs" / "reproductions" / args.model / f"{args.paper}.json")
    runs = {plan: ReproductionResult.load(run_plan(plan, args)) for plan in (PAPER_PLAN, args.lean)}
    plans = {plan: json.loads((args.work / plan / args.paper / "plans.json").read_text(encoding="utf-8")) for plan in runs}
    judged = {plan: {claim.id: claim for claim in swapped_in(committed, run).claims} for plan, run in runs.items()}
    before = {claim.id: claim for claim in committed.claims}
    print(f"{args.model}, {args.paper}: plans used {plans}; each judged among the {len(committed.claims)} claims of the committed file")
    print(f"| claim | committed | {PAPER_PLAN} | {args.lean} | same verdict | lean effect inside {PAPER_PLAN}'s interval |")
    print("|---|---|---|---|---|---|")
    for claim_id in (claim.id for claim in runs[args.lean].claims):
        paper_run, lean = judged[PAPER_PLAN][claim_id], judged[args.lean][claim_id]
        effect, interval = (lean.decision or {}).get("effect"), (paper_run.decision or {}).get("interval")
        inside = "" if effect is None or interval is None else "yes" if interval[0] <= effect <= interval[1] else "no"
        print(f"| {claim_id} | {cell(before[claim_id])} | {cell(paper_run)} | {cell(lean)} | "
              f"{'yes' if paper_run.verdict == lean.verdict else 'no'} | {inside} |")


if __name__ == "__main__":
    main()
