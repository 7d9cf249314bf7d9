"""Logit-lens speed: `vector_arithmetic.lens` against a one-prompt-at-a-time, one-layer-at-a-time loop. Run from the repository root:

    python benchmarks/bench_internals.py [--model gemma-3-270m-q4km] [--n-prompts 64] [--loop-prompts 8]

Both read the reciprocal rank of the argument's and the answer's first token at every lens layer
(`resid[0]` .. `resid[L]`) of the capitals few-shot prompts. The lens runs length-sorted batches,
one forward per batch for every layer (and also reads the state between each block's attention
and its FFN, which the loop does not). The loop is the procedure of the paper's code, one prompt
and one layer per forward: an HF forward with hidden states for each (prompt, layer), that layer
decoded through the final norm and the whole unembedding. Throughput is prompts x layers per
second, both measured in the same run; the loop runs on the first `--loop-prompts` prompts and
its ranks are checked against the lens's.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from lincorr.studies.vectors.arithmetic import lens, pair_order  # noqa: E402
from lincorr.tasks import bind_task, fewshot_prompts  # noqa: E402
from lincorr.internals import layout  # noqa: E402
from lincorr.knowledge import load_registry  # noqa: E402
from lincorr.models import load_model  # noqa: E402


@torch.inference_mode()
def loop_lens(lm, prompts, argument_ids, answer_ids) -> tuple[np.ndarray, np.ndarray]:
    """Reciprocal ranks `[n, L + 1]` of the argument and the best answer, one forward per prompt and layer."""
    model, n_layers = lm.model, layout(lm).n_layers
    final_norm = layout(lm).final_norm()
    argument_rr = np.zeros((len(prompts), n_layers + 1))
    answer_rr = np.zeros((len(prompts), n_layers + 1))
    for i, prompt in enumerate(prompts):
        encoded = lm.tokenizer(prompt, return_tensors="pt")
        for layer in range(n_layers + 1):
            out = model(**encoded, output_hidden_states=True)
            # hidden_states[L] is already normalised by transformers: the last layer is the model's own logits.
            logits = out.logits[0, -1] if layer == n_layers else lm.head_logits(final_norm(out.hidden_states[layer][0, -1:]))[0]
            argument_rr[i, layer] = 1 / (1 + int((logits > logits[argument_ids[i]]).sum()))
            answer_rr[i, layer] = max(1 / (1 + int((logits > logits[t]).sum())) for t in answer_ids[i])
    return argument_rr, answer_rr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m-q4km")
    parser.add_argument("--task", default="capitals")
    parser.add_argument("--n-prompts", type=int, default=64, help="prompts for the lens")
    parser.add_argument("--loop-prompts", type=int, default=8, help="prompts for the one-at-a-time loop")
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    lm = load_model(args.model)
    task = load_registry().task(args.task)
    bound = bind_task(task, lm.tokenizer)
    n_layers = layout(lm).n_layers
    indices = pair_order(bound, 0)[: args.n_prompts]
    lens(lm, task, n_pairs=4, batch_size=args.batch_size)  # warm-up

    started = time.perf_counter()
    result = lens(lm, task, n_pairs=args.n_prompts, batch_size=args.batch_size)
    lens_seconds = time.perf_counter() - started

    subset = indices[: args.loop_prompts]
    started = time.perf_counter()
    argument_rr, answer_rr = loop_lens(lm, fewshot_prompts(bound, subset), [bound.pairs[i].argument_id for i in subset],
                                       [bound.pairs[i].answer_ids for i in subset])
    loop_seconds = time.perf_counter() - started
    check = lens(lm, task, n_pairs=args.loop_prompts, batch_size=args.batch_size)
    gap = max(np.abs(check.argument_rr - argument_rr.mean(0)).max(), np.abs(check.answer_rr - answer_rr.mean(0)).max())

    lens_rate = len(indices) * (n_layers + 1) / lens_seconds
    loop_rate = len(subset) * (n_layers + 1) / loop_seconds
    load = os.getloadavg()[0]
    rows = [
        ("model", f"{lm.name} ({n_layers} blocks, {lm.head_weight.shape[0]:,}-token vocabulary), torch {torch.__version__}, "
                  f"{torch.get_num_threads()} threads, load average {load:.1f}"),
        (f"lens: {len(indices)} {args.task} prompts x {n_layers + 1} layers, batch {args.batch_size}", f"{lens_seconds:.1f} s"),
        (f"loop: {len(subset)} prompts x {n_layers + 1} layers, one forward each", f"{loop_seconds:.1f} s"),
        ("lens throughput", f"{lens_rate:.1f} prompt-layers/s"),
        ("loop throughput", f"{loop_rate:.1f} prompt-layers/s"),
        ("speed-up", f"{lens_rate / loop_rate:.1f}x (target >= 10x)"),
        ("max |mean RR difference| lens vs loop", f"{gap:.1e}"),
        ("crossing layer, model accuracy (lens run)", f"{result.crossing_layer}, {result.final_accuracy:.2f}"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
