"""Training-study speed: one fact-training step against the plain Hugging Face recipe, and ridge
alpha selection against fitting and predicting every alpha. Run from the repository root:

    python benchmarks/bench_training.py [--model gemma-3-270m-q4km] [--steps 8] [--batch-size 4]

Both sides of each ratio run in this process, on the same facts and the same tables, so the
ratios hold on a busy machine even when the seconds do not.
"""

from __future__ import annotations

import argparse
import copy
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from lincorr.collection import collect  # noqa: E402
from lincorr.names import pseudo_names  # noqa: E402
from lincorr.templates import fill  # noqa: E402
from lincorr.finetune import Fact, TrainConfig, collate, encode_fact, train_on_facts  # noqa: E402
from lincorr.inputs import sample_vocab_inputs  # noqa: E402
from lincorr.knowledge import load_registry  # noqa: E402
from lincorr.linear import LinearMap, fit_ridge  # noqa: E402
from lincorr.models import load_model  # noqa: E402
from lincorr.prompts import registry_prompt  # noqa: E402

BLOCKS = r"layers\."


def plain_steps(model, tokenizer, facts, steps: int, batch_size: int, lr: float) -> float:
    """Seconds per step of the usual recipe: full forward with `labels=` (logits at every position), per-tensor AdamW."""
    model = copy.deepcopy(model)
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(BLOCKS[:-2] in name)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=lr)
    encoded = [encode_fact(tokenizer, fact) for fact in facts]
    model.eval()
    started = time.perf_counter()
    for step in range(steps):
        chunk = [encoded[(step * batch_size + i) % len(encoded)] for i in range(batch_size)]
        batch = collate(chunk, tokenizer.pad_token_id or 0)
        optimizer.zero_grad(set_to_none=True)
        loss = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
                     labels=batch.labels, use_cache=False).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
    return (time.perf_counter() - started) / steps


def lincorr_steps(model, tokenizer, facts, steps: int, batch_size: int, lr: float) -> float:
    """Seconds per step of `train_on_facts` (one epoch of `steps` batches; the copy of the model is timed too)."""
    config = TrainConfig(learning_rate=lr, epochs=1, batch_size=batch_size, trainable=(BLOCKS,))
    result = train_on_facts(model, tokenizer, (list(facts) * steps)[: steps * batch_size], config)
    return result.seconds / result.steps


def per_alpha_errors(source, target, folds, alphas) -> np.ndarray:
    """The plain cross-validation: fit W for every alpha and fold, predict the held-out rows."""
    errors = np.zeros(len(alphas))
    for held_out in folds:
        train = np.setdiff1d(np.arange(source.shape[0]), held_out)
        for k, (W, intercept) in enumerate(fit_ridge(source[train], target[train], alphas)):
            errors[k] += np.mean((source[held_out] @ W + intercept - target[held_out]) ** 2)
    return errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m-q4km")
    parser.add_argument("--steps", type=int, default=8, help="training steps timed on each side")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("-n", type=int, default=1000, help="inputs of the tables alpha is selected on")
    parser.add_argument("--matrix-width", type=int, default=23, help="copies of the target table in the matrix-row case")
    args = parser.parse_args()

    lm = load_model(args.model)
    registry = load_registry()
    city = registry_prompt(registry, "city", lm.tokenizer)
    names = pseudo_names(args.batch_size * 4, lm.tokenizer, 0)
    facts = [Fact(fill(city.template, name), city.domain.words[i]) for i, name in enumerate(names)]
    # Warm-up: first calls allocate and pick kernels.
    lincorr_steps(lm.model, lm.tokenizer, facts, 1, args.batch_size, args.lr)
    plain = plain_steps(lm.model, lm.tokenizer, facts, args.steps, args.batch_size, args.lr)
    ours = lincorr_steps(lm.model, lm.tokenizer, facts, args.steps, args.batch_size, args.lr)
    print(f"{args.model}: one training step on {args.batch_size} facts, transformer blocks trainable")
    print(f"  full-vocabulary logits + per-tensor AdamW   {plain:6.2f} s/step")
    print(f"  lincorr.finetune                            {ours:6.2f} s/step   ({plain / ours:.2f}x)")

    inputs = sample_vocab_inputs(lm.tokenizer, args.n, seed=0)
    tables = [collect(lm, {p.name: p}, inputs)[p.name].values.astype(np.float64)
              for p in (city, registry_prompt(registry, "country", lm.tokenizer))]
    estimator = LinearMap("ridge", alpha="cv")
    folds = np.array_split(np.random.default_rng(estimator.seed).permutation(args.n), estimator.cv)
    # One pair, then a matrix row: a source fitted against all targets of a family at once (here the
    # country table repeated, as wide as the attribute family's 23 prompts).
    for label, target in (("one pair", tables[1]), ("matrix row", np.tile(tables[1], (1, args.matrix_width)))):
        started = time.perf_counter()
        plain_errors = per_alpha_errors(tables[0], target, folds, estimator.alphas)
        plain_seconds = time.perf_counter() - started
        started = time.perf_counter()
        chosen = estimator.select_alpha(tables[0], target)
        ours_seconds = time.perf_counter() - started
        same = estimator.alphas[int(np.argmin(plain_errors))] == chosen
        print(f"ridge alpha by {estimator.cv}-fold CV over {len(estimator.alphas)} alphas, {label}: {tables[0].shape} -> {target.shape}")
        print(f"  fit and predict every alpha                 {plain_seconds:6.2f} s")
        print(f"  closed-form held-out errors                 {ours_seconds:6.2f} s   ({plain_seconds / ours_seconds:.1f}x, same alpha: {same})")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
