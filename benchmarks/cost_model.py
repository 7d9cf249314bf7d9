"""Predicted collection time of a sweep from the cost model, beside what was measured.

    python benchmarks/cost_model.py [--efficiency 0.7] [--cpu-rate GFLOP/s] [--gpu-efficiency 0.5]

The work of one prompt comes from the model's config (`costs.flops_per_prompt`); the time is
that work at a sustained rate: on this machine the float32 matmul rate measured now times the
fraction of it collection reaches (`bench_collection.py`), on an H100 the bfloat16 peak times an
assumed efficiency (no GPU here to measure it). Tokens per prompt: the mean over the registry's
prompts filled with vocabulary inputs, measured with each bundled model's tokenizer; Llama 3's
tokenizer is taken to give as many as gemma's.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from bench_collection import square_matmul_rate  # noqa: E402
from costs import H100_BF16_PEAK, LLAMA_3_8B, flops_per_prompt  # noqa: E402
from lincorr.models import tokenize_prompts  # noqa: E402
from lincorr.inputs import sample_vocab_inputs  # noqa: E402
from lincorr.knowledge import load_registry  # noqa: E402
from lincorr.models import load_model  # noqa: E402
from lincorr.prompts import registry_prompts  # noqa: E402
from lincorr.templates import fill  # noqa: E402

PAPER_SWEEP = (111, 10_000)  # prompts x inputs of the paper's full sweep


def registry_shape(model: str):
    """Usable prompts, mean tokens per prompt, mean domain size and config of the registry for this model."""
    lm = load_model(model)
    prompts, _ = registry_prompts(load_registry(), [spec.name for spec in load_registry().prompts], lm.tokenizer)
    inputs = sample_vocab_inputs(lm.tokenizer, 200, seed=0)
    tokens = [np.mean([len(r) for r in tokenize_prompts(lm.tokenizer, [fill(p.template, x) for x in inputs])]) for p in prompts.values()]
    return len(prompts), float(np.mean(tokens)), float(np.mean([len(p.domain) for p in prompts.values()])), lm.model.config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--efficiency", type=float, default=0.7, help="fraction of the matmul rate collection reaches on this CPU")
    parser.add_argument("--cpu-rate", type=float, default=None, help="GFLOP/s to assume instead of measuring now")
    parser.add_argument("--gpu-efficiency", type=float, default=0.5, help="fraction of the H100's bf16 peak assumed")
    parser.add_argument("-n", type=int, default=1000, help="inputs per prompt of the registry sweep on this machine")
    args = parser.parse_args()

    cpu_rate = args.cpu_rate * 1e9 if args.cpu_rate else square_matmul_rate()
    print(f"this machine: {cpu_rate / 1e9:.0f} GFLOP/s float32 matmul, collection at {args.efficiency:.0%} of it; "
          f"H100: {H100_BF16_PEAK / 1e12:.0f} TFLOP/s bf16 at {args.gpu_efficiency:.0%}")
    print(f"{'model':<28}{'prompts':>8}{'tokens':>8}{'GFLOP/prompt':>14}{'sweep':>22}{'predicted':>14}")
    gemma_tokens = None
    for model in ("gemma-3-270m-q4km", "smollm2-135m-instruct-q41"):
        n_prompts, tokens, domain, config = registry_shape(model)
        gemma_tokens = gemma_tokens or tokens
        work = flops_per_prompt(config, tokens, round(domain))
        for sweep_prompts, n in ((n_prompts, args.n), PAPER_SWEEP):
            seconds = sweep_prompts * n * work / (cpu_rate * args.efficiency)
            print(f"{model:<28}{n_prompts:>8}{tokens:>8.1f}{work / 1e9:>14.3f}{f'{sweep_prompts} x {n:,} (CPU)':>22}{seconds / 60:>12.1f} min")
    work = flops_per_prompt(LLAMA_3_8B, gemma_tokens, 128)
    for gpus in (1, 8):
        seconds = PAPER_SWEEP[0] * PAPER_SWEEP[1] * work / (H100_BF16_PEAK * args.gpu_efficiency * gpus)
        print(f"{'llama-3-8b':<28}{PAPER_SWEEP[0]:>8}{gemma_tokens:>8.1f}{work / 1e9:>14.1f}{f'111 x 10,000 ({gpus} H100)':>22}"
              f"{seconds / 60:>12.1f} min")


if __name__ == "__main__":
    main()
