"""Extractive-score speed: gradients for every component from one backward per batch, against a loop with one
backward per component. Run from the repository root:

    python benchmarks/bench_extractive.py [--model gemma-3-270m-q4km] [--hop first] [--n-loop 10]

Both sides score the 20 implications of the hop's dataset against the same "fine-tuned" weights in
this process, so the ratio holds on a busy machine even when the seconds do not. The weights are
the original ones plus small noise (timing does not depend on what training learned). The loop
side gives each component its own forward and backward for dR/dy_c and dR/dW_c (what the
informative and downstream scores need); it runs on `--n-loop` components spread over the model
and is extrapolated to all of them. Upstream needs one backward per split point (2 per block) in
either design and is timed on its own.
"""

from __future__ import annotations

import argparse
import copy
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from lincorr.studies.extractive.ocr import hop_data, load_world, snapshot  # noqa: E402
from lincorr.studies.extractive.scores import linearized_scores, rewards, score_components  # noqa: E402
from lincorr.internals import component_parameters, head_indices, run  # noqa: E402
from lincorr.knowledge import load_registry  # noqa: E402
from lincorr.models import load_model  # noqa: E402


def noisy_copy(lm, scale: float = 1e-3):
    model = copy.deepcopy(lm.model)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "layers." in name:
                parameter.add_(scale * torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype))
    return snapshot(model, lm.tokenizer, f"{lm.name}+noise")


def per_component_loop(lm, queries, components) -> float:
    """Seconds for dR/dy_c and dR/dW_c of `components`, one forward and backward each."""
    named = dict(lm.model.named_parameters())
    token_ids = torch.tensor(queries.candidates.token_ids)
    answers = torch.tensor(queries.answers)
    started = time.perf_counter()
    for component in components:
        names = list(head_indices(lm, component) if component.kind == "head" else component_parameters(lm, component))
        trace = run(lm, list(queries.prompts), capture=[component], positions="all", token_ids=token_ids, grad=True)
        grads = torch.autograd.grad(rewards(trace.logits, answers).sum(), [trace[component]] + [named[n] for n in names])
        assert all(torch.isfinite(g).all() for g in grads)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="gemma-3-270m-q4km")
    parser.add_argument("--hop", default="first", choices=["first", "second"])
    parser.add_argument("--n-loop", type=int, default=10, help="components the per-component loop runs on (extrapolated)")
    args = parser.parse_args()
    lm = load_model(args.model)
    queries = hop_data(load_world(load_registry()), lm.tokenizer, args.hop).implications
    tuned = noisy_copy(lm)
    components = score_components(lm)
    linearized_scores(lm, tuned, queries, components=components[:2], upstream=False)  # warm-up: allocator, kernels

    started = time.perf_counter()
    linearized_scores(lm, tuned, queries, components=components, upstream=False)
    one_pass = time.perf_counter() - started
    started = time.perf_counter()
    linearized_scores(lm, tuned, queries, components=components, upstream=True)
    with_upstream = time.perf_counter() - started

    spread = [components[int(i)] for i in np.unique(np.linspace(0, len(components) - 1, args.n_loop).round())]
    looped = per_component_loop(lm, queries, spread) / len(spread) * len(components)
    print(f"{args.model}, {args.hop} hop, {len(queries)} implications, {len(components)} components "
          f"(threads: {torch.get_num_threads()})")
    print(f"informative + downstream, one backward per batch:  {one_pass:7.1f} s (includes the two forwards for f_c(z'_c, W_c))")
    print(f"gradients alone, one backward per component:    {looped:7.1f} s (measured on {len(spread)} components, x{len(components) / len(spread):.1f})")
    print(f"ratio (loop / one pass):                          {looped / one_pass:7.1f}x")
    print(f"all three scores (upstream: 2 backwards per block): {with_upstream:7.1f} s")


if __name__ == "__main__":
    main()
