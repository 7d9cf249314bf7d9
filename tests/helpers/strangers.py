"""Run directories whose words, prompts and names carry HTML, as a stranger could write them: for the report's tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

# Words a stranger could put in a run: each would be a link, an image, a script, bold or a line break if plotly read it as HTML.
SOURCE_WORDS = {
    "Paris": 'Paris <a href="https://example.org/">click</a>',
    "London": "London <img src=x onerror=\"document.title='pwned'\">",
    "Tokyo": "Tokyo <script>document.title='pwned'</script>",
    "Rome": "<b>Rome</b> & <i>co</i>",
    "Berlin": "Berlin &lt;br&gt; costs $5 or $6",
}
TARGET_WORDS = {
    "France": "France <a href='javascript:alert(1)'>x</a>",
    "England": "England<br>line",
    "Japan": "Japan <img src=x>",
    "Italy": "<sup>Italy</sup>",
    "Germany": 'Germany <span style="font-size:80px">big</span>',
}
PROMPTS = {"tiny_city": '<a href="https://example.org/">city</a>', "tiny_country": "<b>country</b>", "tiny_capital": "<script>capital</script>"}


def renamed(value, names: dict):
    """`value` (parsed JSON) with every string and key that is one of `names` replaced by its stranger's version."""
    if isinstance(value, dict):
        return {names.get(key, key): renamed(item, names) for key, item in value.items()}
    if isinstance(value, list):
        return [renamed(item, names) for item in value]
    return names.get(value, value) if isinstance(value, str) else value


def rewrite_json(path: Path, change) -> None:
    path.write_text(json.dumps(change(json.loads(path.read_text(encoding="utf-8"))), ensure_ascii=False), encoding="utf-8")


def write_runs_with_strangers_words(tiny_runs, root: Path) -> dict[str, Path]:
    """Copies of the fit, matrix and lens runs whose words, prompts, templates, curve names and model carry HTML."""
    runs = {name: Path(shutil.copytree(tiny_runs[name], root / name)) for name in ("fit", "matrix", "lens")}
    rewrite_json(runs["fit"] / "result.json", lambda result: {
        **renamed(result, SOURCE_WORDS | TARGET_WORDS), "model": "tiny <b>model</b>", "source": PROMPTS["tiny_city"]})
    rewrite_json(runs["matrix"] / "matrix.json", lambda matrix: {
        **renamed(matrix, PROMPTS), "templates": {PROMPTS[name]: f"{{}} <b>{name}</b> <a href='https://example.org/'>is</a>"
                                                  for name in matrix["templates"]}})
    rewrite_json(runs["lens"] / "lens.json", lambda lens: {
        **renamed(lens, {"argument_rr": "<a href='https://example.org/'>argument</a>_rr"}), "task": "<b>capitals</b>"})
    return runs
