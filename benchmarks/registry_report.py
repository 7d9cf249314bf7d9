"""Regenerate the survival tables in docs/registry.md: domain words kept by each bundled tokenizer.

Usage: python benchmarks/registry_report.py [--cache DIR] [--json FILE]
Loads the bundled models' tokenizers (gemma-3-270m-q4km, smollm2-135m-instruct-q41) offline from their verified GGUF files
(saved under --cache after the first run, since reading gemma's GGUF takes ~20 s) and prints
one Markdown table per family with the number of words kept out of the domain size, then one for
the relational tasks with the number of pairs kept (`vector_tasks.bind_task`).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from transformers import AutoTokenizer  # noqa: E402

from lincorr.bundled import assembled_gguf, catalogue  # noqa: E402
from lincorr.tasks import task_survival  # noqa: E402
from lincorr.knowledge import load_registry  # noqa: E402
from lincorr.knowledge.report import domains_report  # noqa: E402


def gguf_location(model: str) -> tuple[Path, str]:
    """Directory and file name of a bundled model's GGUF, assembled from its packages and checked against its sha256."""
    path = assembled_gguf(catalogue()[model])
    return path.parent, path.name


def load_tokenizer(model: str, cache: Path):
    """The model's tokenizer, from the cache directory when an earlier run saved it there."""
    saved = cache / model
    if (saved / "tokenizer.json").exists():
        return AutoTokenizer.from_pretrained(str(saved))
    directory, file_name = gguf_location(model)
    tokenizer = AutoTokenizer.from_pretrained(str(directory), gguf_file=file_name)
    tokenizer.save_pretrained(str(saved))
    return tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "lincorr" / "tokenizers")
    parser.add_argument("--json", type=Path, help="also write the full reports (dropped words and reasons) here")
    args = parser.parse_args()
    registry = load_registry()
    models = ["gemma-3-270m-q4km", "smollm2-135m-instruct-q41"]
    tokenizers = {model: load_tokenizer(model, args.cache) for model in models}
    reports = {model: domains_report(registry, tokenizers[model]) for model in models}
    tasks = {model: [task_survival(spec, tokenizers[model]) for spec in registry.tasks] for model in models}
    if args.json:
        args.json.write_text(json.dumps({"domains": reports, "tasks": tasks}, ensure_ascii=False, indent=1), encoding="utf-8")
    for family in registry.families():
        print(f"\n#### {family}\n")
        print("| prompt | domain | size | " + " | ".join(f"{m} kept (whole/phrase)" for m in models) + " |")
        print("|---|---|---:|" + "---:|" * len(models))
        rows = zip(*(reports[m] for m in models))
        for per_model in rows:
            if per_model[0]["family"] != family:
                continue
            cells = []
            for row in per_model:
                counts = row["category_counts"]
                split = f" ({counts['whole_word']}/{counts['word_in_phrase']})" if counts else ""
                cells.append(f"{row['kept']} = {row['kept_fraction']:.0%}{split}")
            first = per_model[0]
            print(f"| {first['name']} | {first['domain']} | {first['domain_size']} | " + " | ".join(cells) + " |")
    print("\n#### tasks\n")
    print("| task | pairs | " + " | ".join(f"{m} kept (answer starts with a whole word)" for m in models) + " |")
    print("|---|---:|" + "---:|" * len(models))
    for per_model in zip(*(tasks[m] for m in models)):
        cells = [f"{row['kept']} = {row['kept'] / row['n_pairs']:.0%} ({row['whole_word_answers']})" for row in per_model]
        print(f"| {per_model[0]['task']} | {per_model[0]['n_pairs']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
