"""What each ripple predictor costs per edit against the edit it predicts (fine-tuning the edit and asking its queries
again), measured in one cold run of `lincorr.ripple.measure_ripple` in a fresh cache. Run from the repository root:

    python benchmarks/bench_ripple.py [--model gemma-3-270m-q4km] [--max-edits 20] [-n 1000]

A ratio below 1 means the predictor costs less than making the edit; the prior and CLaRE-style similarity are forward
passes, GradSim a backward pass per query, W one fit per pair of prompts shared by every edit of that pair.
"""

from __future__ import annotations

import argparse
import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m-q4km")
    parser.add_argument("--max-edits", type=int, default=20)
    parser.add_argument("-n", "--n-inputs", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        models = os.path.join(os.environ.get("LINCORR_CACHE_DIR", os.path.expanduser("~/.cache/lincorr")), "models")
        if os.path.isdir(models):  # the converted model is reused; logit tables and edit rows start cold
            os.symlink(models, os.path.join(cache, "models"))
        os.environ["LINCORR_CACHE_DIR"] = cache
        from lincorr.knowledge import load_registry
        from lincorr.models import load_model
        from lincorr.ripple import read_edits
        from lincorr.ripple.study import RippleConfig, measure_ripple

        lm = load_model(args.model)
        result = measure_ripple(lm, read_edits(max_edits=args.max_edits), load_registry(), RippleConfig(n_inputs=args.n_inputs, n_boot=100))
    per_edit = result.summary()["seconds_per_edit"]
    edit = per_edit.pop("edit")
    print(f"{lm.name}: {result.summary()['n_edits_scored']} edits, {len(result.rows)} queries; the edit itself {edit:.2f} s per edit")
    print(f"{'predictor':<24} {'s/edit':>8} {'x the edit':>11}")
    for name, seconds in per_edit.items():
        print(f"{name:<24} {seconds:>8.2f} {seconds / edit:>11.2f}")


if __name__ == "__main__":
    main()
