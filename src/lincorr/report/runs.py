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
from lincorr.results import STATE_FILE
from lincorr.report import extractive, logits, reproduction, ripple, training, vectors
from lincorr.report.files import ANY, read_document, read_picture
from lincorr.report.page import KeyNumbers, Picture, Section
from lincorr.report.sections import read_provenance, recorded_study, scalar_fields

Reader = Callable[[Path], Section]

# The study each provenance.json names (`lincorr.studies.RESULT_TYPES`): the file its `save` always writes, and how to read its directory.
STUDY_READERS: dict[str, tuple[tuple[str, ...], Reader]] = {
    "fit": (("W.npy", "result.json"), logits.read_pair),
    "matrix": (("matrix.json",), logits.read_matrix),
    "resilience": (("resilience.json",), logits.read_resilience),
    "precision": (("precision.json",), logits.read_precision),
    "precision-curve": (("precision_curve.json",), logits.read_precision_curve),
    "lre": (("lre.json",), logits.read_lre),
    "scale": (("scale.json",), logits.read_scale),
    "cases": (("cases.json",), logits.read_cases),
    "gradcorr": (("gradcorr.json",), training.read_gradcorr),
    "generalize-table5": (("table5.json",), training.read_table5),
    "generalize": (("facts.json", "result.json"), training.read_generalization),
    "subwords": (("subwords.json",), training.read_subwords),
    "predict-edit": (("prediction.json",), training.read_prediction),
    "ablate-table7": (("table7.json",), training.read_table7),
    "ablate-widths": (("widths.json",), training.read_widths),
    "lens": (("lens.json",), vectors.read_lens_run),
    "ovector": (("ovector.json",), vectors.read_ovector),
    "ffn-ablate": (("ffn_ablation.json",), vectors.read_ffn_ablation),
    "ovector-w": (("ovector_w.json",), vectors.read_ovector_w),
    "extractive-scores": (("scores.json",), extractive.read_extractive_scores),
    "extractive-ocr": (("ocr.json",), extractive.read_ocr),
    "extractive-freeze": (("freeze.json",), extractive.read_freeze),
    "extractive-ordering": (("ordering.json",), extractive.read_ordering),
    "extractive-graft": (("graft.json",), extractive.read_graft),
    "extractive-predict": (("ocr_prediction.json",), extractive.read_extractive_predict),
    "reproduce": (("reproduction.json",), reproduction.read_reproduction),
    "ripple": (("ripple.json",), ripple.read_ripple),
}
# Studies whose directories lincorr wrote before provenance.json named the study: known by their files alone.
RECOGNISED_BY_FILES = ("fit", "matrix", "resilience", "precision", "scale", "cases", "gradcorr", "generalize-table5", "generalize",
                       "subwords", "predict-edit", "ablate-table7", "extractive-scores", "extractive-ocr")


def read_other(directory: Path, others: Mapping[Path, object]) -> Section:
    """A directory of a study the report has no view of: the scalar fields of its JSON files (`others`, read), and its PNGs."""
    documents = {path.name: document for path, document in others.items() if isinstance(document, dict)}
    numbers = tuple(item for name, document in documents.items() for item in scalar_fields(document, f"{name}: "))
    blocks = ([KeyNumbers(numbers)] if numbers else []) + [Picture(path.name, read_picture(path)) for path in sorted(directory.glob("*.png"))]
    model = next((document["model"] for document in documents.values() if isinstance(document.get("model"), str)), None)
    return Section(f"{directory.name}{f' on {model}' if model else ''}", "other", str(directory),
                   read_provenance(directory, next(iter(documents.values()), {}), model=model), tuple(blocks))


def read_run(directory) -> tuple[Section, ...]:
    """The sections of one run directory (usually one); an InputError when it holds no lincorr result or a file that cannot be read.

    The study provenance.json names is read by its reader where the file its `save` always writes is there; a directory that
    names no study (saved before lincorr recorded it), or lacks that file, is known by the files it holds. Either way every
    other JSON file of the directory is read too (a file that cannot be read is an error wherever it lies), and one that
    holds logit-lens curves gets a section of its own.
    """
    directory = Path(directory)
    if directory.is_file() and directory.suffix == ".json":  # a reproduction kept on its own (docs/reproductions/MODEL/PAPER.json)
        return (reproduction.read_reproduction(directory.parent, directory),)
    if not directory.is_dir():
        raise InputError(f"{directory} is neither a directory nor a saved reproduction; pass the --out directory of a lincorr "
                         "run, or a reproduction's JSON file")
    study = recorded_study(directory)
    # A reader's file is looked for by name alone: one that is a directory or a FIFO is refused when read, not passed over.
    if study in STUDY_READERS and all((directory / name).exists() for name in STUDY_READERS[study][0]):
        found = [STUDY_READERS[study]]
    else:
        found = [STUDY_READERS[name] for name in RECOGNISED_BY_FILES if all((directory / file).exists() for file in STUDY_READERS[name][0])]
    if not found and not any((directory / name).exists() for name in (OUTPUT_MARKER, "provenance.json")):
        raise InputError(f"{directory} is not a lincorr run directory: it holds no file a lincorr command writes (result.json, "
                         "matrix.json, precision.json, provenance.json, ...); pass the --out directory of a lincorr command")
    sections = [reader(directory) for _, reader in found]
    read = {name for files, _ in found for name in files} | {"provenance.json", STATE_FILE}
    others = {path: read_document(path, ANY) for path in sorted(directory.glob("*.json")) if path.name not in read}
    sections += [vectors.read_lens(directory, path, document) for path, document in others.items() if vectors.lens_curves(document)]
    return tuple(sections) or (read_other(directory, others),)
