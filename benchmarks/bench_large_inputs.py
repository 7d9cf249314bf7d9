"""Large inputs: an LRE relation file read, paired and bound to a tokenizer in time linear in its samples.

    python benchmarks/bench_large_inputs.py [--samples 200000] [--budget 5]

Two relations of each size, written as LRE files: "one subject" gives a single subject every object
(where pairing was quadratic: 100,000 samples took 65 s), "distinct" gives each sample its own subject
and object (where matching the pairs to a domain was pairs x domain). Each is read
(`read_lre_relation`), paired (`LreRelation.pairs`), made a registry (`lre_registry`) and bound
(`bind_relation`: both domains tokenized, the pairs matched) to a word-level tokenizer over its
words, with no model. The sizes double up to `--samples`; linear work takes about twice as long at
each doubling, quadratic work four times. Seconds are this process's CPU time, so that a machine
shared with other jobs (whose wall-clock seconds stretch with its load) measures the same work. Exits 1 when a doubling ratio exceeds 3, or when lincorr's own work on the largest
relation (read, pairs, registry: everything but the tokenizer's calls) takes longer than `--budget`
seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from lincorr.knowledge.lre import lre_registry, read_lre_relation
from lincorr.relations import bind_relation

SHAPES = ("one subject", "distinct")
WORST_RATIO = 3.0  # between linear (2) and quadratic (4) growth per doubling


def samples(shape: str, n: int) -> list[dict[str, str]]:
    if shape == "one subject":
        return [{"subject": "Atlantis", "object": f"City{i}"} for i in range(n)]
    return [{"subject": f"Land{i}", "object": f"City{i}"} for i in range(n)]


def write_relation(path: Path, shape: str, n: int) -> Path:
    path.write_text(json.dumps({"name": path.stem, "prompt_templates": ["The capital city of {} is"],
                                "properties": {"relation_type": "factual", "domain_name": "country", "range_name": "city"},
                                "samples": samples(shape, n)}), encoding="utf-8")
    return path


def word_tokenizer(relation) -> PreTrainedTokenizerFast:
    """One token per word of the relation: every subject and object is a whole-word first token."""
    words = dict.fromkeys(word for sample in relation.samples for word in sample)
    vocab = {token: i for i, token in enumerate(["<pad>", "<unk>", *words])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>")


def timed_path(path: Path) -> dict[str, float]:
    """CPU seconds of each stage from the file to the bound relation (the tokenizer is built outside the timing)."""
    seconds, started = {}, time.process_time()
    relation = read_lre_relation(path)
    seconds["read"] = time.process_time() - started
    started = time.process_time()
    pairs = relation.pairs()
    seconds["pairs"] = time.process_time() - started
    started = time.process_time()
    registry, (spec,) = lre_registry([relation])
    seconds["registry"] = time.process_time() - started
    tokenizer = word_tokenizer(relation)
    started = time.process_time()
    bound = bind_relation(registry, spec, tokenizer)
    seconds["bind"] = time.process_time() - started
    assert len(bound.match.entries) == len(pairs), "every pair binds: the benchmark measures the whole path"
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200_000, help="samples of the largest relation")
    parser.add_argument("--budget", type=float, default=5.0,
                        help="seconds the largest relation may take from the file to its registry, each shape")
    args = parser.parse_args()
    sizes = [args.samples // 8, args.samples // 4, args.samples // 2, args.samples]
    failed = False
    print("CPU seconds of each stage")
    print(f"{'shape':<12} {'samples':>8} {'read':>7} {'pairs':>8} {'registry':>10} {'bind':>7} {'total':>8} {'x previous':>10}")
    with tempfile.TemporaryDirectory() as directory:
        for shape in SHAPES:
            previous = None
            for n in sizes:
                seconds = timed_path(write_relation(Path(directory) / f"{shape.replace(' ', '_')}_{n}.json", shape, n))
                total = sum(seconds.values())
                ratio = total / previous if previous else float("nan")
                own = total - seconds["bind"]
                failed |= ratio > WORST_RATIO or (n == args.samples and own > args.budget)
                print(f"{shape:<12} {n:>8,} {seconds['read']:7.2f} {seconds['pairs']:8.3f} {seconds['registry']:10.3f} "
                      f"{seconds['bind']:7.2f} {total:8.2f} {ratio:10.2f}")
                previous = total
    print(f"linear work doubles per doubling of the samples (quadratic: x4); limits: x{WORST_RATIO:g} per doubling, "
          f"{args.budget:g} s from the file to the registry at {args.samples:,} samples: {'EXCEEDED' if failed else 'held'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
