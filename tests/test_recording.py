"""The record of the code a computation ran: an edit to what ran makes it stale, an edit to anything else does not.

A planted package stands in for lincorr (`source_units.PACKAGE_DIRECTORY`), so its files can really be edited; the
reproduction tests at the end run lincorr's own runner on planted steps that reach lincorr's code."""

from __future__ import annotations

import dataclasses

import ast
import importlib
import os
import sys
import textwrap
from pathlib import Path

import numpy as np
import re

import pytest

import lincorr
import lincorr.reproduce.runner as runner
from lincorr import cache, recording, source_units, strict_json
from lincorr.knowledge import load_registry
from lincorr.linear import LinearMap
from lincorr.reproduce import ReproductionResult, reproduce
from lincorr.reproduce.claims import Claim, Paper
from lincorr.reproduce.step import Context, Measured
from lincorr.reproduce.steps import STEPS
from lincorr.reproduce.verdicts import binomial_above

SOURCES = {
    "__init__.py": "",
    "deep.py": '''
        SCALE = 3
        UNREAD = 5
        NEVER_READ = 7


        def helper(x):
            """Scaled."""
            return x * SCALE  # the deep helper


        def unused(x):
            return x - UNREAD


        def offset(x, by=UNREAD * 0 + SCALE):
            return x + by
    ''',
    "shapes.py": '''
        import dataclasses

        from plantpkg.deep import helper, offset


        @dataclasses.dataclass(frozen=True)
        class Box:
            size: int = 2

            def area(self):
                return offset(helper(self.size))

            def volume(self):
                return self.size ** 3
    ''',
    "memo.py": '''
        from lincorr import recording
        from plantpkg import deep


        @recording.cache
        def remembered(x):
            return deep.helper(x)
    ''',
    "step.py": '''
        from plantpkg import shapes


        def step_a():
            return shapes.Box().area()


        def step_b():
            return 1
    ''',
}


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """plantpkg on sys.path, recorded as lincorr's code is; `edit(file, old, new)` rewrites one of its files."""
    root = tmp_path / "plantpkg"
    root.mkdir()
    for name, text in SOURCES.items():
        (root / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(source_units, "PACKAGE_DIRECTORY", root.resolve())
    for name in [m for m in sys.modules if m.split(".")[0] == "plantpkg"]:
        monkeypatch.delitem(sys.modules, name)
    stamps = iter(range(1, 10**6))

    def edit(file: str, old: str, new: str) -> None:
        path = root / file
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new))
        moment = 1_700_000_000 + next(stamps)  # a new modification time, even within one clock tick
        os.utime(path, (moment, moment))

    return importlib.import_module("plantpkg.step"), edit


def recorded(function):
    with recording.window() as ran:
        function()
    assert ran.complete
    return ran.record


def test_a_record_names_what_ran_through_a_method_and_the_values_it_read(planted):
    step, _ = planted
    record = recorded(step.step_a)
    assert {"plantpkg.step:step_a", "plantpkg.shapes:Box", "plantpkg.shapes:Box.area", "plantpkg.deep:helper",
            "plantpkg.deep:SCALE"} <= set(record), record
    assert not {"plantpkg.step:step_b", "plantpkg.deep:unused", "plantpkg.shapes:Box.volume"} & set(record)


@pytest.mark.parametrize(("file", "old", "new", "stale"), [
    ("deep.py", "return x * SCALE", "return x * SCALE + 1", ["plantpkg.deep:helper"]),  # the deep helper, reached through a method
    ("deep.py", "SCALE = 3", "SCALE = 4", ["plantpkg.deep:SCALE"]),  # a module-level value it read
    ("shapes.py", "size: int = 2", "size: int = 5", ["plantpkg.shapes:Box"]),  # a field's default
    ("step.py", "return shapes.Box().area()", "return shapes.Box(3).area()", ["plantpkg.step:step_a"]),
    ("deep.py", "return x - UNREAD", "return x + UNREAD", []),  # a function that never ran
    ("deep.py", "UNREAD = 5", "UNREAD = 15", ["plantpkg.deep:UNREAD"]),  # read by a default, evaluated at import
    ("deep.py", "NEVER_READ = 7", "NEVER_READ = 8", []),  # a value nothing that ran read
    ("shapes.py", "return self.size ** 3", "return self.size ** 4", []),  # a method of the same class that never ran
    ("step.py", "return 1", "return 2", []),
    ("deep.py", "# the deep helper", "# a comment says why, and changes nothing", []),
    ('deep.py', '"""Scaled."""', '"""Multiplied by SCALE."""', []),
])
def test_an_edit_stales_a_record_exactly_when_it_changes_code_that_ran(planted, file, old, new, stale):
    step, edit = planted
    record = recorded(step.step_a)
    assert recording.changed(record) == []
    edit(file, old, new)
    assert recording.changed(record) == stale


def test_a_renamed_or_removed_function_is_changed(planted):
    step, edit = planted
    record = recorded(step.step_a)
    edit("deep.py", "def helper(x):", "def scaled(x):")
    assert "plantpkg.deep:helper" in recording.changed(record)


def test_a_memo_hit_replays_the_record_of_the_call_that_computed_it(planted):
    step, _ = planted
    memo = importlib.import_module("plantpkg.memo")
    first = recorded(lambda: memo.remembered(2))
    again = recorded(lambda: memo.remembered(2))  # served from the memo: helper does not run now
    assert "plantpkg.deep:helper" in first and "plantpkg.deep:helper" in again


def test_a_disk_cache_serves_a_result_only_while_its_code_is_unchanged_and_replays_its_record(planted, tmp_path, monkeypatch):
    step, edit = planted
    monkeypatch.setenv("LINCORR_CACHE_DIR", str(tmp_path / "cache"))
    calls = []

    def compute():
        calls.append(1)
        return {"area": step.step_a()}

    def served():
        return cache.stored_result("planted", {"k": 1}, compute)

    assert recorded(served) and len(calls) == 1
    record = recorded(served)
    assert len(calls) == 1, "served from the cache"
    assert "plantpkg.deep:helper" in record, "with the record of the code that computed it"
    edit("deep.py", "SCALE = 3", "SCALE = 4")
    served()
    assert len(calls) == 2, "its code changed: computed again"


def test_a_choice_noted_while_computing_joins_every_open_record_and_what_a_disk_cache_serves(tmp_path, monkeypatch):
    """The memory plan a fine-tuning took is in no key: noted into the record, it goes wherever the record goes, and it
    never makes the record stale; a record from someone's file naming no plan's spelling is stale."""
    monkeypatch.setenv("LINCORR_CACHE_DIR", str(tmp_path / "cache"))

    def compute():
        recording.note("memory-plan", "adamw-step-in-backward")
        return {}

    with recording.window() as outer:
        cache.stored_result("noted", {"k": 1}, compute)
    with recording.window() as served:
        cache.stored_result("noted", {"k": 1}, lambda: pytest.fail("computed again"))
    for record in (outer.record, served.record):
        assert recording.noted(record, "memory-plan") == ["adamw-step-in-backward"], record
        assert recording.changed(record) == []
    assert recording.changed({"memory-plan:../../etc/passwd": "chosen", "memory-plan:adamw-float32": "chosen"}) == [
        "memory-plan:../../etc/passwd"]
    assert recording.noted(None, "memory-plan") == [] and recording.noted({"lincorr.fit:fit": "ab"}, "memory-plan") == []


def test_the_unit_of_code_is_found_by_its_line(planted):
    step, _ = planted
    shapes = importlib.import_module("plantpkg.shapes")
    assert source_units.unit_of(shapes.Box.area.__code__) == "plantpkg.shapes:Box.area"
    assert source_units.unit_of(step.step_b.__code__) == "plantpkg.step:step_b"
    assert source_units.unit_of(textwrap.dedent.__code__) is None  # not the package's code


# ---- claims of a reproduction ----


def planted_paper() -> Paper:
    def claim(claim_id: str, step: str) -> Claim:
        return Claim(claim_id, "Table 0", "planted", None, (), None, step, "binomial", {"quick": {"hits": 30}})

    return Paper("peng", "planted", (claim("peng.fits", "planted-fit"), claim("peng.counts", "planted-count")))


@pytest.fixture
def two_steps(monkeypatch):
    """Two planted steps: one reaches lincorr's `fit_ridge` only through `LinearMap.fit`, the other never fits."""

    def fits(ctx: Context) -> Measured:
        rng = np.random.default_rng(0)
        LinearMap(alpha=1.0).fit(rng.normal(size=(20, 3)), rng.normal(size=(20, 2)))
        return Measured({}, "fitted", binomial_above(30, 40, 0.1))

    def counts(ctx: Context) -> Measured:
        return Measured({}, "counted", binomial_above(30, 40, 0.1))

    monkeypatch.setitem(STEPS, "planted-fit", fits)
    monkeypatch.setitem(STEPS, "planted-count", counts)
    monkeypatch.setattr(runner, "load_paper", lambda name: planted_paper())


def edited(monkeypatch, unit: str) -> None:
    """As if `unit` of lincorr's source had been edited."""
    current = source_units.unit_hash
    monkeypatch.setattr(source_units, "unit_hash", lambda name: "edited" if name == unit else current(name))


def test_a_helper_reached_through_a_method_stales_exactly_the_claims_that_ran_it(two_steps, llama_lm, monkeypatch):
    result = reproduce("peng", llama_lm, registry=load_registry(), settings=lincorr.CollectSettings(use_cache=False))
    fits, counts = result.claims
    assert "lincorr.linear:fit_ridge" in fits.code and "lincorr.linear:fit_ridge" not in counts.code
    assert result.stale_claims() == []
    edited(monkeypatch, "lincorr.linear:fit_ridge")
    assert [c.id for c in result.stale_claims()] == ["peng.fits"]


@pytest.mark.parametrize("unit", ["lincorr.cli.reproduce:list_claims", "lincorr.linear:LinearMap.load", "lincorr.reading:read_array"])
def test_an_edit_to_code_no_step_ran_stales_nothing(two_steps, llama_lm, monkeypatch, unit):
    result = reproduce("peng", llama_lm, registry=load_registry(), settings=lincorr.CollectSettings(use_cache=False))
    edited(monkeypatch, unit)
    monkeypatch.setattr(lincorr, "__version__", "99.0")
    assert result.stale_claims() == []


def test_every_memo_of_lincorr_replays_its_record():
    """A memo whose hit did not replay the record of the call that computed its value would leave that code out of the
    record of every later computation that reuses it: lincorr memoises only through `recording`."""
    package = source_units.PACKAGE_DIRECTORY
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.name in ("recording.py", "source_units.py"):  # the memos themselves, and the source's parsed units by file version
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("cache", "lru_cache", "cached_property") and \
                    isinstance(node.value, ast.Name) and node.value.id == "functools":
                found.append(f"{path.relative_to(package)}:{node.lineno}")
            if isinstance(node, ast.ImportFrom) and node.module == "functools" and \
                    {alias.name for alias in node.names} & {"cache", "lru_cache", "cached_property"}:
                found.append(f"{path.relative_to(package)}:{node.lineno}")
    assert found == []


# ---- refreshing saved reproductions ----


def test_refresh_measures_exactly_the_stale_claims_and_rewrites_their_file(two_steps, llama_lm, tmp_path, monkeypatch, capsys):
    from lincorr.cli import main
    from lincorr.cli import reproduce as command
    from lincorr.reproduce import ReproductionResult

    before = reproduce("peng", llama_lm, registry=load_registry())
    saved = tmp_path / "reproductions" / "tiny-llama" / "peng.json"
    saved.parent.mkdir(parents=True)
    saved.write_text(strict_json.dumps(before.summary(), indent=2) + "\n")
    monkeypatch.setattr(command, "load_lm", lambda args, name=None: llama_lm)
    assert main(["reproduce", "--refresh", str(saved.parent.parent)]) == 0
    assert "no stale claim" in capsys.readouterr().out
    edited(monkeypatch, "lincorr.linear:fit_ridge")
    assert main(["reproduce", "--status", str(saved.parent.parent)]) == 0
    status = capsys.readouterr().out
    assert "peng.fits" in status and "\\n" not in status, status
    assert status.splitlines()[-1].startswith("refreshing 1 claims of 1 files: about"), status
    assert main(["reproduce", "--status", str(saved.parent)]) == 0, "one model's directory of PAPER.json"
    assert "peng.fits" in capsys.readouterr().out
    assert main(["reproduce", "--refresh", str(saved.parent.parent)]) == 0
    printed = capsys.readouterr().out
    assert f"1 stale of 2 in {saved} (peng.fits)" in printed and f"wrote {saved}: 1 claims measured again" in printed, printed
    assert re.search(rf"\[1/1\] peng.fits of {re.escape(str(saved))}: measured in \d+ s; about 0 s left", printed), printed
    after = ReproductionResult.load(saved)
    assert after.stale_claims() == [] and after.claims[0].code["lincorr.linear:fit_ridge"] == "edited"
    assert after.claims[1] == before.claims[1], "the claim whose code did not change was left as it was"
    assert after.claims[0].measured_at >= before.claims[0].measured_at and after.measured == 1


def test_a_refresh_stopped_midway_leaves_its_file_holding_the_claims_it_finished(two_steps, llama_lm, tmp_path, monkeypatch):
    """The file is the resume point: on a machine without the first one's cache, a second refresh measures only the rest."""
    from lincorr.reproduce.refresh import refresh

    saved = tmp_path / "reproductions" / "tiny-llama" / "peng.json"
    saved.parent.mkdir(parents=True)
    saved.write_text(strict_json.dumps(reproduce("peng", llama_lm, registry=load_registry()).summary(), indent=2) + "\n")
    edited(monkeypatch, "lincorr.reproduce.runner:measure_unless_refused")  # code both claims ran

    def stopped(ctx: Context) -> Measured:
        raise KeyboardInterrupt

    counts = STEPS["planted-count"]
    monkeypatch.setitem(STEPS, "planted-count", stopped)
    printed: list[str] = []
    no_cache = lincorr.CollectSettings(use_cache=False)
    with pytest.raises(KeyboardInterrupt):
        refresh(saved.parent.parent, lambda name: llama_lm, no_cache, printed.append)
    assert "2 stale of 2" in printed[0], printed
    midway = ReproductionResult.load(saved)
    assert [c.id for c in midway.stale_claims()] == ["peng.counts"] and midway.measured == 1
    assert midway.claims[0].code["lincorr.reproduce.runner:measure_unless_refused"] == "edited"

    monkeypatch.setitem(STEPS, "planted-count", counts)
    printed.clear()
    refresh(saved.parent.parent, lambda name: llama_lm, no_cache, printed.append)
    assert f"1 stale of 2 in {saved} (peng.counts)" in printed[0], printed
    assert ReproductionResult.load(saved).stale_claims() == []


@pytest.fixture
def stale_file(two_steps, llama_lm, tmp_path, monkeypatch) -> Path:
    """The planted paper's reproduction saved as a tree's file, both its claims stale (an edit to code both ran)."""
    saved = tmp_path / "reproductions" / "tiny-llama" / "peng.json"
    saved.parent.mkdir(parents=True)
    saved.write_text(strict_json.dumps(reproduce("peng", llama_lm, registry=load_registry()).summary(), indent=2) + "\n")
    edited(monkeypatch, "lincorr.reproduce.runner:measure_unless_refused")
    return saved


def test_a_claim_a_refresh_takes_from_the_cache_is_written_into_the_file_at_once(stale_file, llama_lm, monkeypatch):
    """A first refresh measured peng.fits into this machine's cache and stopped; the file was then put back as it was
    (another checkout): the next refresh takes peng.fits from the cache and the file holds it before peng.counts ends."""
    from lincorr.reproduce.refresh import refresh

    counts, before = STEPS["planted-count"], stale_file.read_text()

    def stopped(ctx: Context) -> Measured:
        raise KeyboardInterrupt

    monkeypatch.setitem(STEPS, "planted-count", stopped)
    for _ in range(2):
        stale_file.write_text(before)
        printed: list[str] = []
        with pytest.raises(KeyboardInterrupt):
            refresh(stale_file.parent.parent, lambda name: llama_lm, report=printed.append)
    assert "peng.fits of" in printed[-1] and "from the cache" in printed[-1], printed
    assert [c.id for c in ReproductionResult.load(stale_file).stale_claims()] == ["peng.counts"]
    monkeypatch.setitem(STEPS, "planted-count", counts)


def test_a_claim_this_machine_does_not_measure_keeps_its_earlier_measurement(stale_file, llama_lm, monkeypatch):
    """Refused here (too little memory), a stale claim stays as it was measured, stale, for a machine that can measure it;
    the progress line says so."""
    from lincorr.reproduce.refresh import refresh

    earlier = ReproductionResult.load(stale_file).claims[1]
    monkeypatch.setattr(runner, "memory_reason", lambda claim, lm: "needs more memory" if claim.id == "peng.counts" else None)
    printed: list[str] = []
    refresh(stale_file.parent.parent, lambda name: llama_lm, lincorr.CollectSettings(use_cache=False), printed.append)
    assert any("peng.counts of" in line and "not measured here (needs more memory)" in line for line in printed), printed
    after = ReproductionResult.load(stale_file)
    assert [c.id for c in after.stale_claims()] == ["peng.counts"] and after.claims[1].detail == earlier.detail
    assert after.claims[1].verdict == earlier.verdict != "not applicable"


def test_a_stored_test_the_code_cannot_make_again_waits_for_its_claims_measurement(stale_file, llama_lm, monkeypatch):
    """Midway, the file is judged with the claims still to measure as stored; one whose test the current code refuses
    to make again holds back the midway write, not the refresh, which measures it anew and writes the file at the end."""
    from lincorr.reproduce import refresh as refreshing

    current = refreshing.retested

    def retested(claim):  # the stored claim's record names the code before the edit
        if claim.id == "peng.counts" and claim.code["lincorr.reproduce.runner:measure_unless_refused"] != "edited":
            raise ValueError("claim peng.counts: a field this code does not know")
        return current(claim)

    monkeypatch.setattr(refreshing, "retested", retested)
    refreshing.refresh(stale_file.parent.parent, lambda name: llama_lm, lincorr.CollectSettings(use_cache=False), lambda line: None)
    assert ReproductionResult.load(stale_file).stale_claims() == []


def test_status_shows_a_line_break_in_a_path_as_its_escape(stale_file, capsys):
    from lincorr.cli import main

    odd = stale_file.parent.parent / "tiny\u2028llama"
    stale_file.parent.rename(odd)
    assert main(["reproduce", "--status", str(odd.parent)]) == 0
    printed = capsys.readouterr().out
    assert "tiny\\u2028llama" in printed and "\u2028" not in printed, printed


def test_work_shared_between_claims_carries_the_record_of_the_claim_that_made_it(monkeypatch, llama_lm):
    """A claim that reads what an earlier claim of the run computed (ctx.shared) ran that code too, in effect."""

    def fits(ctx: Context) -> Measured:
        if "fitted" not in ctx.shared:
            rng = np.random.default_rng(0)
            ctx.shared["fitted"] = LinearMap(alpha=1.0).fit(rng.normal(size=(20, 3)), rng.normal(size=(20, 2)))
        return Measured({"alpha": ctx.shared["fitted"].alpha}, "fitted", binomial_above(30, 40, 0.1))

    monkeypatch.setitem(STEPS, "planted-fit", fits)
    monkeypatch.setitem(STEPS, "planted-count", fits)
    monkeypatch.setattr(runner, "load_paper", lambda name: planted_paper())
    first, second = reproduce("peng", llama_lm, registry=load_registry(), settings=lincorr.CollectSettings(use_cache=False)).claims
    assert "lincorr.linear:fit_ridge" in first.code and "lincorr.linear:fit_ridge" in second.code


def test_a_claim_measured_in_one_dtype_is_not_served_to_a_run_in_another(two_steps, llama_lm, monkeypatch):
    """The model's fingerprint names its weights (a GGUF file's sha256), not the dtype they were loaded in."""
    import copy

    import torch

    from lincorr.models import LM

    calls = []
    fits = STEPS["planted-fit"]
    monkeypatch.setitem(STEPS, "planted-fit", lambda ctx: calls.append(ctx.lm.head_weight.dtype) or fits(ctx))
    same_weights = LM(llama_lm.name, copy.deepcopy(llama_lm.model).to(torch.bfloat16), llama_lm.tokenizer, llama_lm.fingerprint)
    for lm in (llama_lm, same_weights, llama_lm):
        reproduce("peng", lm, registry=load_registry(), only="peng.fits")
    assert calls == [torch.float32, torch.bfloat16], "the bfloat16 run measured its own claim; the float32 rerun was served"


def test_a_change_to_the_runners_loop_stales_no_claim(two_steps, llama_lm, monkeypatch):
    """The loop over claims prepares what each claim measures in its key; it is not in a claim's record."""
    result = reproduce("peng", llama_lm, registry=load_registry(), settings=lincorr.CollectSettings(use_cache=False))
    assert "lincorr.reproduce.runner:measure_claim" in result.claims[0].code
    edited(monkeypatch, "lincorr.reproduce.runner:reproduce")
    assert result.stale_claims() == []


def test_on_every_step_an_edit_stales_exactly_the_committed_claims_that_ran_it(monkeypatch):
    """Both directions for every step, on the records of gemma-3-270m-q4km's committed claims: an edit to a study
    function a step's claim ran stales exactly the claims whose records name it; an edit to a function of lincorr that none
    of the step's claims ran stales none of them."""
    from pathlib import Path

    from lincorr.reproduce import ReproductionResult

    folder = Path(__file__).resolve().parents[1] / "docs" / "reproductions" / "gemma-3-270m-q4km"
    results = [ReproductionResult.load(path) for path in sorted(folder.glob("*.json")) if ".provenance" not in path.name]
    claims = [c for result in results for c in result.claims if c.code]
    assert claims and not any(unit.endswith(":*") for c in claims for unit in c.code), "recorded, not carried over"
    functions = {f"{module}:{name}" for module in {unit.partition(":")[0] for c in claims for unit in c.code}
                 if (units := source_units.units(module)) is not None for name in units.functions}
    edited_unit = []
    current = source_units.unit_hash
    # Each claim read against the source as its own record saw it, whether or not its file has been refreshed since code
    # it ran last changed (claims measured before and after a change hold different digests of one unit): what is asked
    # is which records an edit reaches, not whether the committed files are fresh now.
    as_recorded: dict[str, str] = {}
    monkeypatch.setattr(source_units, "unit_hash", lambda unit: "edited" if unit in edited_unit else as_recorded.get(unit) or current(unit))

    def stale_after_editing(unit: str) -> set[str]:
        edited_unit[:] = [unit]
        stale = set()
        for result in results:
            for claim in (c for c in result.claims if c.code):
                as_recorded.clear()
                as_recorded.update(claim.code)
                stale |= {c.id for c in dataclasses.replace(result, claims=[claim]).stale_claims()}
        return stale

    steps = sorted({c.step for c in claims})
    assert len(steps) >= 20
    for step in steps:
        its = [c for c in claims if c.step == step]
        ran = set().union(*(c.code for c in its))
        deep = sorted(u for u in its[0].code if u in functions and u.startswith("lincorr.studies."))
        helper = deep[0] if deep else sorted(u for u in its[0].code if u in functions)[0]
        assert stale_after_editing(helper) == {c.id for c in claims if helper in c.code}, (step, helper)
        never = sorted(functions - ran)[0]
        assert not stale_after_editing(never) & {c.id for c in its}, (step, never)


def test_a_refreshs_time_left_is_the_remaining_claims_last_measurements_at_this_refreshs_pace(tmp_path):
    """Three stale claims last measured in 10, 20 and 30 s. The first takes 20 s now (twice its record), but a sixth of
    the recorded time says little of the pace: the other two's 50 s are left as recorded. The second, served from the
    cache, takes nothing: half the recorded time is done in 20 s, so the last one's 30 s read as 20 s."""
    from lincorr.reproduce.refresh import RefreshProgress, SavedReproduction
    from lincorr.reproduce.runner import ClaimResult, ReproductionResult

    def claim(name: str, seconds: float) -> ClaimResult:
        return ClaimResult(name, "", "", {}, {}, "", "", None, None, "inconclusive", "", seconds=seconds)

    path = tmp_path / "peng.json"
    stale = (claim("peng.a", 10), claim("peng.b", 20), claim("peng.c", 30))
    lines: list[str] = []
    progress = RefreshProgress([SavedReproduction(path, ReproductionResult("peng", "", "m", "f", "quick", stale), stale)],
                               lines.append)
    finished = progress.listener(path)
    finished(claim("peng.a", 20), True)
    finished(claim("peng.b", 0), False)
    finished(claim("peng.unrelated", 5), True)  # a claim the refresh did not ask for (none: it asks for the stale ones)
    assert lines == [f"[1/3] peng.a of {path}: measured in 20 s; about 50 s left",
                     f"[2/3] peng.b of {path}: from the cache; about 20 s left"]
    instant = (claim("peng.d", 0), claim("peng.e", 0))  # claims recorded as taking no time (served by a shared table)
    progress = RefreshProgress([SavedReproduction(path, ReproductionResult("peng", "", "m", "f", "quick", instant), instant)],
                               lines.append)
    progress.listener(path)(claim("peng.d", 0), True)
    assert lines[-1] == f"[1/2] peng.d of {path}: measured in 0 s; about 0 s left"
