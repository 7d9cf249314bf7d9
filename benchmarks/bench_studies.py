"""Speed of a whole correlation matrix: a family from a cold logit cache, then again fully cached.

    python benchmarks/bench_studies.py [--model gemma-3-270m] [--family attribute] [-n 1000] [--out DIR]

Each run is the `lincorr matrix` command in a fresh process (model load included), against a
new logit cache that shares only the converted-model cache, so "cold" means every table is
collected. The load average is printed too: on a shared machine other jobs slow collection.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_matrix(args, cache_dir: str, out: Path) -> tuple[float, dict]:
    """Wall seconds of one `lincorr matrix` run, and its JSON."""
    command = [str(Path(sys.executable).parent / "lincorr"), "matrix", "--family", args.family, "--model", args.model,
               "-n", str(args.n), "--estimator", args.estimator, "--json", "--quiet", "--out", str(out)]
    env = {**os.environ, "LINCORR_CACHE_DIR": cache_dir, "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return time.perf_counter() - started, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--family", default="attribute")
    parser.add_argument("-n", type=int, default=1000)
    parser.add_argument("--estimator", default="ols")
    parser.add_argument("--out", default=None, help="keep the matrix files here (default: a temporary folder)")
    parser.add_argument("--cache", default=None, help="a new, empty logit cache to use and keep (default: a temporary one)")
    args = parser.parse_args()

    persistent = Path(os.environ.get("LINCORR_CACHE_DIR", Path.home() / ".cache" / "lincorr"))
    with tempfile.TemporaryDirectory() as scratch:
        cache = Path(args.cache or Path(scratch) / "cache")
        if (cache / "logits").exists() and any((cache / "logits").iterdir()):
            sys.exit(f"{cache}/logits is not empty: a cold run needs an empty cache")
        cache.mkdir(parents=True, exist_ok=True)
        (persistent / "models").mkdir(parents=True, exist_ok=True)
        if not (cache / "models").exists():
            (cache / "models").symlink_to(persistent / "models", target_is_directory=True)
        out = Path(args.out or Path(scratch) / "out")
        load_before = os.getloadavg()[0]
        cold, payload = run_matrix(args, str(cache), out)
        load_after = os.getloadavg()[0]
        warm, _ = run_matrix(args, str(cache), out)
    n_prompts = len(payload["rows"])
    print(f"{args.model}, {args.family} family: {n_prompts} prompts x {args.n} inputs ({n_prompts * args.n} prompts run), {args.estimator}")
    print(f"cold cache   {cold:7.1f} s   (collection {payload['seconds_collect']:.1f} s, fits {payload['seconds_fit']:.1f} s)")
    print(f"fully cached {warm:7.1f} s")
    print(f"load average {load_before:.1f} before, {load_after:.1f} after the cold run, on {os.cpu_count()} cores")
    print(json.dumps({"model": args.model, "family": args.family, "n_inputs": args.n, "n_prompts": n_prompts,
                      "cold_seconds": cold, "cached_seconds": warm, "collect_seconds": payload["seconds_collect"],
                      "fit_seconds": payload["seconds_fit"], "load_before": load_before, "load_after": load_after}))


if __name__ == "__main__":
    main()
