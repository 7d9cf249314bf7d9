"""Speed of whole correlation matrices: from a cold logit cache, then again fully cached, in one process or several.

    python benchmarks/bench_studies.py [--model gemma-3-270m-q4km] [--family attribute] [-n 1000]
    python benchmarks/bench_studies.py --registry [--processes 1 2]    # the whole registry, per family

Each matrix is the `lincorr matrix` command in a fresh process (model load included), against a
new logit cache that shares only the converted-model cache, so "cold" means every table is
collected (tables shared between matrices are collected by the first that needs them, as a user
running the sweep would see). `--processes 2` runs the same commands under
`torchrun --nproc-per-node 2` in another new cache. The load average is printed too: on a shared
machine other jobs slow collection.
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

# The registry sweep: the four within-family matrices, then the cross-language block (Fig. 3's X-Lang panel).
REGISTRY_SWEEP = (("attribute", ["--family", "attribute"]), ("simile", ["--family", "simile"]), ("math", ["--family", "math"]),
                  ("cross-language family", ["--family", "cross-language"]), ("cross-language block", ["--cross-language"]))


def run_matrix(args, grid: list[str], cache_dir: Path, processes: int) -> tuple[float, dict]:
    """Wall seconds of one `lincorr matrix` run, and its JSON."""
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes)]
                if processes > 1 else [sys.executable])
    command = [*launcher, "-m", "lincorr", "matrix", *grid, "--model", args.model, "-n", str(args.n), "--estimator", args.estimator,
               "--json", "--quiet", *(["--compile"] if args.compile else [])]
    env = {**os.environ, "LINCORR_CACHE_DIR": str(cache_dir), "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - started, json.loads(done.stdout)


def new_cache(scratch: Path, name: str) -> Path:
    """An empty logit cache that reuses the converted models of the user's cache."""
    persistent = Path(os.environ.get("LINCORR_CACHE_DIR", Path.home() / ".cache" / "lincorr"))
    cache = scratch / name
    cache.mkdir(parents=True)
    (persistent / "models").mkdir(parents=True, exist_ok=True)
    (cache / "models").symlink_to(persistent / "models", target_is_directory=True)
    return cache


def sweep(args, grids, cache: Path, processes: int) -> list[dict]:
    """Every grid on `cache`, one after another (cold unless --cached-only), then every grid again, fully cached."""
    rows = []
    for name, grid in grids:
        load_before = os.getloadavg()[0]
        first, payload = run_matrix(args, grid, cache, processes)
        rows.append({"matrix": name, "n_prompts": len(set(payload["rows"]) | set(payload["columns"])), "cold_seconds": first,
                     "collect_seconds": payload["seconds_collect"], "fit_seconds": payload["seconds_fit"], "load_before": load_before})
        print(f"  {processes} process(es), {name}: {'cached' if args.cached_only else 'cold'} {first:.1f} s", file=sys.stderr, flush=True)
    for row, (name, grid) in zip(rows, grids):
        row["cached_seconds"], _ = run_matrix(args, grid, cache, processes)
        print(f"  {processes} process(es), {name}: cached {row['cached_seconds']:.1f} s", file=sys.stderr, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m-q4km")
    parser.add_argument("--family", default="attribute")
    parser.add_argument("--registry", action="store_true", help="the whole registry: four family matrices and the cross-language block")
    parser.add_argument("-n", type=int, default=1000)
    parser.add_argument("--estimator", default="ols")
    parser.add_argument("--processes", type=int, nargs="+", default=[1], help="run the sweep with each of these process counts")
    parser.add_argument("--compile", action="store_true", help="pass --compile to every matrix command")
    parser.add_argument("--cache", default=None, help="keep the logit cache here (one per process count) instead of a temporary one")
    parser.add_argument("--cached-only", action="store_true", help="--cache already holds every table: time cached runs only")
    args = parser.parse_args()

    grids = REGISTRY_SWEEP if args.registry else ((args.family, ["--family", args.family]),)
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for processes in args.processes:
            cache = Path(args.cache) if args.cache else new_cache(Path(scratch), f"cache-{processes}")
            if args.cache and not cache.exists():
                cache = new_cache(cache.parent, cache.name)
            results[processes] = sweep(args, grids, cache, processes)
    print(f"{args.model}, {args.n} inputs, {args.estimator}{', compiled' if args.compile else ''}, {os.cpu_count()} cores")
    print(f"{'matrix':<24}{'prompts':>8}" + "".join(f"{f'cold x{p}':>12}{f'collect x{p}':>13}{f'cached x{p}':>12}" for p in results))
    for i, (name, _) in enumerate(grids):
        first = results[args.processes[0]][i]
        print(f"{name:<24}{first['n_prompts']:>8}" + "".join(
            f"{rows[i]['cold_seconds']:>11.1f}s{rows[i]['collect_seconds']:>12.1f}s{rows[i]['cached_seconds']:>11.1f}s"
            for rows in results.values()))
    print(f"{'total':<24}{'':>8}" + "".join(
        f"{sum(r['cold_seconds'] for r in rows):>11.1f}s{sum(r['collect_seconds'] for r in rows):>12.1f}s"
        f"{sum(r['cached_seconds'] for r in rows):>11.1f}s" for rows in results.values()))
    if len(results) > 1:
        base = sum(r["cold_seconds"] for r in results[args.processes[0]])
        for processes, rows in results.items():
            print(f"cold sweep with {processes} process(es): {base / sum(r['cold_seconds'] for r in rows):.2f}x the first")
    print(json.dumps({"model": args.model, "n_inputs": args.n, "estimator": args.estimator, "runs": results}))


if __name__ == "__main__":
    main()
