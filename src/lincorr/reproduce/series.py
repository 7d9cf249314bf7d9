"""Claims over a bundled size series (bundled.yaml's `series`: one family and tokenizer in several sizes).

A series claim's settings name the series (`series: qwen2.5-coder`). It is measured when the reproduced model is one of
the series' sizes, known by its fingerprint or by the alias (or former alias) it was loaded by; the step measures that
size on the reproduced model and loads each other size itself (`load_model`, on the reproduced model's device and dtype),
one at a time, dropped before the next loads. A model in no series ends `not applicable` with the command that runs the
claim on one. Every member's fingerprint is part of the claim's stored key (`series_key`), so a changed member measures
the claim again. The other bundled models are of other families and are not loaded here.

Two sizes show a difference between two models of one family and tokenizer, not a trend: no shape, no rate, nothing
about the sizes between or beyond them.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable, Mapping
from typing import TypeVar

from lincorr.bundled import catalogue, find_bundled, size_series
from lincorr.models import DTYPES, LM, load_model
from lincorr.reproduce.step import Context, NotApplicable

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Member:
    """One size of a series: its bundled alias and the fingerprint its weights load with."""

    alias: str
    fingerprint: str


def series_members(name: str) -> tuple[Member, ...]:
    """The sizes of bundled series `name`, smallest first, as bundled.yaml records them (nothing is loaded)."""
    bundles = catalogue()
    return tuple(Member(alias, bundles[alias].fingerprint) for alias in size_series(name))


def series_key(settings: Mapping[str, object]) -> dict:
    """What a series claim's stored result depends on beyond its settings: each member's alias and fingerprint."""
    name = settings.get("series")
    return {"series": [[member.alias, member.fingerprint] for member in series_members(str(name))]} if name else {}


def is_member(lm: LM, member: Member) -> bool:
    """Whether `lm` is `member`: the same weights, or loaded by its alias or its former one."""
    bundle = find_bundled(lm.name)
    return lm.fingerprint == member.fingerprint or (bundle.alias if bundle is not None else lm.name) == member.alias


def load_size(lm: LM, alias: str) -> LM:
    """Another size of `lm`'s series, on `lm`'s device and in its dtype (float32 for one lincorr cannot name)."""
    dtype = next(lm.model.parameters()).dtype
    return load_model(alias, device=str(lm.device), dtype=next((name for name, kind in DTYPES.items() if kind == dtype), "float32"))


def per_size(ctx: Context, command: str, measure: Callable[[Context], T]) -> list[tuple[Member, T]]:
    """`measure` at every size of the settings' series, smallest first: on `ctx` for the reproduced model's own size, on
    a Context over a freshly loaded model (sharing nothing) for each other size. `command` is how to run the claim on a
    member, with `{model}` for its alias; a model in no series raises NotApplicable saying it."""
    name = str(ctx.settings["series"])
    members = series_members(name)
    if not any(is_member(ctx.lm, member) for member in members):
        raise NotApplicable(f"{ctx.lm.name} is no size of the bundled size series {name} ({', '.join(m.alias for m in members)}); "
                            f"run: {command.format(model=members[0].alias)}")
    measured = []
    for member in members:
        if is_member(ctx.lm, member):
            measured.append((member, measure(ctx)))
            continue
        other = dataclasses.replace(ctx, lm=load_size(ctx.lm, member.alias), shared={})
        measured.append((member, measure(other)))
        del other  # one size beside the reproduced model at a time
        gc.collect()
    return measured
