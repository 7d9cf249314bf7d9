"""Peak memory of fine-tuning under each memory plan: predicted (`memory_plan.predicted_peak`) beside measured.

    python benchmarks/bench_memory_plan.py [--model gemma-3-270m-q4km] [--facts 8]

Each plan runs in a fresh process: the model is loaded and its weights read (a mapped file's pages are resident only
once read), its resident memory read, then three steps of `train_on_facts` (a copy of the model trained, every
parameter, the paper's clipping) and the process's peak resident memory read. The
measured figure is the peak less the memory after loading; the prediction counts the trained copy, gradients and
AdamW's moments, not the activations of a batch of facts or the allocator's slack. Then the predictions for larger
models (parameters from their configs) with one copy trained, on the CPU in float32.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Parameters of the models the papers' sections run on, from their configs (embeddings counted once where tied).
LARGER = {"llama-3.2-3b": 3_212_749_824, "llama-3-8b": 8_030_261_248, "llama-3-70b": 70_553_706_496}
GPU_BYTES = 80 * 10**9  # one 80 GB GPU
SHARDED_PROCESSES = 8  # one process per GPU of an eight-GPU node


def resident_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


def one_plan(model: str, plan: str, n_facts: int) -> dict:
    """In this process: load, train one epoch under `plan`, and the peak beside the prediction."""
    import dataclasses

    from lincorr.finetune import Fact, TrainConfig, train_on_facts
    from lincorr.memory_plan import plan_named, predicted_peak
    from lincorr.models import load_model

    lm = load_model(model)
    for parameter in lm.model.parameters():  # weights loaded from a mapped file are resident only once read
        parameter.detach().sum()
    loaded = resident_bytes()
    facts = [Fact(f"Fact {i} is about the city of", word) for i, word in enumerate(["Paris", "Tokyo", "Rome", "Lima"] * n_facts)][:n_facts]
    # Three steps: from the second on, AdamW's moments are held while the backward pass runs.
    config = dataclasses.replace(TrainConfig(learning_rate=5e-6, batch_size=n_facts, epochs=3), memory_plan=plan)
    train_on_facts(lm.model, lm.tokenizer, facts, config)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    parameters = list(lm.model.parameters())
    predicted = predicted_peak(plan_named(plan), sum(p.numel() for p in parameters), max(p.numel() for p in parameters),
                               sum(p.numel() * p.element_size() for p in parameters))
    return {"plan": plan, "loaded": loaded, "measured": peak - loaded, "predicted": predicted}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gemma-3-270m-q4km")
    parser.add_argument("--facts", type=int, default=8)
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # the child process's plan
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_plan(args.model, args.one, args.facts)))
        return
    from lincorr import sharded_training
    from lincorr.memory_plan import PLANS, SHARDED, predicted_peak

    print(f"fine-tuning {args.model} (float32), {args.facts} facts, three steps: peak resident memory beyond the loaded model")
    print(f"{'plan':<26} {'predicted GB':>13} {'measured GB':>12} {'ratio':>6}")
    for plan in PLANS:
        child = subprocess.run([sys.executable, __file__, "--model", args.model, "--facts", str(args.facts), "--one", plan.name],
                               capture_output=True, text=True, check=True)
        row = json.loads(child.stdout.strip().splitlines()[-1])
        print(f"{plan.name:<26} {row['predicted'] / 1e9:>13.2f} {row['measured'] / 1e9:>12.2f} {row['measured'] / row['predicted']:>6.2f}")
    print("\npredicted for larger models, float32 weights, every parameter trained, the model plus one trained copy:")
    print(f"{'model':<14} " + " ".join(f"{plan.name:>26}" for plan in PLANS))
    for name, parameters in LARGER.items():
        # The largest parameter is the embedding; about 1/16 of a Llama's parameters.
        needs = [4 * parameters + predicted_peak(plan, parameters, parameters // 16, 4 * parameters) for plan in PLANS]
        cells = [f"{need / 1e9:>8.0f} GB ({need / GPU_BYTES:>4.1f} GPUs)" for need in needs]
        print(f"{name:<14} " + " ".join(f"{cell:>26}" for cell in cells))
    print(f"\n{SHARDED.name} over {SHARDED_PROCESSES} processes (each also holds the whole loaded model), per process:")
    for name, parameters in LARGER.items():
        need = 4 * parameters + sharded_training.predicted_peak(parameters, parameters // 16, 4 * parameters, SHARDED_PROCESSES)
        print(f"{name:<14} {need / 1e9:>8.0f} GB ({'fits' if need <= GPU_BYTES else 'does not fit'} one 80 GB GPU)")


if __name__ == "__main__":
    main()
