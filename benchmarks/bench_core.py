"""Core speed: collection vs the official notebook's procedure, fitting vs a per-target
scikit-learn loop, and model load times. Prints a table; run from the repository root:

    python benchmarks/bench_core.py [--model gemma-3-270m-q4km] [-n 400] [--reference-n 100]
    python benchmarks/bench_core.py --device cuda --dtype bfloat16 --batch-size auto --skip-load   # on a GPU

Every ratio compares two measurements taken in the same run on the same data.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from lincorr.collection import CollectSettings, collect  # noqa: E402

from lincorr.models import tokenize_prompts
from lincorr.templates import fill  # noqa: E402
from lincorr.inputs import sample_vocab_inputs  # noqa: E402
from lincorr.knowledge import load_registry  # noqa: E402
from lincorr.linear import LinearMap  # noqa: E402
from lincorr.models import load_model  # noqa: E402
from lincorr.prompts import registry_prompt  # noqa: E402


def reference_collection(lm, template: str, token_ids, inputs) -> np.ndarray:
    """The official notebook's procedure: one prompt at a time, full-vocabulary logits to the CPU."""
    rows = []
    with torch.no_grad():
        for x in inputs:
            encoded = lm.tokenizer(fill(template, x), return_tensors="pt").to(lm.device)
            logits = lm.model(**encoded).logits[0, -1].float().cpu().numpy()
            rows.append(logits[list(token_ids)])
    return np.array(rows, np.float32)


def synchronize(device: torch.device | str = "cpu") -> None:
    """Wait for the device's queued work, so that a host clock read after it times that work."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def matmul_flops(size: int | None = None, repeats: int = 5, device: str = "cpu", dtype: torch.dtype = torch.float32) -> float:
    """Sustained matmul FLOP/s of `device` in `dtype` (best of `repeats`; 2048^2 on a CPU, 8192^2 on a GPU, which 2048 does not fill)."""
    size = size or (8192 if torch.device(device).type == "cuda" else 2048)
    a, b = (torch.randn(size, size, device=device).to(dtype) for _ in range(2))
    a @ b
    synchronize(device)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        a @ b
        synchronize(device)
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best


def non_embedding_parameters(model) -> int:
    """Parameters outside the input embedding and the unembedding (the per-token matmul work)."""
    skip = {id(model.get_input_embeddings().weight), id(model.get_output_embeddings().weight)}
    return sum(p.numel() for p in model.parameters() if id(p) not in skip)


def timed(function, *args, repeats: int = 1, device: torch.device | str = "cpu", **kwargs):
    """(best seconds over `repeats`, last result); `device`'s queued work is waited for."""
    best, result = float("inf"), None
    for _ in range(repeats):
        synchronize(device)
        started = time.perf_counter()
        result = function(*args, **kwargs)
        synchronize(device)
        best = min(best, time.perf_counter() - started)
    return best, result


def load_in_subprocess(model: str, cache_dir: str) -> dict:
    """Load time and peak resident memory of a fresh process."""
    code = (
        "import json, resource, sys, time; t = time.perf_counter();"
        "from lincorr.models import load_model; load_model(sys.argv[1]);"
        "print(json.dumps({'seconds': time.perf_counter() - t,"
        " 'peak_gib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}))"
    )
    env = {**os.environ, "LINCORR_CACHE_DIR": cache_dir, "TRANSFORMERS_VERBOSITY": "error"}
    out = subprocess.run([sys.executable, "-c", code, model], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def batch_size(text: str) -> int | str:
    """--batch-size: a positive whole number or "auto"."""
    return text if text == "auto" else int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m-q4km")
    parser.add_argument("-n", type=int, default=1000, help="inputs for the batched collection")
    parser.add_argument("--reference-n", type=int, default=100, help="inputs for the one-at-a-time reference")
    parser.add_argument("--batch-size", type=batch_size, default=128, help="prompts per forward pass, or auto (a GPU's largest)")
    parser.add_argument("--device", default=None, help="torch device (default: cpu)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--skip-load", action="store_true", help="skip the cold/cached load measurement")
    args = parser.parse_args()

    rows: list[tuple[str, str]] = []
    lm = load_model(args.model, device=args.device, dtype=args.dtype)
    on = {"device": lm.device}
    registry = load_registry()
    city = registry_prompt(registry, "city", lm.tokenizer)
    country = registry_prompt(registry, "country", lm.tokenizer)
    inputs = sample_vocab_inputs(lm.tokenizer, max(args.n, args.reference_n), seed=0)

    # 1. Collection.
    subset = inputs[: args.reference_n]
    reference_seconds, reference = timed(reference_collection, lm, city.template, city.domain.token_ids, subset, **on)
    collect(lm, {city.name: city}, subset[:8], CollectSettings(use_cache=False))  # warm-up
    ours_seconds, tables = timed(
        collect, lm, {city.name: city}, inputs[: args.n], CollectSettings(batch_size=args.batch_size, use_cache=False), repeats=2, **on
    )
    table = tables[city.name]
    gap = float(np.abs(table.values[: args.reference_n] - reference).max())
    reference_rate = len(subset) / reference_seconds
    ours_rate = args.n / ours_seconds
    tokens = np.mean([len(r) for r in tokenize_prompts(lm.tokenizer, [fill(city.template, x) for x in inputs[: args.n]])])
    flops_per_prompt = 2 * non_embedding_parameters(lm.model) * tokens
    peak = matmul_flops(device=str(lm.device), dtype=lm.model.dtype)
    rows += [
        ("collection: reference (1 prompt, full vocab -> CPU)", f"{reference_rate:.1f} prompts/s"),
        (f"collection: lincorr (batch {args.batch_size}, domain rows)", f"{ours_rate:.1f} prompts/s"),
        ("collection speed-up", f"{ours_rate / reference_rate:.1f}x"),
        ("collection max |difference| vs reference", f"{gap:.2e}"),
        (f"matmul peak ({str(lm.model.dtype).removeprefix('torch.')}, {lm.device})", f"{peak / 1e9:.1f} GFLOP/s"),
        ("work per prompt (2 x non-embedding params x tokens)", f"{flops_per_prompt / 1e9:.3f} GFLOP ({tokens:.1f} tokens)"),
        ("collection as a fraction of the compute bound", f"{ours_rate * flops_per_prompt / peak:.0%}"),
    ]

    # 2. Fitting, on real tables: City -> Country.
    target = collect(lm, {country.name: country}, inputs[: args.n], CollectSettings(batch_size=args.batch_size))[country.name]
    # float64 for both sides: given float32, scikit-learn fits in float32 and is the less exact one.
    source_values, target_values = table.values.astype(np.float64), target.values.astype(np.float64)
    from sklearn.linear_model import LinearRegression

    def sklearn_loop():
        W = np.empty((source_values.shape[1], target_values.shape[1]))
        for j in range(target_values.shape[1]):
            W[:, j] = LinearRegression().fit(source_values, target_values[:, j]).coef_
        return W

    loop_seconds, loop_coef = timed(sklearn_loop, repeats=3)
    ols_seconds, fitted = timed(lambda: LinearMap("ols").fit(source_values, target_values), repeats=3)
    ridge_seconds, _ = timed(lambda: LinearMap("ridge", alpha="cv").fit(source_values, target_values), repeats=3)
    relative = float(np.abs(fitted.W_ - loop_coef).max() / np.abs(loop_coef).max())
    shape = f"{source_values.shape[0]} x {source_values.shape[1]} -> {target_values.shape[1]}"
    rows += [
        (f"fit: scikit-learn loop per target ({shape})", f"{loop_seconds * 1e3:.1f} ms"),
        ("fit: lincorr ols, all targets at once", f"{ols_seconds * 1e3:.1f} ms"),
        ("fit speed-up", f"{loop_seconds / ols_seconds:.0f}x"),
        ("fit max |W difference| / max |W|", f"{relative:.1e}"),
        ("fit: lincorr ridge, 5-fold CV over 17 alphas", f"{ridge_seconds * 1e3:.1f} ms"),
    ]

    # 3. Loading, in fresh processes.
    if not args.skip_load:
        with tempfile.TemporaryDirectory() as empty_cache:
            cold = load_in_subprocess(args.model, empty_cache)
            warm = load_in_subprocess(args.model, empty_cache)
        rows += [
            ("load: cold (convert GGUF, write cache)", f"{cold['seconds']:.1f} s, peak {cold['peak_gib']:.2f} GiB"),
            ("load: from the converted cache", f"{warm['seconds']:.1f} s, peak {warm['peak_gib']:.2f} GiB"),
            ("load speed-up", f"{cold['seconds'] / warm['seconds']:.1f}x"),
        ]

    width = max(len(name) for name, _ in rows)
    print(f"model {args.model}, {args.dtype} on {lm.device}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"batch size {args.batch_size}, n {args.n}, reference n {args.reference_n}")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
