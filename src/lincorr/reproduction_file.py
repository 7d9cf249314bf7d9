"""reproduction.json, the claim table `lincorr reproduce --out` saves: its shape, read by `ReproductionResult.load` and the report alike.

A saved reproduction may come from anyone (docs/reproductions/ keeps some; a colleague sends one),
so both of its readers take it through `schema.read_document`: what the file is, its size, encoding
and nesting, then every field either reader uses, with the kind of value it must hold. The published
numbers (`paper`) and our measurement (`ours`) are shown as written, whatever their inner shape.
"""

from __future__ import annotations

import collections
import math
from pathlib import Path

from lincorr.errors import InputError, printable
from lincorr.schema import ANY, NULL, NUMBER, TEXT, Entries, FileKind, Items, Maybe, read_document

RESULT_FILE = "reproduction.json"
BUDGET_NAMES = ("quick", "paper", "decide")  # `claims.BUDGETS` and `--budget decide`, as a saved run names them (a test holds them equal)
VERDICTS = ("reproduced", "reproduced, smaller", "not reproduced", "inconclusive", "not applicable")
TEXT_OR_NULL = (TEXT, NULL)
PUBLISHED = {"where": Maybe(TEXT), "model": Maybe(TEXT), "setting": Maybe(ANY), "rows": Maybe(Items(Entries(ANY))),
             "values": Maybe(Entries(ANY))}
CLAIM = {"id": TEXT, "where": TEXT, "statement": TEXT, "paper": PUBLISHED, "ours": Maybe((Entries(ANY), NULL)),
         "ours_text": Maybe(TEXT_OR_NULL), "test": TEXT, "statistic": Maybe(NUMBER), "p_value": NUMBER, "verdict": TEXT,
         "reason": Maybe(TEXT_OR_NULL), "variant": Maybe((Entries(ANY), NULL)), "step": Maybe(TEXT_OR_NULL),
         "code": Maybe((Entries(TEXT), NULL)), "measured_at": Maybe(TEXT_OR_NULL), "seconds": Maybe(NUMBER),
         # The test in full (effect, interval, interest, parts, the recipe the decision reads).
         "detail": Maybe((Entries(ANY), NULL)), "adjusted_p": Maybe(NUMBER), "interest_reason": Maybe(TEXT_OR_NULL),
         # The decision (`decisions.Decision.summary()`): shown through `report.effects`, which leaves out any field of the wrong kind.
         "decision": Maybe((Entries(ANY), NULL)),
         # The memory plans its fine-tuning took; absent from files saved before they were kept.
         "memory_plans": Maybe((Items(TEXT), NULL))}
REPRODUCTION = FileKind(
    "saved reproduction",
    {"paper": TEXT, "title": Maybe(TEXT), "model": TEXT, "model_fingerprint": Maybe(TEXT), "budget": Maybe(TEXT),
     "eval_model": Maybe(TEXT), "seconds": Maybe(NUMBER), "measured": Maybe(NUMBER), "claims": Items(CLAIM)},
    f"pass the --out directory of `lincorr reproduce` (or its {RESULT_FILE}), or run the reproduction again")


def numbers_read(document: dict):
    """(field, value) of every number of a saved reproduction that a reader prints or judges by, where present."""
    for key in ("seconds", "measured"):
        if document.get(key) is not None:
            yield key, document[key]
    for index, claim in enumerate(document["claims"]):
        for key in ("p_value", "adjusted_p", "seconds"):
            if claim.get(key) is not None:
                yield f"claims[{index}].{key}", claim[key]


def read_reproduction_file(path: Path) -> dict:
    """A saved reproduction (reproduction.json) checked field by field, each claim's verdict one of VERDICTS: a word lincorr
    does not give would be carried on and left out of every count of verdicts."""
    document = read_document(path, REPRODUCTION)
    unknown = next((claim for claim in document["claims"] if claim["verdict"] not in VERDICTS), None)
    if unknown is not None:
        raise InputError(f"{path}: claim {unknown['id']} has the verdict {unknown['verdict']!r}, none of {', '.join(VERDICTS)}; "
                         f"{REPRODUCTION.remedy}")
    # A claim of another paper, or one twice, would join the run's family of p-values and change every adjusted p.
    paper, ids = document["paper"], collections.Counter(claim["id"] for claim in document["claims"])
    foreign = next((claim for claim, times in ids.items() if times > 1 or not claim.startswith(f"{paper}.")), None)
    if foreign is not None:
        raise InputError(f"{path}: the claim {foreign} is " + ("there twice" if ids[foreign] > 1 else f"not one of {paper}'s")
                         + f"; {REPRODUCTION.remedy}")
    return document


def check_judged_numbers(document: dict, path) -> None:
    """For the readers that judge a saved reproduction again and print its times (`ReproductionResult.load`): a NaN, an
    infinity, a negative or a truth value where a time or a p belongs, and a budget lincorr does not have (it would be
    pasted into the command an error suggests), are refused; the report shows such numbers as written instead."""
    problem = next((f"{where} is {value!r}" for where, value in numbers_read(document)
                    if isinstance(value, bool) or not math.isfinite(value) or value < 0), None)
    if problem:
        raise InputError(f"{path}: {problem}, not a finite number of at least 0; {REPRODUCTION.remedy}")
    if document.get("budget") not in (None, "", *BUDGET_NAMES):
        raise InputError(f"{path}: the budget {printable(str(document['budget']))[:100]!r} is none of {', '.join(BUDGET_NAMES)}; "
                         f"{REPRODUCTION.remedy}")
