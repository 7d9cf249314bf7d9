"""One contract for every result: a study name, summary, text and save, and `lincorr.load_result` giving the typed result back.

`tiny_runs` (conftest) holds one saved run per result type: the CLI's on a tiny Llama where a
command runs quickly, planted results saved by their study's `.save` otherwise.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from helpers.runs import FIGURES, STUDIES

import lincorr
from lincorr import strict_json
from lincorr.errors import InputError
from lincorr.studies import RESULT_TYPES, load_result, result_type

SOURCE = Path(lincorr.__file__).parent
# The file each study writes its summary into, and where in it the summary's content sits (None: the whole summary is there).
SUMMARY_FILES = {
    "fit": ("result.json", None), "matrix": ("matrix.json", None), "precision": ("precision.json", None),
    "precision-curve": ("precision_curve.json", None), "lre": ("lre.json", None), "cases": ("cases.json", "tables"), "resilience": ("resilience.json", None),
    "scale": ("scale.json", None), "gradcorr": ("gradcorr.json", None), "generalize": ("result.json", None),
    "generalize-table5": ("table5.json", "rows"), "predict-edit": ("prediction.json", None), "subwords": ("subwords.json", None),
    "ablate-table7": ("table7.json", "rows"), "ablate-widths": ("widths.json", "rows"), "lens": ("lens.json", None),
    "ovector": ("ovector.json", None), "ffn-ablate": ("ffn_ablation.json", None), "ovector-w": ("ovector_w.json", None),
    "extractive-ocr": ("ocr.json", None), "extractive-scores": ("scores.json", None), "extractive-freeze": ("freeze.json", None),
    "extractive-ordering": ("ordering.json", None), "extractive-graft": ("graft.json", None), "extractive-predict": ("ocr_prediction.json", None),
    "reproduce": ("reproduction.json", None), "ripple": ("ripple.json", None),
}


def without_reasons(value):
    """JSON without its "undefined" explanations, which strict JSON attaches to whichever object it writes."""
    if isinstance(value, dict):
        return {key: without_reasons(item) for key, item in value.items() if key != "undefined"}
    if isinstance(value, list):
        return [without_reasons(item) for item in value]
    return value


def saving_classes() -> set[str]:
    """"module:Class" of every class in the studies, the core fit, the reproductions and the ripple benchmark that defines
    `save`."""
    found = set()
    for path in [SOURCE / "fit.py", *sorted((SOURCE / "studies").rglob("*.py")), *sorted((SOURCE / "reproduce").rglob("*.py")),
                 *sorted((SOURCE / "ripple").rglob("*.py"))]:
        module = ".".join(("lincorr", *path.relative_to(SOURCE).with_suffix("").parts))
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and any(isinstance(item, ast.FunctionDef) and item.name == "save" for item in node.body):
                found.add(f"{module}:{node.name}")
    return found


def test_the_registry_names_every_result_type_that_saves_under_its_own_study():
    assert set(RESULT_TYPES.values()) == saving_classes()
    for study in RESULT_TYPES:
        kind = result_type(study)
        assert kind.study == study and all(callable(getattr(kind, name)) for name in ("summary", "text", "save", "load"))


def test_every_result_type_has_a_saved_run_and_a_summary_file(tiny_runs):
    assert sorted(STUDIES.get(name, name) for name in tiny_runs) == sorted(RESULT_TYPES) == sorted(SUMMARY_FILES)


@pytest.mark.parametrize("name", FIGURES)
def test_a_saved_run_loads_back_as_its_typed_result_and_round_trips(tiny_runs, name, tmp_path):
    study = STUDIES.get(name, name)
    result = load_result(tiny_runs[name])
    assert type(result) is result_type(study) and result.text().strip()
    summary = without_reasons(json.loads(strict_json.dumps(result.summary())))
    # What load gives back is what the study saved ...
    file, key = SUMMARY_FILES[study]
    saved = without_reasons(json.loads((tiny_runs[name] / file).read_text(encoding="utf-8")))
    expected = summary[key] if key else summary
    assert (saved if key else {k: saved[k] for k in expected}) == expected
    # ... and saving it again and loading that gives the same summary.
    result.save(tmp_path / "again")
    again = load_result(tmp_path / "again")
    assert without_reasons(json.loads(strict_json.dumps(again.summary()))) == summary
    assert json.loads((tmp_path / "again" / "provenance.json").read_text(encoding="utf-8"))["study"] == study


def test_a_directory_without_its_result_is_one_clear_error(tiny_runs, tmp_path):
    with pytest.raises(InputError, match="holds no provenance.json"):
        load_result(tmp_path)
    (tmp_path / "provenance.json").write_text(json.dumps({"command": None}), encoding="utf-8")
    with pytest.raises(InputError, match="did not record its study"):
        load_result(tmp_path)
    (tmp_path / "provenance.json").write_text(json.dumps({"study": "tea-leaves"}), encoding="utf-8")
    with pytest.raises(InputError, match="no lincorr study is called 'tea-leaves'"):
        load_result(tmp_path)
    (tmp_path / "provenance.json").write_text(json.dumps({"study": "matrix"}), encoding="utf-8")
    (tmp_path / "result_state.json").write_text(json.dumps({"study": "lens", "fields": {}}), encoding="utf-8")
    with pytest.raises(InputError, match="does not hold a 'matrix' result"):
        load_result(tmp_path)
    (tmp_path / "result_state.json").write_text(json.dumps({"study": "matrix", "fields": {"grid": 3}}), encoding="utf-8")
    with pytest.raises(InputError, match="is not what lincorr writes"):
        load_result(tmp_path)
