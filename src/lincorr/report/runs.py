"""Reading run directories: which study wrote a directory (as its provenance.json records) and what of it to show.

Each study has a reader (report/logits.py, training.py, vectors.py, extractive.py, one module per
system) that turns the files of its `save` into a `Section`; none imports the study, so a report
can be made from any saved directory, also one written by an older lincorr. A directory names its
study in provenance.json (`study`); for one saved before lincorr recorded it, the study is known
by the file its `save` always writes, and a logit-lens result by its content
(`vectors.lens_curves`). Any other directory lincorr wrote (it holds lincorr's output marker or a
provenance.json) gets a plain section: the scalar fields of its JSON files and its PNGs, inlined.

Only a directory that shows it is lincorr's (a file a reader knows, the output marker, a
provenance.json) has its other JSON files read at all, and every file goes through `files`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from lincorr.errors import InputError
from lincorr.filesystem import OUTPUT_MARKER
from lincorr.reading import read_json
from lincorr.report import extractive, logits, training, vectors
from lincorr.report.files import WHAT, read_picture
from lincorr.report.page import KeyNumbers, Picture, Section
from lincorr.report.sections import read_provenance, recorded_study, scalar_fields

Reader = Callable[[Path], Section]

# The study each provenance.json names (`lincorr.studies.RESULT_TYPES`), and how to read its directory.
STUDY_READERS: dict[str, Reader] = {
    "fit": logits.read_pair, "matrix": logits.read_matrix, "precision": logits.read_precision,
    "precision-curve": logits.read_precision_curve, "cases": logits.read_cases, "resilience": logits.read_resilience,
    "scale": logits.read_scale,
    "gradcorr": training.read_gradcorr, "generalize": training.read_generalization, "generalize-table5": training.read_table5,
    "predict-edit": training.read_prediction, "subwords": training.read_subwords, "ablate-table7": training.read_table7,
    "ablate-widths": training.read_widths,
    "lens": vectors.read_lens_run, "ovector": vectors.read_ovector, "ffn-ablate": vectors.read_ffn_ablation,
    "ovector-w": vectors.read_ovector_w,
    "extractive-ocr": extractive.read_ocr, "extractive-scores": extractive.read_extractive_scores,
    "extractive-freeze": extractive.read_freeze, "extractive-ordering": extractive.read_ordering,
    "extractive-graft": extractive.read_graft, "extractive-predict": extractive.read_extractive_predict,
}

# For directories saved before provenance.json named the study: the file each study's `save` always writes.
READERS: tuple[tuple[tuple[str, ...], Reader], ...] = (
    (("W.npy", "result.json"), logits.read_pair),
    (("matrix.json",), logits.read_matrix),
    (("resilience.json",), logits.read_resilience),
    (("precision.json",), logits.read_precision),
    (("scale.json",), logits.read_scale),
    (("cases.json",), logits.read_cases),
    (("gradcorr.json",), training.read_gradcorr),
    (("table5.json",), training.read_table5),
    (("facts.json", "result.json"), training.read_generalization),
    (("subwords.json",), training.read_subwords),
    (("prediction.json",), training.read_prediction),
    (("table7.json",), training.read_table7),
    (("scores.json",), extractive.read_extractive_scores),
    (("ocr.json",), extractive.read_ocr),
)


def read_other(directory: Path, others: Mapping[Path, object]) -> Section:
    """A directory of a study the report has no view of: the scalar fields of its JSON files (`others`, read), and its PNGs."""
    documents = {path.name: document for path, document in others.items() if isinstance(document, dict)}
    numbers = tuple(item for name, document in documents.items() for item in scalar_fields(document, f"{name}: "))
    blocks = ([KeyNumbers(numbers)] if numbers else []) + [Picture(path.name, read_picture(path)) for path in sorted(directory.glob("*.png"))]
    model = next((document["model"] for document in documents.values() if isinstance(document.get("model"), str)), None)
    return Section(f"{directory.name}{f' on {model}' if model else ''}", "other", str(directory),
                   read_provenance(directory, next(iter(documents.values()), {}), model=model), tuple(blocks))


def read_run(directory) -> tuple[Section, ...]:
    """The sections of one run directory (usually one); an InputError when it holds no lincorr result or a file that cannot be read."""
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(f"{directory} is not a directory; pass the --out or --save-dir directory of a lincorr run")
    study = recorded_study(directory)
    if study in STUDY_READERS:
        return (STUDY_READERS[study](directory),)
    return read_by_files(directory)


def read_by_files(directory: Path) -> tuple[Section, ...]:
    """A directory that names no study (saved before lincorr recorded it, or by a study this report does not know): known by its files."""
    # A reader's file is looked for by name alone: one that is a directory or a FIFO is refused when read, not passed over.
    found = [(files, reader) for files, reader in READERS if all((directory / name).exists() for name in files)]
    if not found and not any((directory / name).exists() for name in (OUTPUT_MARKER, "provenance.json")):
        raise InputError(f"{directory} is not a lincorr run directory: it holds no file a lincorr command writes (result.json, "
                         "matrix.json, precision.json, provenance.json, ...); pass the --out or --save-dir directory of a lincorr command")
    sections = [reader(directory) for _, reader in found]
    read = {name for files, _ in found for name in files} | {"provenance.json"}
    others = {path: read_json(path, WHAT) for path in sorted(directory.glob("*.json")) if path.name not in read}
    sections += [vectors.read_lens(directory, path, document) for path, document in others.items() if vectors.lens_curves(document)]
    return tuple(sections) or (read_other(directory, others),)
