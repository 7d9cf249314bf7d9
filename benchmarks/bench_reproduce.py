"""Reproduction speed: every measured claim's quick budget on one model, each step's wall time against the work it needs.

    python benchmarks/bench_reproduce.py [--model gemma-3-270m-q4km] [--papers peng,merullo,feng] [--only feng.fig2.first,...]
    python benchmarks/bench_reproduce.py --device cuda [--dtype bfloat16]   # on a GPU

Runs the claims that measure something (a step and quick settings; none that needs a second
checkpoint) through `lincorr.reproduce.runner.reproduce` in a fresh, empty cache (only the
converted models are linked in from the real one), so the run is cold as a first run is: every
step does its whole work, and the claims of a paper share what a real run shares (`ctx.shared`
and the checkpoints of this run: a fine-tuned model is trained by the first claim that needs it and
charged to that claim). Per claim it prints:

- the tokens that went through the model's body forward, and those that went forward with
  gradients (each needs a backward of about twice the forward's work), counted by a forward
  hook on the body (deep copies of the model, trained or mixed, carry it and count too);
- the rows unembedded over the whole vocabulary (the head module, or `LM.head_logits` without
  a restriction), each 2 x d_model x vocabulary FLOPs (x3 with a backward);
- the work: tokens x (2 x the weights multiplied per token + causal attention at the row's
  length, `costs.py`), x3 for tokens with a backward, plus the unembeddings;
- the bound: that work at the matmul rate of the device and dtype measured at the start of the same
  run (`bench_core.matmul_flops`), and the ratio bound / wall (1.0 is the compute bound).

Restricted heads (a domain's rows of the unembedding) are not counted: they are a few hundred rows.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from bench_core import matmul_flops, synchronize  # noqa: E402
from costs import linear_parameters, setting  # noqa: E402
from lincorr.cache import HASHES, MODELS, cache_root  # noqa: E402
from lincorr.models import LM, load_model  # noqa: E402
from lincorr.reproduce import steps as step_registry  # noqa: E402
from lincorr.reproduce.claims import known_papers, load_paper  # noqa: E402
from lincorr.reproduce.runner import reproduce  # noqa: E402


@dataclasses.dataclass
class Work:
    """What went through the model: tokens forward, tokens forward with gradients, full-vocabulary rows, FLOPs."""

    tokens: int = 0
    grad_tokens: int = 0
    vocab_rows: int = 0
    flops: float = 0.0

    def minus(self, other: Work) -> Work:
        return Work(*(getattr(self, f.name) - getattr(other, f.name) for f in dataclasses.fields(self)))


class Counter:
    """Global module hooks that add every forward of the model's body and every full-vocabulary unembedding to `work`."""

    def __init__(self, lm: LM):
        config = getattr(lm.model.config, "text_config", None) or lm.model.config
        self.per_token = 2 * linear_parameters(config)
        heads, d = setting(config, "num_attention_heads"), setting(config, "hidden_size")
        self.attention = 2 * 2 * setting(config, "num_hidden_layers") * heads * (setting(config, "head_dim") or d // heads)
        self.unembed = 2 * d * lm.model.get_output_embeddings().weight.shape[0]
        self.vocab = lm.model.get_output_embeddings().weight.shape[0]
        self.work = Work()
        counter = self
        # Plain functions, not bound methods: a deep copy of the model (training, mixed weights) keeps a function as it is,
        # so every copy counts into this counter; a bound method would be copied with a counter of its own.
        self.handles = [lm.model.base_model.register_forward_hook(lambda m, a, k, o: counter.body_hook(a, k, o), with_kwargs=True),
                        lm.model.get_output_embeddings().register_forward_hook(lambda m, a, o: counter.head_hook(m, a, o))]
        self.head_logits = LM.head_logits

        def counted_head_logits(lm_self, hidden, token_ids=None):
            if token_ids is None:
                counter.add_rows(hidden.reshape(-1, hidden.shape[-1]).shape[0], hidden.requires_grad)
            return counter.head_logits(lm_self, hidden, token_ids)

        LM.head_logits = counted_head_logits

    def body_hook(self, args, kwargs, output):
        ids = kwargs.get("input_ids", args[0] if args else None)
        embeds = kwargs.get("inputs_embeds")
        mask = kwargs.get("attention_mask")
        shape = (ids if ids is not None else embeds).shape[:2]
        lengths = mask.sum(1).float() if mask is not None and mask.dim() == 2 else torch.full((shape[0],), float(shape[1]))
        tokens = int(lengths.sum())
        flops = self.per_token * tokens + self.attention * float((lengths * (lengths + 1) / 2).sum())
        hidden = output[0] if isinstance(output, tuple) else output.last_hidden_state
        grad = hidden.requires_grad  # a backward will (or may) run through this forward
        self.work.tokens += tokens
        self.work.grad_tokens += tokens if grad else 0
        self.work.flops += flops * (3 if grad else 1)

    def head_hook(self, module, args, output):
        if getattr(module, "out_features", None) == self.vocab:
            self.add_rows(args[0].reshape(-1, args[0].shape[-1]).shape[0], torch.is_grad_enabled() and output.requires_grad)

    def add_rows(self, rows: int, grad: bool) -> None:
        self.work.vocab_rows += rows
        self.work.flops += rows * self.unembed * (3 if grad else 1)

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()
        LM.head_logits = self.head_logits


def measured_claims(paper: str, only: set[str] | None) -> list[str]:
    """The claims of `paper` that a quick run measures on one model (a step, quick settings, no second checkpoint)."""
    return [c.id for c in load_paper(paper).claims
            if c.step and c.settings_for("quick") is not None and not c.eval_model and (not only or c.id in only)]


def timed_steps(counter: Counter, claim_ids: list[str], peak: float, total: list[float], device: torch.device) -> None:
    """Wrap every step so that each call prints its claim's row as it ends (claims run in the order of `claim_ids`)."""
    for name, step in list(step_registry.STEPS.items()):
        def timed(ctx, step=step, name=name):
            synchronize(device)
            before, started = dataclasses.replace(counter.work), time.perf_counter()
            try:
                return step(ctx)
            finally:
                synchronize(device)
                seconds, work = time.perf_counter() - started, counter.work.minus(before)
                bound = work.flops / peak
                total[0], total[1] = total[0] + seconds, total[1] + bound
                print(f"{claim_ids.pop(0) if claim_ids else '(not in the cold run)':<36}{name:<24}{seconds:>8.1f}{work.tokens:>9,}{work.grad_tokens:>9,}{work.vocab_rows:>11,}"
                      f"{work.flops / 1e9:>9.1f}{bound:>9.2f}{bound / max(seconds, 1e-9):>7.1%}", flush=True)
        timed.__module__ = step.__module__  # the runner keys a claim by its step's module
        step_registry.STEPS[name] = timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m-q4km")
    parser.add_argument("--papers", default=",".join(known_papers()), help="comma-separated papers (default: all)")
    parser.add_argument("--only", default="", help="comma-separated claim ids (default: every measured claim of --papers)")
    parser.add_argument("--keep-cache", default=None, metavar="DIR",
                        help="measure into this new cache directory and keep it (a later `lincorr reproduce` with "
                             "LINCORR_CACHE_DIR=DIR reads every claim from it) instead of a temporary one")
    parser.add_argument("--device", default=None, help="torch device (default: cpu)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    args = parser.parse_args()
    only = {part.strip() for part in args.only.split(",") if part.strip()} or None
    papers = [p for p in args.papers.split(",") if p and measured_claims(p, only)]
    lm = load_model(args.model, device=args.device, dtype=args.dtype)
    peak = matmul_flops(device=str(lm.device), dtype=lm.model.dtype)
    real = cache_root()
    if args.keep_cache:
        Path(args.keep_cache).mkdir(parents=True)  # new: a cold run starts from nothing
    os.environ["LINCORR_CACHE_DIR"] = fresh = args.keep_cache or tempfile.mkdtemp(prefix="bench-reproduce-")
    for name in (MODELS, HASHES):
        if (real / name).exists():
            (Path(fresh) / name).symlink_to(real / name)
    counter, claim_ids, total = Counter(lm), [], [0.0, 0.0]
    timed_steps(counter, claim_ids, peak, total, lm.device)
    print(f"model {args.model}, {args.dtype} on {lm.device}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"matmul {peak / 1e9:.1f} GFLOP/s (best of 5)")
    print(f"{'claim':<36}{'step':<24}{'wall s':>8}{'tokens':>9}{'w/ grad':>9}{'vocab rows':>11}{'GFLOP':>9}{'bound s':>9}{'ratio':>7}")
    started = time.perf_counter()
    try:
        for paper in papers:
            claim_ids[:] = measured_claims(paper, only)
            reproduce(paper, lm, only=",".join(claim_ids))
        cold = time.perf_counter() - started
        started = time.perf_counter()
        for paper in papers:  # every claim cached: what a rerun costs, the model's load included
            reproduce(paper, load_model(args.model, device=args.device, dtype=args.dtype), only=",".join(measured_claims(paper, only)))
        cached = time.perf_counter() - started
    finally:
        counter.close()
        if not args.keep_cache:
            shutil.rmtree(fresh, ignore_errors=True)
    print(f"{', '.join(papers)}: cold {cold:.1f} s (the model loaded before), cached {cached:.1f} s (the model's load included)")
    print(f"{'total':<60}{total[0]:>8.1f}{'':>38}{total[1]:>9.2f}{total[1] / max(total[0], 1e-9):>7.1%}")


if __name__ == "__main__":
    main()
