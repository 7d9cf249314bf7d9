"""The cost of recording what ran (`lincorr.recording.window`): the same work timed inside a window and outside one.

    python benchmarks/bench_recording.py [--model gemma-3-270m-q4km] [--n 1000] [--steps 8] [--repeats 3]

Three kinds of work a claim does: collecting a logit table (forward passes, uncached), fine-tuning (forward, backward
and AdamW), and many small calls (fitting W on the table, the Python-heavy part). Each is timed alternately with and
without a window, `--repeats` times, in this process, so the ratio holds on a busy machine; the best of each side is
compared. The window's own start and end (two snapshots of cProfile's counts) are timed on their own.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from lincorr import recording  # noqa: E402
from lincorr.collection import CollectSettings, collect  # noqa: E402
from lincorr.finetune import Fact, TrainConfig, train_on_facts  # noqa: E402
from lincorr.fit import FitConfig, fit_tables  # noqa: E402
from lincorr.inputs import sample_vocab_inputs  # noqa: E402
from lincorr.knowledge import load_registry  # noqa: E402
from lincorr.models import load_model  # noqa: E402
from lincorr.names import pseudo_names  # noqa: E402
from lincorr.prompts import registry_prompt  # noqa: E402


def timed(work, recorded: bool) -> float:
    started = time.perf_counter()
    if recorded:
        with recording.window():
            work()
    else:
        work()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m-q4km")
    parser.add_argument("--n", type=int, default=1000, help="inputs of the table collected")
    parser.add_argument("--steps", type=int, default=8, help="fine-tuning steps")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    lm = load_model(args.model)
    registry = load_registry()
    prompts = {name: registry_prompt(registry, name, lm.tokenizer) for name in ("city", "country")}
    inputs = sample_vocab_inputs(lm.tokenizer, args.n, seed=0)
    tables = collect(lm, prompts, inputs, CollectSettings(use_cache=False))
    facts = [Fact(f"{name} lives in the city of", " Paris") for name in pseudo_names(args.steps * 4, lm.tokenizer, seed=0)]
    work = {
        f"collect 2 tables of {args.n} inputs": lambda: collect(lm, prompts, inputs, CollectSettings(use_cache=False)),
        f"fine-tune {args.steps} steps": lambda: train_on_facts(lm.model, lm.tokenizer, facts, TrainConfig(epochs=1, batch_size=4)),
        "fit W (ridge, cv) 20 times": lambda: [fit_tables(tables["city"], tables["country"], FitConfig()) for _ in range(20)],
        "an empty window": lambda: None,
    }
    print(f"{'work':<34} {'plain s':>9} {'recorded s':>11} {'ratio':>7}")
    for name, run in work.items():
        plain, recorded = [], []
        for _ in range(args.repeats):
            plain.append(timed(run, False))
            recorded.append(timed(run, True))
        print(f"{name:<34} {min(plain):>9.4f} {min(recorded):>11.4f} {min(recorded) / max(min(plain), 1e-9):>7.3f}")


if __name__ == "__main__":
    main()
