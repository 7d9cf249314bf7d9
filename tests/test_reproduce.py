"""`lincorr reproduce`: every claim resolves, verdicts follow from planted statistics, finished claims are not redone, stale claims are found."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import json
import math
import os
import logging
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

import lincorr.reproduce.runner as runner
import lincorr.reproduce.verdicts as verdicts
from lincorr.reproduce import evidence
from lincorr import source_units, strict_json
from lincorr.bundled import find_bundled
from lincorr.collection import CollectSettings
from lincorr.cli import main
from lincorr.knowledge import load_registry
from lincorr.reproduce import BUDGETS, ReproductionResult, load_paper, reproduce
from lincorr.reproduce.claims import Claim, Paper
from lincorr.reproduce.step import Context, Measured, NotApplicable
from lincorr.reproduce.steps import STEPS
from lincorr.reproduce.decisions import decide
from lincorr.reproduce.verdicts import ALPHA, binomial_above, correlation_above, fisher_greater, mcnemar_gain, paired_greater, ranks_greater
from tests.helpers.cli_errors import one_error_line

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("paper_name", ["peng", "merullo", "feng"])
def test_every_claim_resolves_to_a_step_or_a_stated_reason(paper_name):
    paper = load_paper(paper_name)
    for claim in paper.claims:
        if claim.step is None:
            assert claim.not_applicable and not claim.settings, claim.id
            continue
        assert claim.step in STEPS and list(inspect.signature(STEPS[claim.step]).parameters) == ["ctx"], claim.id
        assert claim.settings and set(claim.settings) <= set(BUDGETS), claim.id
        assert claim.test, claim.id
        claim.paper_numbers()  # its published entry exists


def test_the_claims_cover_every_table_and_figure_of_the_paper():
    ids = {claim.id.split(".")[1] for claim in load_paper("peng").claims}
    assert ids == {f"table{n}" for n in range(1, 19)} | {f"fig{n}" for n in range(1, 25)}


def test_paper_numbers_come_from_paper_yaml():
    numbers = load_paper("peng").claim("peng.table2").paper_numbers()
    city = next(row for row in numbers["rows"] if row["label"] == "City->Country")
    assert numbers["model"] == "llama-3-8b" and city["hit_influenced"] == [0.42, 0.45, 0.48]
    assert [row["label"] for row in load_paper("peng").claim("peng.table3").paper_numbers()["rows"]] == ["3", "3"]


@pytest.mark.parametrize("test, expected", [
    (binomial_above(30, 40, 0.1, interest=0.3), "reproduced"),
    (binomial_above(5, 40, 0.1, interest=0.3), "not reproduced"),  # at chance, with ample power to see 0.3 above it
    (binomial_above(0, 40, 0.1, interest=0.3), "not reproduced"),  # below chance
    (binomial_above(5, 40, 0.1), "inconclusive"),  # no effect of interest: nothing says the test could have seen one
    (mcnemar_gain([False] * 20, [True] * 15 + [False] * 5, interest=0.5), "reproduced"),
    (mcnemar_gain([True] * 10 + [False] * 90, [False] * 100, interest=0.5), "not reproduced"),  # the wrong way, with power
    (mcnemar_gain([True] * 15 + [False] * 5, [False] * 20, interest=0.5), "not reproduced"),  # 15 of 20 lost: far below a rise of 0.5
    (fisher_greater(40, 50, 5, 50, interest=0.5), "reproduced"),
    (fisher_greater(5, 50, 40, 50, interest=0.5), "not reproduced"),
    (paired_greater([0.8, 0.7, 0.9, 0.6, 0.75, 0.85, 0.7], [0.1, 0.0, 0.2, 0.1, 0.05, 0.1, 0.0], interest=0.5), "reproduced"),
    (paired_greater([0.1, 0.0, 0.2, 0.1, 0.05, 0.1, 0.0], [0.8, 0.7, 0.9, 0.6, 0.75, 0.85, 0.7], interest=0.5), "not reproduced"),
    (ranks_greater([5, 6, 7, 8, 9, 10], [0, 1, 2, 3, 4, 1], interest=0.45), "reproduced"),
    (ranks_greater([0, 1, 2, 3, 4, 1], [5, 6, 7, 8, 9, 10], interest=0.45), "not reproduced"),
    (None, "not applicable"),
])
def test_verdicts_follow_from_the_statistics(test, expected):
    assert (decide(test).verdict if test is not None else "not applicable") == expected


def planted_paper(**settings) -> Paper:
    """Two measured claims (one above chance, one at chance) and one a step cannot measure."""
    def claim(claim_id: str, hits: int) -> Claim:
        return Claim(claim_id, "Table 0", "planted", None, (), None, "planted", "binomial", {"quick": {"hits": hits, **settings}})

    return Paper("peng", "planted", (claim("peng.strong", 35), claim("peng.weak", 4),
                                     Claim("peng.na", "Figure 0", "a diagram", None, (), None, None, "", {}, "a diagram")))


@pytest.fixture
def planted(monkeypatch):
    """A paper whose planted step counts its calls; its module is one of lincorr's, so its code digest is real."""
    calls = []

    def planted_step(ctx: Context) -> Measured:
        calls.append(ctx.settings["hits"])
        return Measured({"hits": ctx.settings["hits"]}, f"{ctx.settings['hits']}/40", binomial_above(ctx.settings["hits"], 40, 0.1, interest=0.5))

    planted_step.__module__ = "lincorr.reproduce.verdicts"
    monkeypatch.setitem(STEPS, "planted", planted_step)
    monkeypatch.setattr(runner, "load_paper", lambda name: planted_paper())
    return calls


def test_verdicts_and_resume_on_a_tiny_model(planted, llama_lm, tmp_path):
    result = reproduce("peng", llama_lm, registry=load_registry())
    assert [c.verdict for c in result.claims] == ["reproduced", "not reproduced", "not applicable"]
    assert result.claims[2].reason == "a diagram" and planted == [35, 4]
    assert {"id", "statement", "paper", "ours", "test", "p_value", "adjusted_p", "decision", "detail", "verdict", "reason"} <= set(result.summary()["claims"][0])
    strong, weak = result.claims[:2]
    assert strong.adjusted_p == pytest.approx(2 * strong.p_value) and weak.adjusted_p == pytest.approx(min(1.0, 2 * weak.p_value))
    assert weak.decision["adjusted_p_size"] < ALPHA and weak.decision["level"] == ALPHA / 2, "4/40 lies below 0.5 above chance"
    assert result.summary()["paper"] == "peng" and result.summary()["model"] == "tiny-llama"
    again = reproduce("peng", llama_lm, registry=load_registry())  # finished claims come from the cache
    assert planted == [35, 4] and again.summary()["claims"] == result.summary()["claims"]
    assert (result.measured, again.measured) == (2, 0), "the second run measured nothing"
    reproduce("peng", llama_lm, only="peng.weak", budget="quick", registry=load_registry())
    assert planted == [35, 4]
    result.save(tmp_path / "run")
    loaded = ReproductionResult.load(tmp_path / "run")
    assert loaded.summary() == result.summary() and loaded.study == "reproduce"
    assert "peng.strong" in loaded.text() and "| peng.weak |" in loaded.markdown()


def test_each_finished_claim_is_one_log_line_saying_where_its_result_came_from(planted, llama_lm, caplog):
    with caplog.at_level(logging.INFO, logger="lincorr.reproduce.runner"):
        first = reproduce("peng", llama_lm, registry=load_registry())
        reproduce("peng", llama_lm, registry=load_registry())
    lines = [record.getMessage() for record in caplog.records if record.name == "lincorr.reproduce.runner"]
    strong, weak = (f"p {claim.p_value:.2g} before the run's adjustment" for claim in first.claims[:2])
    diagram = "peng.na (3 of 3): not applicable: a diagram"
    assert lines == [f"peng.strong (1 of 3): measured in {first.claims[0].seconds:.0f} s, {strong}",
                     f"peng.weak (2 of 3): measured in {first.claims[1].seconds:.0f} s, {weak}", diagram,
                     f"peng.strong (1 of 3): from the cache, {strong}", f"peng.weak (2 of 3): from the cache, {weak}", diagram], lines


def test_the_command_measures_saves_and_prints_the_claim_table(planted, llama_lm, tmp_path, monkeypatch, capsys):
    import lincorr.reproduce
    from lincorr.cli import reproduce as command

    monkeypatch.setattr(command, "load_lm", lambda args: llama_lm)
    monkeypatch.setattr(lincorr.reproduce, "load_paper", lambda name: planted_paper())
    assert main(["reproduce", "peng", "--out", str(tmp_path / "run")]) == 0
    printed = capsys.readouterr().out
    assert "peng.strong" in printed and f"wrote {tmp_path / 'run'}/" in printed
    assert ReproductionResult.load(tmp_path / "run").counts() == {"reproduced": 1, "reproduced, smaller": 0, "not reproduced": 1,
                                                                   "inconclusive": 0, "not applicable": 1}


def test_a_code_change_makes_claims_stale(planted, llama_lm, tmp_path, monkeypatch, capsys):
    reproduce("peng", llama_lm, registry=load_registry()).save(tmp_path / "run")
    assert main(["reproduce", "--status", str(tmp_path / "run"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stale"] == []
    monkeypatch.setattr(source_units, "unit_hash", lambda unit: "changed")  # every unit of lincorr's code edited
    assert main(["reproduce", "--status", str(tmp_path / "run"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stale"] == ["peng.strong", "peng.weak"]
    before = list(planted)
    reproduce("peng", llama_lm, registry=load_registry())  # the changed code measures them again
    assert planted == before + [35, 4]


def no_evidence(monkeypatch) -> None:
    """A change to how a binomial claim is decided: its T+ never rejects."""
    exact = evidence.KINDS["binomial_above"]
    monkeypatch.setitem(evidence.KINDS, "binomial_above", lambda **arguments: dataclasses.replace(exact(**arguments), p_above=lambda theta: 1.0))


def test_a_change_to_how_tests_compute_rejudges_cached_claims_without_measuring_them(planted, llama_lm, monkeypatch):
    first = reproduce("peng", llama_lm, registry=load_registry())
    assert first.claims[0].verdict == "reproduced" and planted == [35, 4]
    no_evidence(monkeypatch)
    again = reproduce("peng", llama_lm, registry=load_registry())
    assert planted == [35, 4] and again.measured == 0, "the claims came from the cache"
    assert again.claims[0].p_value == 1.0 and again.claims[0].verdict != "reproduced"
    assert again.stale_claims() == [], "a test's module is left out of the claims' code records"


def test_a_saved_reproduction_is_judged_again_by_the_current_tests(planted, llama_lm, tmp_path, monkeypatch, capsys):
    reproduce("peng", llama_lm, registry=load_registry()).save(tmp_path / "run")
    no_evidence(monkeypatch)
    assert main(["reproduce", "--rejudge", str(tmp_path / "run"), "--out", str(tmp_path / "again"), "--json"]) == 0
    claims = {c["id"]: c for c in json.loads(capsys.readouterr().out)["claims"]}
    assert claims["peng.strong"]["p_value"] == 1.0 and claims["peng.strong"]["verdict"] != "reproduced" and planted == [35, 4]
    assert ReproductionResult.load(tmp_path / "again").claims[0].p_value == 1.0
    saved = json.loads((tmp_path / "run" / "reproduction.json").read_text())
    saved["claims"][0]["detail"]["recipe"] = {"test": "binomial_above", "arguments": {"successes": "many"}}
    (tmp_path / "run" / "reproduction.json").write_text(json.dumps(saved))
    assert main(["reproduce", "--rejudge", str(tmp_path / "run"), "--out", str(tmp_path / "third")]) == 2
    assert "cannot be made again" in one_error_line(capsys) and not (tmp_path / "third").exists()
    assert main(["reproduce", "--rejudge", str(tmp_path / "run"), "--out", str(tmp_path / "run" / "again")]) == 2
    assert "would replace the reproduction it judges" in one_error_line(capsys) and not (tmp_path / "run" / "again").exists()
    assert main(["reproduce", "--rejudge", str(tmp_path / "run" / "reproduction.json"), "--out", str(tmp_path / "run")]) == 2
    assert "would replace the reproduction it judges" in one_error_line(capsys)
    assert json.loads((tmp_path / "run" / "reproduction.json").read_text()) == saved, "its input is as it was"


def tuned_step(ctx: Context) -> Measured:
    """A step that fine-tunes the model on one fact (under the memory plan its settings name, else "auto"), its trained
    model kept in the cache of checkpoints, as the training claims' steps do."""
    from lincorr.checkpoints import trained_checkpoint
    from lincorr.finetune import Fact, TrainConfig

    config = TrainConfig(memory_plan=ctx.settings.get("plan", "auto"))
    trained_checkpoint(ctx.lm, [Fact("Alice lives in the city of", "Paris")], config, name="tuned")
    return Measured({}, "tuned", binomial_above(35, 40, 0.1, interest=0.5))


@pytest.fixture
def tuning(monkeypatch):
    """A paper whose claims fine-tune (under "auto", and under the leanest plan named) but one, which trains nothing."""
    def claim(claim_id: str, step: str, **settings) -> Claim:
        return Claim(claim_id, "Table 0", "planted", None, (), None, step, "binomial", {"quick": settings})

    monkeypatch.setitem(STEPS, "planted-tuning", tuned_step)
    monkeypatch.setitem(STEPS, "planted-plain", lambda ctx: Measured({}, "plain", binomial_above(35, 40, 0.1, interest=0.5)))
    paper = Paper("peng", "planted", (claim("peng.tuned", "planted-tuning"), claim("peng.lean", "planted-tuning", plan="adamw-bfloat16-moments"),
                                      claim("peng.plain", "planted-plain")))
    monkeypatch.setattr(runner, "load_paper", lambda name: paper)


def test_a_claim_names_the_memory_plans_its_fine_tuning_took_also_where_the_training_came_from_the_cache(tuning, llama_lm, tmp_path,
                                                                                                          monkeypatch):
    """Under "auto" the plan follows the memory free, which no key names: the claim's record notes it, so its saved file
    says it, and a claim whose fine-tuned model comes from the cache of checkpoints names the plan that trained it."""
    result = reproduce("peng", llama_lm, registry=load_registry())
    plans = {claim.id: claim.memory_plans for claim in result.claims}
    assert plans == {"peng.tuned": ["adamw-float32"], "peng.lean": ["adamw-bfloat16-moments"], "peng.plain": []}, plans
    assert result.claims[0].code["memory-plan:adamw-float32"] == "chosen" and result.stale_claims() == []
    result.save(tmp_path / "run")
    saved = json.loads((tmp_path / "run" / "reproduction.json").read_text())
    assert [claim["memory_plans"] for claim in saved["claims"]] == [["adamw-float32"], ["adamw-bfloat16-moments"], []]
    assert ReproductionResult.load(tmp_path / "run").summary() == result.summary()
    import lincorr.checkpoints as checkpoints

    monkeypatch.setattr(checkpoints, "train_on_facts", lambda *args, **kwargs: pytest.fail("trained again"))
    again = reproduce("peng", llama_lm, only="peng.tuned", registry=load_registry(), settings=CollectSettings(use_cache=False))
    assert again.measured == 1 and again.claims[0].memory_plans == ["adamw-float32"], "measured again on the stored checkpoint"
    for claim in saved["claims"]:  # a file saved before the plans were kept
        del claim["memory_plans"]
    (tmp_path / "run" / "reproduction.json").write_text(json.dumps(saved))
    assert [claim.memory_plans for claim in ReproductionResult.load(tmp_path / "run").claims] == [None, None, None]


def test_too_little_memory_free_while_fine_tuning_is_no_result_and_a_run_with_the_memory_measures(tuning, llama_lm, tmp_path,
                                                                                                   monkeypatch):
    """The memory free at one moment is no property of the model: a claim refused for it was stored as `not applicable`
    and served to every later run. Now nothing is stored; a run with the memory measures it, and a refresh that finds
    too little keeps the earlier measurement."""
    import lincorr.finetune as finetune
    from lincorr.reproduce.refresh import refresh

    stored = Path(os.environ["LINCORR_CACHE_DIR"]) / "results" / "reproduce"
    free = finetune.available_bytes
    monkeypatch.setattr(finetune, "available_bytes", lambda device: 1024)
    refused = reproduce("peng", llama_lm, only="peng.tuned", registry=load_registry())
    (claim,) = refused.claims
    assert claim.verdict == "not applicable" and "too little memory free while measuring" in claim.reason, claim.reason
    assert "fits no memory plan" in claim.reason and claim.code is None and refused.measured == 0
    assert not stored.exists() or list(stored.iterdir()) == [], "nothing of the refusal is stored"
    monkeypatch.setattr(finetune, "available_bytes", free)
    measured = reproduce("peng", llama_lm, only="peng.tuned", registry=load_registry())
    assert measured.claims[0].verdict == "reproduced" and measured.measured == 1, measured.text()
    saved = tmp_path / "reproductions" / "tiny-llama" / "peng.json"
    saved.parent.mkdir(parents=True)
    saved.write_text(strict_json.dumps(measured.summary(), indent=2) + "\n")
    current = source_units.unit_hash
    monkeypatch.setattr(source_units, "unit_hash", lambda unit: "edited" if unit == "lincorr.finetune:train_on_facts" else current(unit))
    monkeypatch.setattr(finetune, "available_bytes", lambda device: 1024)
    printed: list[str] = []
    refresh(saved.parent.parent, lambda name: llama_lm, report=printed.append)
    assert any("not measured here (too little memory free" in line for line in printed), printed
    kept = ReproductionResult.load(saved).claims[0]
    assert kept.detail == measured.claims[0].detail and kept.verdict == "reproduced"


@pytest.mark.parametrize("arguments, message", [
    (["reproduce", "peng", "--only", "peng.table2,peng.nope"], "peng.nope"),
    (["reproduce", "peng", "--only", ","], "has an empty name"),
    (["reproduce", "nopaper"], "no claims for paper 'nopaper'"),
    (["reproduce"], "name a paper"),
    (["reproduce", "--status", "run", "--rejudge", "run"], "--status lists stale claims and saves nothing; drop --rejudge"),
])
def test_bad_arguments_give_one_error_line(arguments, message, capsys):
    assert main(arguments) == 2
    assert message in one_error_line(capsys)


@pytest.mark.parametrize("detail, variant, message", [
    ({"recipe": {"test": "all_of", "arguments": {"tests": [1, 2], "what": "relations"}}}, None, "tests is not a list of tests' recipes"),
    ({}, None, "the stored test is not one lincorr can judge: name is missing"),
    (binomial_above(3, 5, 0.1).summary(), {"test": "t", "p_value": 0.2, "detail": "x"}, "the stored test is text, not an object"),
])
def test_a_saved_claim_the_current_code_cannot_judge_is_one_error_line_naming_it(detail, variant, message, tmp_path, capsys):
    claim = runner.ClaimResult("peng.table3", "Table 3", "rows have a right word", {}, {}, "", "binomial", 0.5, 0.01, "reproduced", "",
                               variant, detail=detail)
    run = tmp_path / "run"
    run.mkdir()
    document = ReproductionResult("peng", "Peng et al.", "tiny", "f" * 16, "quick", (claim,)).summary()
    (run / "reproduction.json").write_text(json.dumps(document), encoding="utf-8")
    assert main(["reproduce", "--rejudge", str(run), "--out", str(tmp_path / "again")]) == 2
    line = one_error_line(capsys)
    assert "claim peng.table3: " in line and message in line and "measure it again with lincorr reproduce peng --model tiny" in line, line
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run"], "nothing of --out was left"


@pytest.mark.parametrize("command, verdict, says", [
    (["--status"], "maybe", "has the verdict 'maybe'"), (["--rejudge"], "maybe", "has the verdict 'maybe'"),
    (["report"], "maybe", "has the verdict 'maybe'"), (["--rejudge"], "reproduced", "is 'reproduced' with no test behind it"),
])
def test_a_saved_claim_with_a_verdict_lincorr_does_not_give_is_one_error_line(command, verdict, says, tmp_path, capsys):
    """An unknown verdict would be left out of every count of verdicts; one with no test behind it would be carried into
    a re-judged file as if the current code had given it (the report shows it as stored)."""
    claim = runner.ClaimResult("peng.table1", "Table 1", "describes the prompts", {}, {}, "", "", None, None, verdict, "")
    run = tmp_path / "run"
    run.mkdir()
    document = ReproductionResult("peng", "Peng et al.", "tiny", "f" * 16, "quick", (claim,)).summary()
    (run / "reproduction.json").write_text(json.dumps(document), encoding="utf-8")
    (run / "provenance.json").write_text(json.dumps({"study": "reproduce"}), encoding="utf-8")  # what the report knows a run by
    out = ["--out", str(tmp_path / "again")] if command != ["--status"] else []
    argv = ["report", str(run), *out] if command == ["report"] else ["reproduce", *command, str(run), *out]
    assert main(argv) == 2
    line = one_error_line(capsys)
    assert f"claim peng.table1 {says}" in line and ("run the reproduction again" in line or "measure it again with" in line), line
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run"], "nothing of --out was left"


def test_the_precision_step_runs_on_a_tiny_model(llama_lm):
    ctx = Context(llama_lm, load_registry(), {"relations": ["City->Country"], "precise": ["City->Country"], "n_inputs": 60}, interest=0.42)
    measured = STEPS["precision"](ctx)
    rows = measured.ours["relations"]["City->Country"]
    assert set(rows) == {"ols", "ridge-std"} and measured.test is not None and 0.0 <= measured.test.p_value <= 1.0


def test_the_bias_alone_predicts_each_held_out_input_by_the_training_mean():
    from types import SimpleNamespace

    from lincorr.reproduce.peng.appendix import bias_only_instancewise_r

    rng = np.random.default_rng(0)
    values = rng.normal(size=12) + rng.normal(scale=0.5, size=(40, 12))
    fit = SimpleNamespace(target=SimpleNamespace(values=values), train_index=np.arange(20), test_index=np.arange(20, 40))
    prior = values[:20].mean(axis=0)
    expected = [np.corrcoef(prior, values[i])[0, 1] for i in range(20, 40)]
    assert np.allclose(bias_only_instancewise_r(fit), expected, atol=1e-12)


def test_the_appendix_steps_share_one_fit_per_cell_on_a_tiny_model(llama_lm):
    ctx = Context(llama_lm, load_registry(), {"family": "attribute", "prompts": ["city", "country"], "n_inputs": 60})
    instancewise, spread = STEPS["instancewise"](ctx), STEPS["spread"](ctx)
    assert len(ctx.shared) == 1, "the two claims read the same fits"
    fits = next(iter(ctx.shared.values()))
    assert set(fits) == {("city", "country"), ("country", "city")}
    assert instancewise.ours["n_cells"] == spread.ours["n_cells"] == 2
    stds = {f"{s}->{t}": np.std(fit.labelwise_r[np.isfinite(fit.labelwise_r)]) for (s, t), fit in fits.items()}
    assert spread.ours["cells"] == pytest.approx({cell: round(std, 3) for cell, std in stds.items()})
    assert spread.ours["cells_below"] == sum(std < 0.05 for std in stds.values())
    assert instancewise.test is not None and spread.test is not None


def test_the_lre_step_says_why_a_model_keeps_no_relation(llama_lm):
    # The tiny tokenizer spells almost no LRE subject as one word; the real models' run is committed in docs/reproductions/.
    ctx = Context(llama_lm, load_registry(), {"relations": ["country_capital_city", "adj_comparative"], "n_inputs": 120,
                                               "max_subjects": 20})
    with pytest.raises(NotApplicable, match="no LRE relation could be judged on this model: .*survive this tokenizer"):
        STEPS["lre"](ctx)


def test_a_resilience_claim_without_a_second_checkpoint_says_how_to_give_one(llama_lm):
    from lincorr.errors import UsageError
    from lincorr.reproduce.runner import unmeasured_reason

    fig8 = load_paper("peng").claim("peng.fig8")
    assert "--eval-model" in unmeasured_reason(fig8, "quick", with_eval_model=False)
    assert unmeasured_reason(fig8, "quick", with_eval_model=True) is None
    with pytest.raises(UsageError, match="no claim chosen is measured.*--eval-model"):  # so no model need load for it
        reproduce("peng", llama_lm, only="peng.fig8,peng.fig24", registry=load_registry())


def test_w_carried_to_a_second_checkpoint_is_scored_on_its_logits(llama_lm, tokenizer):
    from lincorr.models import wrap_model
    from lincorr.reproduce.pair import EVAL_LM
    from tests.helpers.tiny import tiny_llama

    settings = {"family": "attribute", "prompts": ["city", "country"], "n_inputs": 60}
    itself = STEPS["resilience"](Context(llama_lm, load_registry(), settings, shared={EVAL_LM: llama_lm}))
    assert itself.ours["carried_r_mean"] == itself.ours["before_r_mean"] == itself.ours["after_r_mean"], "A's W on A is W before"
    other = wrap_model(tiny_llama(len(tokenizer), seed=1), tokenizer, name="tiny-llama-other")
    ctx = Context(llama_lm, load_registry(), settings, shared={EVAL_LM: other})
    carried, spread = STEPS["resilience"](ctx), STEPS["resilience_spread"](ctx)
    assert carried.ours["before_r_mean"] == itself.ours["before_r_mean"] and carried.ours["eval_model"] == "tiny-llama-other"
    assert carried.ours["carried_r_mean"] != carried.ours["before_r_mean"], "scored on the other model's logits"
    assert spread.ours["n_cells"] == carried.ours["n_cells"] == 2 and carried.test is not None


def test_a_second_checkpoint_with_another_tokenizer_is_refused(llama_lm):
    from lincorr.errors import LincorrError
    from lincorr.models import wrap_model
    from lincorr.reproduce.pair import EVAL_LM
    from tests.helpers.tiny import MODEL_WORDS, tiny_llama, tiny_tokenizer

    other_tokenizer = tiny_tokenizer([*MODEL_WORDS, "unshared"])
    other = wrap_model(tiny_llama(len(other_tokenizer)), other_tokenizer, name="tiny-llama-other-vocabulary")
    ctx = Context(llama_lm, load_registry(), {"family": "attribute", "prompts": ["city", "country"], "n_inputs": 60},
                  shared={EVAL_LM: other})
    with pytest.raises(LincorrError, match="different tokenizers"):
        STEPS["resilience"](ctx)


def test_the_claim_tables_of_results_md_are_the_committed_reproductions():
    """docs/results.md shows what the committed runs measured: regenerate with `python docs/reproductions.py --write`."""
    tool = importlib.util.spec_from_file_location("reproductions", ROOT / "docs" / "reproductions.py")
    reproductions = importlib.util.module_from_spec(tool)
    tool.loader.exec_module(reproductions)
    blocks = reproductions.blocks()
    assert ("gemma-3-270m-q4km", "peng") in blocks
    for (model, paper), table in blocks.items():
        assert reproductions.current_block(model, paper) == table
        run = ReproductionResult.load(ROOT / "docs" / "reproductions" / model / f"{paper}.json")
        named = find_bundled(run.model_name)  # a run from before the aliases named the model by its former name
        assert (named.alias if named else run.model_name) == model and {c.id for c in run.claims} <= {c.id for c in load_paper(paper).claims}
        added = {c.id for c in load_paper(paper).claims} - {c.id for c in run.claims}
        first_line = table.split("\n")[0]
        assert "measured only the claims its `--only` named" in first_line or all(claim in first_line for claim in added), \
            "the block names the claims its run did not have, or says the run chose some"
        stale = {c.id for c in run.stale_claims()}
        marked = {row.split(" | ")[0].removeprefix("| ") for row in table.splitlines() if row.endswith(" (stale) |")}
        assert marked == stale and (f"**{len(stale)} claims are stale**" in first_line) == bool(stale), \
            "a stale claim's row says so, and only a stale claim's"


def test_every_committed_verdict_reads_off_its_interval_at_the_runs_level():
    """A committed claim's verdict is what its interval says at the claim's level (ALPHA over the run's measured claims, on
    each side): reproduced exactly when the lower end is above 0, below Δ exactly when the upper end is; so no claim with
    an interval wholly below its Δ reads anything but `not reproduced` or `reproduced, smaller`. Each adjusted p is the
    raw one times the claims of the run, below ALPHA exactly when its test rejects; a claim that restates others of its run
    is decided at that level without counting."""
    from lincorr.reproduce.judging import restating

    for path in sorted((ROOT / "docs" / "reproductions").glob("*/*.json")):
        if path.name.endswith(".provenance.json"):
            continue
        claims = ReproductionResult.load(path).claims
        measured = [claim for claim in claims if claim.detail is not None]
        family = len(measured) - len(restating(claims))
        for claim in measured:
            name, decision = f"{path.parent.name}/{claim.id}", claim.decision
            assert decision is not None and decision["claims"] == family and decision["level"] == pytest.approx(ALPHA / family), name
            assert decision["adjusted_p_effect"] == pytest.approx(min(1.0, decision["p_effect"] * family)), name
            assert claim.p_value == decision["p_effect"] and claim.adjusted_p == decision["adjusted_p_effect"], name
            if decision["interval"] is None:
                assert claim.verdict == "inconclusive", name
                continue
            low, high = (math.inf if end is None else end for end in decision["interval"])
            low = -math.inf if decision["interval"][0] is None else low
            there = claim.verdict in ("reproduced", "reproduced, smaller")
            smaller = claim.verdict in ("not reproduced", "reproduced, smaller")
            assert there == (low > 0) == (decision["adjusted_p_effect"] <= ALPHA), name
            if decision["interest"] is not None:
                assert smaller == (high < decision["interest"]) == (decision["adjusted_p_size"] <= ALPHA), name


def test_a_test_over_non_finite_numbers_is_made_again_from_its_saved_json():
    """JSON has no NaN or infinity, and saving writes null for them: a recipe tags them instead, so a correlation over
    constant data (r and p undefined) or values with an infinity are made again as measured, not refused for a null."""
    tests = [correlation_above("r", float("nan"), float("nan"), 10, "items", 0.3),
             paired_greater([1.0, float("nan"), 3.0, float("inf"), 5.0, 6.0], [0.0, 1.0, 1.0, 2.0, float("-inf"), 1.0], interest=0.1)]
    for test in tests:
        saved = strict_json.dumps(test.summary())
        again = verdicts.Test.from_summary(json.loads(saved))
        assert strict_json.dumps(again.summary()) == saved and decide(again).summary() == decide(test).summary()
    assert tests[0].recipe["arguments"]["r"] == {"float": "nan"} and tests[1].recipe["arguments"]["controls"][4] == {"float": "-inf"}


def plain_bounds(recipe: dict, level: float) -> tuple[float, float, float] | None:
    """(p of T+, lower, upper) of a binomial, paired or correlation recipe at one-sided `level`, computed afresh with
    scipy's own functions (Clopper-Pearson from the beta quantiles, Student's t interval, Fisher's z); None for other kinds."""
    arguments = recipe["arguments"]
    if recipe["test"] == "binomial_above":
        s, n, chance = arguments["successes"], arguments["trials"], arguments["chance"]
        low = scipy.stats.beta.ppf(level, s, n - s + 1) - chance if s > 0 else -chance
        high = scipy.stats.beta.ppf(1 - level, s + 1, n - s) - chance if s < n else 1 - chance
        return float(scipy.stats.binomtest(s, n, chance, alternative="greater").pvalue), float(low), float(high)
    if recipe["test"] == "paired_greater":
        difference = np.asarray(arguments["values"], float) - np.asarray(arguments["controls"], float)
        difference = difference[np.isfinite(difference)]
        result = scipy.stats.ttest_1samp(difference, 0.0, alternative="greater")
        interval = scipy.stats.ttest_1samp(difference, 0.0).confidence_interval(1 - 2 * level)
        return float(result.pvalue), float(interval.low), float(interval.high)
    if recipe["test"] == "correlation_above":
        r, units, control = arguments["r"], arguments["units"], arguments.get("control", 0.0)
        half = scipy.stats.norm.isf(level) / math.sqrt(units - 3)
        p = scipy.stats.norm.sf(math.atanh(r) * math.sqrt(units - 3)) if control == 0 else None
        return p, math.tanh(math.atanh(r) - half) - control, math.tanh(math.atanh(r) + half) - control
    return None


def test_committed_decisions_agree_with_an_independent_recomputation():
    """Every committed claim whose test is a binomial, a paired or a correlation one, alone or as the parts of a claim
    about each of them: its p, interval and verdict computed afresh from its recipe with scipy's own functions."""
    checked = 0
    for path in sorted((ROOT / "docs" / "reproductions").glob("*/*.json")):
        if path.name.endswith(".provenance.json"):
            continue
        for claim in ReproductionResult.load(path).claims:
            decision, recipe = claim.decision, (claim.detail or {}).get("recipe")
            if decision is None or recipe is None:
                continue
            level, interest = decision["level"], decision["interest"]
            parts = [part["recipe"] for part in recipe["arguments"]["tests"]] if recipe["test"] == "all_of" else [recipe]
            # A part no outcome could make reject at the level (a binomial's chance to the power of its trials) is not counted.
            parts = [part for part in parts if not (part["test"] == "binomial_above" and
                                                    part["arguments"]["chance"] ** part["arguments"]["trials"] > level)] or parts
            plain = [plain_bounds(part, level) for part in parts]
            whole = [plain_bounds(part, level / len(parts)) for part in parts]
            deltas = {arguments["arguments"].get("interest") for arguments in parts}
            if any(item is None for item in plain + whole) or len(deltas) != 1:
                continue
            low, high = min(item[1] for item in plain), min(item[2] for item in whole)
            name = f"{path.parent.name}/{claim.id}"
            assert decision["interval"] == pytest.approx([low, high], abs=1e-6), name
            if len(parts) == 1 and plain[0][0] is not None:
                assert decision["p_effect"] == pytest.approx(plain[0][0], rel=1e-6, abs=1e-12), name
            there, smaller = low > 0, interest is not None and high < interest
            expected = {(True, False): "reproduced", (True, True): "reproduced, smaller", (False, True): "not reproduced",
                        (False, False): "inconclusive"}[(there, smaller)]
            assert claim.verdict == expected, name
            checked += 1
    assert checked >= 60, f"only {checked} committed claims were recomputed"


@pytest.mark.parametrize("unit", ["file:{fifo}", "file:/dev/zero", "file:../../../../../../etc/passwd", "dir:/",
                                  "lincorr.../../{bad}", "lincorr.nonexistent:f", "os:path", "file:bundled.yaml\x00"])
def test_a_saved_claims_code_naming_what_is_no_unit_of_lincorr_is_stale_and_nothing_is_read(unit, tmp_path, capsys):
    """A stranger's file may name any path or module in a claim's code: only lincorr's own units are looked up, so the
    status neither blocks on a FIFO, reads /dev/zero or a file outside the package, nor runs a parser on a stranger's
    source; the claim is stale."""
    fifo, bad = tmp_path / "fifo", tmp_path / "bad.py"
    os.mkfifo(fifo)
    bad.write_bytes(b"def (\xff")
    unit = unit.format(fifo=fifo, bad=bad.with_suffix(""))
    assert source_units.unit_hash(unit) is None
    claim = runner.ClaimResult("peng.table1", "Table 1", "describes the prompts", {}, {}, "", "", None, None, "not applicable",
                               "", step="precision",
                               code={unit: "0" * 16})
    run = tmp_path / "run"
    run.mkdir()
    document = ReproductionResult("peng", "Peng et al.", "tiny", "f" * 16, "quick", (claim,)).summary()
    (run / "reproduction.json").write_text(json.dumps(document), encoding="utf-8")
    assert main(["reproduce", "--status", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stale"] == ["peng.table1"]


@pytest.mark.parametrize("claim_id", ["peng.table2 ", "peng.nope", "peng.TABLE2"])
def test_a_saved_claim_this_version_does_not_have_is_one_error_line_not_a_member_of_the_family(claim_id, tmp_path, capsys):
    """Judged with the rest, it would take a share of the run's level from every real claim."""
    claims = [runner.ClaimResult(id, "Table", "a claim", {}, {}, "", "", None, None, "not applicable", "")
              for id in ("peng.table2", claim_id)]
    run = tmp_path / "run"
    run.mkdir()
    document = ReproductionResult("peng", "Peng et al.", "tiny", "f" * 16, "quick", tuple(claims)).summary()
    (run / "reproduction.json").write_text(json.dumps(document), encoding="utf-8")
    assert main(["reproduce", "--rejudge", str(run), "--out", str(tmp_path / "again")]) == 2
    line = one_error_line(capsys)
    assert f"the claim {claim_id!r} is none of peng's claims" in line and "--list" in line, line
    assert not (tmp_path / "again").exists()


@pytest.mark.parametrize("change, says", [
    (lambda d: d.update(seconds=float("nan")), "seconds is nan"),
    (lambda d: d.update(seconds=float("inf")), "seconds is inf"),
    (lambda d: d["claims"][0].update(seconds=-1e300), "claims[0].seconds is -1e+300"),
    (lambda d: d["claims"][0].update(p_value=True), "claims[0].p_value is True"),
    (lambda d: d.update(budget="--zzz; rm -rf ~"), "the budget '--zzz; rm -rf ~' is none of quick, paper, decide"),
])
def test_a_saved_reproductions_numbers_and_budget_are_what_a_run_writes(change, says, tmp_path, capsys):
    """A NaN or infinite time was printed as "took nan s", a truth value judged as a p, and an unknown budget pasted
    into the command the error suggests."""
    claim = runner.ClaimResult("peng.table1", "Table 1", "describes the prompts", {}, {}, "", "", None, 0.5, "not applicable", "")
    run = tmp_path / "run"
    run.mkdir()
    document = ReproductionResult("peng", "Peng et al.", "tiny", "f" * 16, "quick", (claim,)).summary()
    change(document)
    (run / "reproduction.json").write_text(json.dumps(document), encoding="utf-8")
    assert main(["reproduce", "--status", str(run)]) == 2
    assert says in one_error_line(capsys)


def test_the_status_shows_a_strangers_text_escaped_never_as_terminal_control(tmp_path, capsys):
    claim = runner.ClaimResult("peng.table1", "Table 1", "describes the prompts", {}, {}, "", "", None, None, "not applicable",
                               "", step="precision", code={"lincorr.fit:\x1b]0;pwned\x07\x1b[2J": "0" * 16},
                               measured_at="\x1b[31mRED\r\nlincorr: a forged line")
    run = tmp_path / "run"
    run.mkdir()
    document = ReproductionResult("peng", "Peng et al.", "tiny", "f" * 16, "quick", (claim,)).summary()
    (run / "reproduction.json").write_text(json.dumps(document), encoding="utf-8")
    assert main(["reproduce", "--status", str(run)]) == 0
    printed = capsys.readouterr().out
    assert "\x1b" not in printed and "\r" not in printed and "\\x1b[31mRED\\r\\nlincorr: a forged line" in printed


def test_a_saved_files_reader_knows_the_budgets_and_verdicts_the_runner_writes():
    """reproduction_file reads saved runs without the runner's imports (the report needs no scipy): its names are the
    runner's, kept twice, so this holds them together."""
    from lincorr import reproduction_file
    from lincorr.reproduce import claims, decisions

    assert reproduction_file.BUDGET_NAMES == (*claims.BUDGETS, claims.DECIDE)
    assert reproduction_file.VERDICTS == (decisions.REPRODUCED, decisions.SMALLER, decisions.NOT_REPRODUCED,
                                          decisions.INCONCLUSIVE, "not applicable")


def saved_reproduction(path: Path, change=lambda document: None) -> Path:
    """A saved peng reproduction at `path` (a tree's MODEL/PAPER.json): peng.fig3.attribute stale (a unit of its record
    is gone from lincorr), peng.table1 not applicable; `change` edits the JSON first."""
    stale = runner.ClaimResult("peng.fig3.attribute", "Figure 3", "a claim", {}, {}, "", "", None, None, "not applicable", "",
                               step="precision", code={"lincorr.fit:gone_since": "0" * 16})
    plain = runner.ClaimResult("peng.table1", "Table 1", "describes the prompts", {}, {}, "", "", None, None, "not applicable", "")
    document = ReproductionResult("peng", "Peng et al.", "tiny", "f" * 16, "quick", (stale, plain)).summary()
    change(document)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


# What a refresh can neither measure nor judge in a saved file, and what its line says.
REFRESH_REFUSALS = {
    "a-verdict-with-no-test-beside-a-stale-claim": (lambda d: d["claims"][1].update(verdict="reproduced"),
                                                    "is 'reproduced' with no test behind it"),
    "a-verdict-with-no-test-nothing-stale": (lambda d: d.update(claims=[{**d["claims"][1], "verdict": "reproduced"}]),
                                             "is 'reproduced' with no test behind it"),
    "budget-decide": (lambda d: d.update(budget="decide"), "a --budget decide reproduction is measured again whole"),
    "model-blank": (lambda d: d.update(model=""), "names no model (\"model\": '')"),
    "model-of-spaces": (lambda d: d.update(model="   "), "names no model (\"model\": '   ')"),
}


@pytest.mark.parametrize("in_a_tree", [False, True], ids=["alone", "last-of-a-tree"])
@pytest.mark.parametrize("case", sorted(REFRESH_REFUSALS))
def test_a_file_a_refresh_cannot_measure_or_judge_is_refused_before_any_model_loads(case, in_a_tree, tmp_path, monkeypatch, capsys):
    """Every file of the tree is checked first: a claim judged with no test behind it ended the refresh in a ValueError
    traceback, and in a tree only after the model had loaded and the other files' stale claims were measured; a --budget
    decide file was refused only once the model had loaded; a blank model name loaded the default model, which would
    have measured the claims of another."""
    from lincorr.cli import reproduce as command

    change, says = REFRESH_REFUSALS[case]
    tree = tmp_path / "reproductions"
    fine = saved_reproduction(tree / "a-model" / "peng.json") if in_a_tree else None
    refused = saved_reproduction(tree / "z-model" / "peng.json", change)
    before = fine.read_text() if fine else None
    monkeypatch.setattr(command, "load_lm", lambda *args, **kwargs: pytest.fail("a model loaded before every file was checked"))
    assert main(["reproduce", "--refresh", str(tree)]) == 2
    line = one_error_line(capsys)
    assert str(refused) in line and says in line, line
    assert fine is None or fine.read_text() == before


def long_word(document: dict, field: str) -> None:
    """The stale claim's `field` (or, for "code", the name of a unit it ran) made a word of a million characters."""
    claim = document["claims"][0]
    if field == "code":
        claim["code"] = {"lincorr.fit:" + "x" * 1_000_000: "0" * 16}
    else:
        claim[field] = "\x1b]0;x\x07" + "y" * 1_000_000


# Every text field of a saved claim, and the name of a unit of code it ran: what --status may print of a stranger's file.
CLAIM_TEXT = [field.name for field in dataclasses.fields(runner.ClaimResult) if field.type in ("str", "str | None")] + ["code"]


def absurd_times(document: dict, seconds) -> None:
    """Both claims stale, measured in `seconds` each."""
    for claim in document["claims"]:
        claim.update(step="precision", code={"lincorr.fit:gone_since": "0" * 16}, seconds=seconds)


@pytest.mark.parametrize("change, shows", [*((lambda d, field=field: long_word(d, field), None) for field in CLAIM_TEXT),
                                           (lambda d: absurd_times(d, 1e308), "about 10,000+ h"),
                                           (lambda d: absurd_times(d, 10 ** 300), "about 10,000+ h")],
                         ids=[*(f"a-{field}-of-a-million-characters" for field in CLAIM_TEXT), "seconds-summing-past-float",
                              "seconds-of-300-digits"])
def test_the_status_cuts_a_strangers_long_text_and_shows_an_absurd_time_as_one(change, shows, tmp_path, capsys):
    """A unit name, a time or a step of a million characters was printed whole, and times of 1e308 s as "about inf h"
    (10**300 s as a number of 300 digits): every line stays an error line's length, an absurd time reads as past 10,000 h."""
    from lincorr.cli import MAX_LINE

    saved = saved_reproduction(tmp_path / "reproductions" / "tiny" / "peng.json", change)
    main(["reproduce", "--status", str(saved)])
    printed = capsys.readouterr()
    lines = (printed.out + printed.err).splitlines()
    assert lines and max(len(line) for line in lines) <= MAX_LINE + len(str(saved)), max(len(line) for line in lines)
    assert "\x1b" not in printed.out + printed.err
    assert shows is None or (shows in printed.out and "inf" not in printed.out and max(map(len, lines)) < 400), printed.out
