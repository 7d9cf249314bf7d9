"""A saved tiny model with custom city/country domain files and an inputs file, and the `lincorr fit` command over it."""

from __future__ import annotations

from pathlib import Path

from helpers.tiny import CITIES, COUNTRIES, NAMES, tiny_llama


def write_fit_workspace(directory: Path, tokenizer) -> Path:
    model_dir = directory / "model"
    tiny_llama(len(tokenizer)).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    (directory / "cities.txt").write_text("\n".join(CITIES), encoding="utf-8")
    (directory / "countries.txt").write_text("\n".join(COUNTRIES), encoding="utf-8")
    (directory / "inputs.txt").write_text("\n".join(NAMES[:60]), encoding="utf-8")
    return directory


def fit_args(ws: Path, *extra: str) -> list[str]:
    return [
        "fit", "city", "country", "--model", str(ws / "model"), "--inputs", str(ws / "inputs.txt"),
        "--source-template", "{} lives in the city of", "--source-domain", str(ws / "cities.txt"),
        "--target-template", "{} lives in the country of", "--target-domain", str(ws / "countries.txt"), "--quiet", *extra,
    ]
