"""How logit tables are collected: one frozen settings type, whose fields are also the commands' collection options."""

from __future__ import annotations

import dataclasses

from lincorr.errors import UsageError

# --batch-size auto: on a GPU, the largest batch that fits, measured, and at most this many tokens per
# forward pass (past that a GPU is saturated and a bigger batch only holds more memory). On a CPU the
# batch that was fastest on this project's machine (docs/benchmarks.md): memory never binds there.
MAX_BATCH_TOKENS = 65536
CPU_BATCH_SIZE = 128


def option(name: str, help_text: str) -> dict:
    """A field's command-line option and its help: written once, here, for every command that collects."""
    return {"option": name, "help": help_text}


@dataclasses.dataclass(frozen=True)
class CollectSettings:
    """The batch size, the score, the cache and the forward of a collection; all but `use_cache` change the numbers."""

    batch_size: int | str = dataclasses.field(default=CPU_BATCH_SIZE, metadata=option(
        "--batch-size", f"prompts per forward pass, or auto: on a GPU the largest batch that fits (measured, at most {MAX_BATCH_TOKENS:,} "
                        f"tokens), on a CPU {CPU_BATCH_SIZE} (part of a cached table's key: it changes logits by ~1e-5)"))
    logprobs: bool = dataclasses.field(default=False, metadata=option(
        "--logprobs", "log-softmax over the full vocabulary instead of raw logits"))
    use_cache: bool = dataclasses.field(default=True, metadata=option(
        "--no-cache", "recompute logit tables and study rows instead of reusing cached ones"))
    compile: bool = dataclasses.field(default=False, metadata=option(
        "--compile", "collect through torch.compile: about 1.1x faster on a CPU after a 1-2 minute compile; "
                     "for sweeps of many tables (compiled tables are cached apart)"))

    def __post_init__(self) -> None:
        if self.batch_size != "auto" and not (isinstance(self.batch_size, int) and self.batch_size >= 1):
            raise UsageError(f"batch size must be a positive whole number or 'auto', got {self.batch_size!r}")

    @property
    def kind(self) -> str:
        """What a table holds: "logits" (the paper's default) or "logprobs"."""
        return "logprobs" if self.logprobs else "logits"

    def key(self) -> dict:
        """The settings that change the numbers, for the key of a stored study row collected under them."""
        return {"batch_size": self.batch_size, "logprobs": self.logprobs, "compile": self.compile}


UNCACHED = CollectSettings(use_cache=False)  # scores of a throwaway (trained) copy of a model
