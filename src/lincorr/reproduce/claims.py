"""A paper's claims as data: one package per paper beside this module, each with its claims.yaml (peng/claims.yaml, ...).

Each claim names where it stands in the paper, its statement in one line, the published numbers
it is judged against (an entry of paper.yaml, by name), the step that measures it with the
settings of each budget, and the test of the phenomenon in words; or, for a table or figure no
step measures, why it is not applicable. Nothing here runs a model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from importlib import resources

import yaml

from lincorr import recording
from lincorr.choices import split_names
from lincorr.errors import LincorrError, UsageError
from lincorr.paper import paper_entry
from lincorr.reproduce.verdicts import SCALES

BUDGETS = ("quick", "paper")
# A budget sized from the quick budget's look where that look did not decide (`sizing`), no settings of its own.
DECIDE = "decide"


@dataclasses.dataclass(frozen=True)
class Claim:
    """One table or figure of a paper: what it claims, how it is measured and tested, or why it cannot be here."""

    id: str  # "peng.table2", "peng.fig3.attribute"
    where: str  # "Table 2 (§3.5)"
    statement: str
    published: str | None  # an entry of paper.yaml with the paper's numbers, or None when it prints none we keep
    published_keys: tuple[str, ...]  # which of its row keys the claim is judged on
    published_label: str | None  # only the rows with this label (one case table of "cases")
    step: str | None  # a name in lincorr.reproduce.steps.STEPS
    test: str  # the test of the phenomenon, in words
    settings: Mapping[str, Mapping[str, object]]  # budget -> the step's settings; a budget left out is not run at it
    not_applicable: str | None = None  # why no step measures it (when `step` is None)
    eval_model: bool = False  # its step also reads a second checkpoint of the model (`--eval-model`)
    # A step that fine-tunes: the peak memory its paper's fine-tuning reached, in multiples of the model's weights, and
    # where that was measured (the paper's `fine_tuning_memory`); a machine with less does not measure the claim (one
    # the cache holds is served).
    fine_tuning_peak: float | None = None
    fine_tuning_measured: str | None = None
    # The effect the claim is judged against, in its test's units (the paper's own effect where it gives one), and why
    # that value: a test that could not have seen it ends `inconclusive`, never `not reproduced`.
    interest: float | None = None
    interest_reason: str | None = None

    def settings_for(self, budget: str) -> Mapping[str, object] | None:
        """The step's settings at `budget`, or None when the claim is not run at that budget."""
        return self.settings.get(budget)

    def paper_numbers(self) -> dict:
        """The published numbers the claim is judged against: where, the model, and each row's values of `published_keys`."""
        if self.published is None:
            return {}
        entry = paper_entry(self.published)
        rows = [{"label": str(row["label"]), "source": row["source"], "target": row["target"],
                 **{k: row[k] for k in self.published_keys if k in row}}
                for row in entry.get("rows", ()) if self.published_label in (None, str(row["label"]))]
        values = {k: v for k, v in entry.get("values", {}).items() if not self.published_keys or k in self.published_keys}
        return {"where": entry["where"], "model": entry["model"], "setting": entry["setting"], **({"rows": rows} if rows else {}),
                **({"values": values} if values else {})}


@dataclasses.dataclass(frozen=True)
class Paper:
    """A paper's claims, in the paper's order."""

    name: str  # "peng"
    title: str
    claims: tuple[Claim, ...]

    def claim(self, claim_id: str) -> Claim:
        return next(c for c in self.claims if c.id == claim_id)

    @property
    def fine_tuning_peak(self) -> float | None:
        """The memory its fine-tuning claims need, in multiples of the model's weights (None: none fine-tunes)."""
        return max((c.fine_tuning_peak for c in self.claims if c.fine_tuning_peak is not None), default=None)

    def chosen(self, only: str | None) -> tuple[Claim, ...]:
        """The claims named in `only` ("peng.table2,peng.table4"; None: all); an empty, repeated or unknown id is the user's to fix."""
        if only is None:
            return self.claims
        wanted = split_names(only, "--only", f"{self.claims[0].id},{self.claims[-1].id}")
        known = {c.id for c in self.claims}
        unknown = [i for i in wanted if i not in known]
        if unknown:
            raise UsageError(f"--only names no claim of {self.name}: {', '.join(unknown)}; "
                             f"the ids are listed by `lincorr reproduce {self.name} --list`")
        return tuple(c for c in self.claims if c.id in wanted)


def claim_from(entry: dict, paper: str, fine_tuning_memory: dict | None = None) -> Claim:
    published = entry.get("published")
    fine_tunes = bool(entry.get("fine_tunes", False))
    if fine_tunes and not fine_tuning_memory:
        raise LincorrError(f"claim {entry['id']} fine-tunes, but {paper}/claims.yaml gives no fine_tuning_memory")
    claim = Claim(
        id=entry["id"], where=entry["where"], statement=entry["statement"],
        published=published["table"] if isinstance(published, dict) else published,
        published_keys=tuple(published.get("keys", ())) if isinstance(published, dict) else (),
        published_label=str(published["label"]) if isinstance(published, dict) and "label" in published else None,
        step=entry.get("step"), test=entry.get("test", ""),
        settings={budget: dict(entry[budget]) for budget in BUDGETS if entry.get(budget) is not None},
        not_applicable=entry.get("not_applicable"), eval_model=bool(entry.get("eval_model", False)),
        interest=float(entry["interest"]["value"]) if "interest" in entry else None,
        interest_reason=str(entry["interest"]["reason"]) if "interest" in entry else None,
        fine_tuning_peak=float(fine_tuning_memory["peak"]) if fine_tunes and fine_tuning_memory else None,
        fine_tuning_measured=str(fine_tuning_memory["measured"]) if fine_tunes and fine_tuning_memory else None,
    )
    if not claim.id.startswith(f"{paper}."):
        raise LincorrError(f"claim {claim.id} of {paper}/claims.yaml must start with '{paper}.'")
    if (claim.step is None) == (claim.not_applicable is None):
        raise LincorrError(f"claim {claim.id} needs exactly one of a step and a not_applicable reason")
    return claim


def known_papers() -> tuple[str, ...]:
    """The papers with claims: the names of this package's sub-packages that hold a claims.yaml."""
    return tuple(sorted(p.name for p in resources.files("lincorr.reproduce").iterdir() if p.joinpath("claims.yaml").is_file()))


@recording.cache
def load_paper(name: str) -> Paper:
    """The claims of paper `name` ("peng") from `lincorr/reproduce/<name>/claims.yaml`; a paper is a name, never a path."""
    if name not in known_papers():
        raise UsageError(f"no claims for paper {name!r}; a paper is one of the names {', '.join(known_papers())}")
    data = yaml.safe_load(resources.files("lincorr.reproduce").joinpath(name, "claims.yaml").read_text(encoding="utf-8"))
    claims = tuple(claim_from(entry, name, data.get("fine_tuning_memory")) for entry in data["claims"])
    duplicates = sorted({c.id for c in claims if sum(d.id == c.id for d in claims) > 1})
    if duplicates:
        raise LincorrError(f"{name}/claims.yaml repeats claim ids: {', '.join(duplicates)}")
    return Paper(name, data["title"], claims)


@recording.cache
def restatements(name: str) -> dict[str, tuple[str, ...]]:
    """Paper `name`'s claims that restate others (`restates` in its claims.yaml), each with the claims whose tests hold,
    value for value, every part of its own: where those are measured in the same run, it is decided at the run's level
    without counting in its family (`judging.restating`)."""
    data = yaml.safe_load(resources.files("lincorr.reproduce").joinpath(name, "claims.yaml").read_text(encoding="utf-8"))
    found = {str(entry["id"]): tuple(str(other) for other in entry["restates"]) for entry in data["claims"] if entry.get("restates")}
    measured = {str(entry["id"]) for entry in data["claims"] if entry.get("step")}
    # A restated claim that restates others in turn could take both out of the family.
    unknown = sorted(f"{claim_id} -> {other}" for claim_id, others in found.items() for other in others
                     if other not in measured or other in found)
    if unknown:
        raise LincorrError(f"{name}/claims.yaml: a claim may restate only measured claims that restate none: {', '.join(unknown)}")
    return found


@dataclasses.dataclass(frozen=True)
class Scale:
    """The scale a claim's effect is judged on where it is not its test's own (`interest.scale` in claims.yaml), with Δ on it."""

    name: str  # one of `verdicts.SCALES`
    interest: float
    reason: str


def interest_scales(name: str) -> dict[str, Scale]:
    """Paper `name`'s claims whose effect claims.yaml puts on a scale of its own (`interest: {scale: ...}`): their tests
    are made again on it, with its Δ, whenever they are judged (`judging.judged`), so a scale is chosen without measuring."""
    data = yaml.safe_load(resources.files("lincorr.reproduce").joinpath(name, "claims.yaml").read_text(encoding="utf-8"))
    found = {str(entry["id"]): Scale(str(entry["interest"]["scale"]), float(entry["interest"]["value"]), str(entry["interest"]["reason"]))
             for entry in data["claims"] if isinstance(entry.get("interest"), dict) and "scale" in entry["interest"]}
    unknown = sorted(f"{claim_id}: {scale.name}" for claim_id, scale in found.items() if scale.name not in SCALES)
    if unknown:
        raise LincorrError(f"{name}/claims.yaml: an interest's scale is one of {', '.join(SCALES)}, not {', '.join(unknown)}")
    return found


@dataclasses.dataclass(frozen=True)
class Growth:
    """The quick setting a claim's units grow with (`grows` in its claims.yaml): a count (n_sources) or a list of seeds,
    and the most the data allow (None: no limit known)."""

    setting: str
    most: int | None = None

    def size(self, value) -> int:
        return len(value) if isinstance(value, list) else int(value)

    def grown(self, value, size: int):
        """`value` grown to `size` (within `most`): a count becomes `size`, a list of seeds gains the next unused ones."""
        size = min(size, self.most) if self.most is not None else size
        if not isinstance(value, list):
            return max(size, int(value))
        start = max(value, default=-1) + 1
        return [*value, *range(start, start + max(size - len(value), 0))]


@recording.cache
def growth(name: str) -> dict[str, Growth]:
    """Paper `name`'s claims whose units grow with one quick setting (`grows` in its claims.yaml), for `--budget decide`;
    a claim without one has units its design fixes (the relations of a paper's table, a model's layers)."""
    data = yaml.safe_load(resources.files("lincorr.reproduce").joinpath(name, "claims.yaml").read_text(encoding="utf-8"))
    found = {}
    for entry in data["claims"]:
        grows = entry.get("grows")
        if grows is None:
            continue
        quick = entry.get("quick") or {}
        if not isinstance(grows, dict) or grows.get("setting") not in quick or not isinstance(quick[grows["setting"]], (int, list)):
            raise LincorrError(f"{name}/claims.yaml: {entry['id']} grows with {grows!r}, which names none of its quick count "
                               f"or seed settings ({', '.join(quick)})")
        found[str(entry["id"])] = Growth(str(grows["setting"]), int(grows["most"]) if grows.get("most") is not None else None)
    return found
