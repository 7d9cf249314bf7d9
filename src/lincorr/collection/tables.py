"""Logit tables: each prompt's last-token scores over its domain for many inputs, batched, checked and cached on disk."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Mapping, Sequence

import numpy as np

from lincorr import recording
from lincorr.cache import TableStore, key_digest
from lincorr.collection.forward import auto_batch_size, forward_key
from lincorr.collection.pieces import CollectionJob, collect_jobs
from lincorr.collection.settings import UNCACHED, CollectSettings
from lincorr.domains import Domain
from lincorr.errors import DataError, DeviceError, InputError
from lincorr.models import LM, compile_forward, tokenize_prompts
from lincorr.prompts import Prompt
from lincorr.provenance import note
from lincorr.templates import fill, validate_template

# Inputs X are names, words or short phrases. A batch is padded to its longest prompt, so one long
# line (a pasted paragraph) would make every prompt of its batch that long: refused instead.
MAX_INPUT_TOKENS = 64

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class LogitTable:
    """One prompt's last-token scores over its answer domain: `values` is `[n_inputs, n_domain]`."""

    values: np.ndarray
    inputs: tuple[str, ...]
    template: str
    domain: Domain
    kind: str  # "logits" (the paper's default) or "logprobs" (log-softmax over the full vocabulary)
    model: str  # the model's fingerprint


def collect(lm: LM, prompts: Mapping[str, Prompt], inputs: Sequence[str], settings: CollectSettings = CollectSettings()
            ) -> dict[str, LogitTable]:
    """Each prompt's table over the same `inputs`, by the names of `prompts`: values `[n_inputs, n_domain]`.

    Prompts run in length-sorted, left-padded batches; only the last position and only the
    domain rows of the unembedding are computed. With `settings.use_cache` finished tables are
    reused and an interrupted run resumes from its finished pieces; the missing tables are
    collected together (and shared out in a torchrun team). Two names for one prompt collect it once.
    """
    if settings.compile and lm.compiled_body is None:
        compile_forward(lm)
    batch_size = resolved_batch_size(lm, prompts, inputs, settings)
    note("batch_sizes", lm.name, batch_size)
    store = TableStore() if settings.use_cache else None
    jobs = {name: new_job(lm, prompt, inputs, settings.logprobs, batch_size) for name, prompt in prompts.items()}
    found = {name: store.load(job.key) if store is not None else None for name, job in jobs.items()}
    missing = list({key_digest(jobs[name].key): name for name, values in found.items() if values is None}.values())
    collected: dict[str, np.ndarray] = {}
    if missing:
        description = f"{len(missing)} table{'s' if len(missing) > 1 else ''} ({', '.join(missing)})"[:60]
        with recording.window() as ran:
            computed = collect_jobs(lm, [jobs[name] for name in missing], store, description)
        for name, values in zip(missing, computed):
            collected[key_digest(jobs[name].key)] = checked_values(jobs[name], values)
            if store is not None and ran.complete:
                store.store(jobs[name].key, collected[key_digest(jobs[name].key)], ran.record)
    tables = {name: values if values is not None else collected[key_digest(jobs[name].key)] for name, values in found.items()}
    return {name: LogitTable(tables[name], jobs[name].inputs, prompt.template, prompt.domain, settings.kind, lm.fingerprint)
            for name, prompt in prompts.items()}


def entity_logits(lm: LM, prompt: Prompt, entities: Sequence[str]) -> np.ndarray:
    """Scores of `prompt` over its domain for each entity `[n_entities, n_domain]`, never cached (a trained copy is throwaway)."""
    return collect(lm, {prompt.name: prompt}, entities, UNCACHED)[prompt.name].values


def resolved_batch_size(lm: LM, prompts: Mapping[str, Prompt], inputs: Sequence[str], settings: CollectSettings) -> int:
    """The batch size of `settings`, with "auto" measured on the widest domain and every prompt (`forward.auto_batch_size`)."""
    if isinstance(settings.batch_size, int):  # else "auto"
        return settings.batch_size
    if not inputs:
        return 1  # refused by `new_job` with the reason
    rows = [row for prompt in prompts.values() for row in tokenize_prompts(lm.tokenizer, [fill(prompt.template, x) for x in inputs])]
    widest = max((prompt.domain for prompt in prompts.values()), key=len)
    batch_size = auto_batch_size(lm, rows, widest.token_ids, settings.logprobs)
    log.info("--batch-size auto: %d prompts per forward pass", batch_size)
    return batch_size


def table_key(lm: LM, template: str, domain: Domain, inputs: Sequence[str], kind: str, batch_size: int) -> dict:
    """Everything that determines a table's numbers.

    The batch size is part of it: a prompt's logits depend on the batch it runs in by about 1e-5
    (matrix kernels and padding widths change with the batch), so a table is reused only by runs
    that would compute it bit for bit.
    """
    return {
        **forward_key(lm),
        "template": template,
        "token_ids": list(domain.token_ids),
        "inputs_sha256": hashlib.sha256("\n".join(inputs).encode()).hexdigest(),
        "n_inputs": len(inputs),
        "kind": kind,
        "batch_size": batch_size,
    }


def new_job(lm: LM, prompt: Prompt, inputs: Sequence[str], logprobs: bool, batch_size: int) -> CollectionJob:
    """The job for one table, after checking what the caller passed."""
    validate_template(prompt.template)
    if not inputs:
        raise DataError("no inputs to collect logits for; pass at least one input X")
    inputs = tuple(inputs)
    check_input_lengths(lm.tokenizer, inputs)
    key = table_key(lm, prompt.template, prompt.domain, inputs, "logprobs" if logprobs else "logits", batch_size)
    return CollectionJob(key, prompt.template, inputs, tuple(prompt.domain.token_ids), logprobs, batch_size)


def check_input_lengths(tokenizer, inputs: Sequence[str]) -> None:
    """Refuse an input X longer than MAX_INPUT_TOKENS tokens, before any forward pass."""
    lengths = [len(ids) for ids in tokenizer(list(inputs), add_special_tokens=False)["input_ids"]]
    longest = int(np.argmax(lengths))
    if lengths[longest] > MAX_INPUT_TOKENS:
        shown = inputs[longest] if len(inputs[longest]) <= 40 else inputs[longest][:40] + "..."
        raise InputError(f"input {longest + 1} ({shown!r}) is {lengths[longest]} tokens long; an input X is a name or a short phrase "
                           f"of at most {MAX_INPUT_TOKENS} tokens: shorten or remove it")


def checked_values(job: CollectionJob, values: np.ndarray) -> np.ndarray:
    """Refuse a table with NaN/inf rows (a half-precision model that overflowed)."""
    bad = ~np.isfinite(values).all(axis=1)
    if bad.any():
        example = job.inputs[int(np.argmax(bad))]
        raise DeviceError(f"the model gave NaN/inf scores for {int(bad.sum())} inputs (e.g. {example!r}); load it with --dtype float32")
    return values
