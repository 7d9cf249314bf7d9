"""Collection against its peer and its bound, and where the time goes.

    python benchmarks/bench_collection.py [--model gemma-3-270m-q4km] [-n 1000] [--batch-size 128] [--profile]

Three measurements in the same run, on the same model, inputs and domain:
- the peer a savvy user would write with plain transformers: length-sorted batches, left
  padding, `logits_to_keep=1`, the domain columns gathered from the last position;
- lincorr's `collect` (no cache);
- the compute bound: the work per prompt (`costs.flops_per_prompt`: 2 x linear-layer weights x
  tokens, plus causal attention and the restricted head) at the float32 matmul rate this machine sustains,
  measured twice: on square 2048 x 2048 matrices, and on the model's own linear-layer shapes
  for one batch (the rate a perfect forward of these batches could reach).
With `--profile`, a torch profile of one lincorr collection, grouped into matmuls, attention,
other operators, and what runs outside operators (tokenization, Python).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from costs import flops_per_prompt  # noqa: E402
from lincorr.collection import CollectSettings, collect  # noqa: E402
from lincorr.models import tokenize_prompts
from lincorr.inputs import sample_vocab_inputs  # noqa: E402
from lincorr.knowledge import load_registry  # noqa: E402
from lincorr.models import load_model  # noqa: E402
from lincorr.prompts import registry_prompt  # noqa: E402
from lincorr.templates import fill  # noqa: E402

MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear")
ATTENTION_OPS = ("aten::_scaled_dot_product_flash_attention_for_cpu", "aten::scaled_dot_product_attention")


@torch.inference_mode()
def peer_collection(model, tokenizer, template: str, token_ids, inputs, batch_size: int) -> np.ndarray:
    """Plain transformers as a savvy user writes it: sorted batches, left padding, logits_to_keep=1, domain columns."""
    tokenizer.padding_side = "left"
    prompts = [fill(template, x) for x in inputs]
    order = np.argsort([len(ids) for ids in tokenizer(prompts)["input_ids"]], kind="stable")
    columns = torch.tensor(token_ids)
    table = np.empty((len(prompts), len(token_ids)), np.float32)
    for start in range(0, len(order), batch_size):
        batch = order[start:start + batch_size]
        encoded = tokenizer([prompts[i] for i in batch], return_tensors="pt", padding=True)
        table[batch] = model(**encoded, logits_to_keep=1).logits[:, -1, columns].float().numpy()
    return table


def best_seconds(function, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - started)
    return best


def square_matmul_rate(size: int = 2048, repeats: int = 5) -> float:
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    return 2 * size**3 / best_seconds(lambda: a @ b, repeats)


def model_shape_matmul_rate(model, tokens: int, repeats: int = 5) -> float:
    """FLOP/s of every linear layer of one block on a batch of `tokens` rows (the forward's own matmul shapes)."""
    layers = [m for m in model.base_model.layers[0].modules() if isinstance(m, torch.nn.Linear)]
    inputs = [torch.randn(tokens, layer.in_features) for layer in layers]
    weights = [layer.weight.detach() for layer in layers]
    flops = sum(2 * tokens * w.shape[0] * w.shape[1] for w in weights)

    def run():
        for x, w in zip(inputs, weights):
            x @ w.T

    run()
    return flops / best_seconds(run, repeats)


def profile(lm, prompt, inputs, batch_size: int) -> list[tuple[str, float]]:
    """Seconds per category in one collection: matmuls, attention, other operators, outside operators."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    started = time.perf_counter()
    with torch_profile(activities=[ProfilerActivity.CPU]) as recorded:
        collect(lm, {prompt.name: prompt}, inputs, CollectSettings(batch_size=batch_size, use_cache=False))
    wall = time.perf_counter() - started
    events = recorded.key_averages()
    self_seconds = {event.key: event.self_cpu_time_total / 1e6 for event in events}
    matmul = sum(v for k, v in self_seconds.items() if k in MATMUL_OPS)
    attention = sum(v for k, v in self_seconds.items() if k in ATTENTION_OPS)
    operators = sum(self_seconds.values())
    top = sorted(self_seconds.items(), key=lambda item: -item[1])[:10]
    for name, seconds in top:
        print(f"  {name:<60} {seconds:7.3f} s")
    return [("matmuls", matmul), ("attention", attention), ("other operators", operators - matmul - attention),
            ("outside operators (tokenization, Python)", max(0.0, wall - operators)), ("wall (profiled)", wall)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m-q4km")
    parser.add_argument("-n", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()

    lm = load_model(args.model)
    prompt = registry_prompt(load_registry(), "city", lm.tokenizer)
    inputs = sample_vocab_inputs(lm.tokenizer, args.n, seed=0)
    collect(lm, {prompt.name: prompt}, inputs[:16], CollectSettings(use_cache=False))  # warm-up

    # Alternate the two, twice each, and keep each one's best: a busy spell hurts both alike.
    peer_seconds, ours_seconds = float("inf"), float("inf")
    for _ in range(2):
        started = time.perf_counter()
        peer = peer_collection(lm.model, lm.tokenizer, prompt.template, prompt.domain.token_ids, inputs, args.batch_size)
        peer_seconds = min(peer_seconds, time.perf_counter() - started)
        started = time.perf_counter()
        ours = collect(lm, {prompt.name: prompt}, inputs, CollectSettings(batch_size=args.batch_size, use_cache=False))[prompt.name].values
        ours_seconds = min(ours_seconds, time.perf_counter() - started)

    rows = tokenize_prompts(lm.tokenizer, [fill(prompt.template, x) for x in inputs])
    tokens = float(np.mean([len(r) for r in rows]))
    work = flops_per_prompt(lm.model.config, tokens, len(prompt.domain))
    square = square_matmul_rate()
    shaped = model_shape_matmul_rate(lm.model, args.batch_size * round(tokens))
    ours_rate, peer_rate = args.n / ours_seconds, args.n / peer_seconds
    results = [
        ("peer: plain transformers (sorted batches, left padding, logits_to_keep=1)", f"{peer_rate:.1f} prompts/s"),
        ("lincorr collect", f"{ours_rate:.1f} prompts/s"),
        ("lincorr / peer", f"{ours_rate / peer_rate:.2f}x"),
        ("max |lincorr - peer| (logits)", f"{float(np.abs(ours - peer).max()):.2e}"),
        ("tables bit-identical", str(bool(np.array_equal(ours, peer)))),
        ("work per prompt", f"{work / 1e9:.3f} GFLOP ({tokens:.1f} tokens)"),
        ("matmul rate, 2048^2 float32", f"{square / 1e9:.1f} GFLOP/s"),
        (f"matmul rate, one block's linear layers on {args.batch_size * round(tokens)} rows", f"{shaped / 1e9:.1f} GFLOP/s"),
        ("lincorr as a fraction of the 2048^2 bound", f"{ours_rate * work / square:.0%}"),
        ("lincorr as a fraction of the model-shape bound", f"{ours_rate * work / shaped:.0%}"),
        ("peer as a fraction of the model-shape bound", f"{peer_rate * work / shaped:.0%}"),
    ]
    print(f"model {args.model}, torch threads {torch.get_num_threads()}, n {args.n}, batch {args.batch_size}, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    width = max(len(name) for name, _ in results)
    for name, value in results:
        print(f"{name:<{width}}  {value}")
    if args.profile:
        print("profile of one lincorr collection (self time of the top operators, then by category):")
        for name, seconds in profile(lm, prompt, inputs, args.batch_size):
            print(f"  {name:<60} {seconds:7.3f} s")


if __name__ == "__main__":
    main()
