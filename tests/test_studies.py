"""Studies over the registry on tiny models: matrix bookkeeping, caching and resume, planted-W precision,
case tables, resilience across checkpoints, scale, and their CLI commands."""

from __future__ import annotations

import copy
import json
import shutil

import numpy as np
import pytest
import torch
from helpers.tiny import CITIES, INPUTS, NAMES, REGISTRY_YAML, tiny_gpt2, tiny_llama

import lincorr.collection.forward as forward_module
import lincorr.collection.pieces as collect_module
from lincorr.cache import TableStore
from lincorr.collection import CollectSettings, collect
from lincorr.cli import main
from lincorr.collection import LogitTable
from lincorr.domains import Domain
from lincorr.errors import LincorrError
from lincorr.studies.logits.cases import CaseTables, case_table
from lincorr.fit import FitConfig, fit_tables
from lincorr.studies.logits.matrix import Grid, measure_matrix, score_grid
from lincorr.prompts import registry_prompts
from lincorr.studies.logits.precision import precision_of, measure_precision
from lincorr.relations import RelationSpec, read_reference_file
from lincorr.studies.logits.resilience import finetune_on_text, measure_resilience, text_facts
from lincorr.studies.logits.scale import measure_scale
from lincorr.finetune import TrainConfig
from lincorr.knowledge import load_registry
from lincorr.metrics import chance_hit_at_k, hit_at_k, invert_reference
from lincorr.models import wrap_model

pytestmark = pytest.mark.usefixtures("single_thread")

REAL_DOMAIN_SCORES = collect_module.domain_scores
FAMILY = ("tiny_city", "tiny_country", "tiny_capital")



@pytest.fixture
def registry_file(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(REGISTRY_YAML, encoding="utf-8")
    return path


@pytest.fixture
def registry(registry_file):
    return load_registry([registry_file])


def family_matrix(lm, registry, config=FitConfig(estimator="ols"), use_cache=True):
    grid = Grid.square([spec.name for spec in registry.family("tiny")], "tiny family")
    return measure_matrix(lm, registry, grid, INPUTS, config, CollectSettings(batch_size=10, use_cache=use_cache))


# ---- matrix bookkeeping ----

def test_matrix_diagonal_pair_order_and_skipped_prompt(llama_lm, registry):
    result = family_matrix(llama_lm, registry)
    assert result.grid.row_labels == result.grid.column_labels == FAMILY
    assert [name for name, _ in result.skipped] == ["tiny_ghost"] and "no usable word" in result.skipped[0][1]
    # A prompt onto itself is predicted exactly by ols.
    np.testing.assert_allclose(np.diag(result.labelwise_r), 1.0, atol=1e-4)
    # Each cell is the pair (row -> column): the same numbers as fitting that pair on its own.
    prompts, _ = registry_prompts(registry, FAMILY, llama_lm.tokenizer)
    tables = collect(llama_lm, prompts, INPUTS)
    for i, source in enumerate(FAMILY):
        for j, target in enumerate(FAMILY):
            pair = fit_tables(tables[source], tables[target], FitConfig(estimator="ols"))
            # The same float32 tables fitted in float64 two ways (one shared factorisation, one pair alone): r agrees to
            # float64 rounding amplified by the fit's conditioning, far inside 1e-5.
            assert result.labelwise_r[i, j] == pytest.approx(pair.summary()["labelwise_r_mean"], abs=1e-5)
            assert result.labelwise_std[i, j] == pytest.approx(pair.summary()["labelwise_r_std"], abs=1e-5)
            assert result.instancewise_r[i, j] == pytest.approx(pair.summary()["instancewise_r_mean"], abs=1e-5)
            assert result.value(source, target) == result.labelwise_r[i, j]
    assert result.labelwise_r[0, 1] != pytest.approx(result.labelwise_r[1, 0], abs=1e-6)


def test_shared_ridge_factorisation_equals_per_pair_fits(llama_lm, registry):
    config = FitConfig(estimator="ridge", alpha=3.0)
    result = family_matrix(llama_lm, registry, config)
    prompts, _ = registry_prompts(registry, FAMILY, llama_lm.tokenizer)
    tables = collect(llama_lm, prompts, INPUTS)
    pair = fit_tables(tables["tiny_capital"], tables["tiny_country"], config)
    assert result.value("tiny_capital", "tiny_country") == pytest.approx(pair.summary()["labelwise_r_mean"], abs=1e-5)
    assert result.source_alpha == {name: 3.0 for name in FAMILY}


def test_matrix_cells_honour_target_scores_interval_and_control(llama_lm, registry):
    # Each cell is fitted the way `fit` fits one pair: onto the target's domain log-probabilities, with the pairs-bootstrap
    # interval and a control of 3 shuffles, so its numbers are the pair's own and not those of the default settings.
    config = FitConfig(estimator="ridge", alpha=3.0, target_scores="domain-logprobs", ci="refit", n_control=3, n_boot=40)
    prompts, _ = registry_prompts(registry, FAMILY, llama_lm.tokenizer)
    tables = collect(llama_lm, prompts, INPUTS)
    grid = Grid.square(FAMILY)
    scores = score_grid(grid, tables, config)
    plain = score_grid(grid, tables, FitConfig(estimator="ridge", alpha=3.0))
    for i, source in enumerate(FAMILY):
        for j, target in enumerate(FAMILY):
            alone = fit_tables(tables[source], tables[target], config).summary()
            cell = scores.pairs[source, target].summary()
            # As above: one shared fit and one fit alone agree to float64 rounding amplified by the conditioning.
            assert scores.labelwise_r[i, j] == pytest.approx(alone["labelwise_r_mean"], abs=1e-5)
            assert cell["labelwise_r_ci95"] == pytest.approx(alone["labelwise_r_ci95"], abs=1e-5)
            assert cell["control_labelwise_r_mean"] == pytest.approx(alone["control_labelwise_r_mean"], abs=1e-5)
            assert cell["labelwise_r_ci95_method"] == alone["labelwise_r_ci95_method"]
            assert scores.pairs[source, target].target.kind.endswith("log-softmax over the domain")
    assert not np.allclose(scores.labelwise_r, plain.labelwise_r)


def test_rectangle_and_cross_language_grids(registry):
    grid = Grid.rectangle(["tiny_city"], ["tiny_country", "tiny_capital"])
    assert grid.cells == ((("tiny_city", "tiny_country"), ("tiny_city", "tiny_capital")),)
    block = Grid.cross_language(load_registry(), ["es", "zh"])
    assert block.column_labels == ("es", "zh") and "city" in block.row_labels
    row = block.row_labels.index("company")
    assert block.cells[row] == (("company", "es/company"), ("company", "zh/company"))
    emptied = block.without({"es/company"})
    assert emptied.cells[emptied.row_labels.index("company")][0] is None
    with pytest.raises(LincorrError, match="no cross-language prompts for xx"):
        Grid.cross_language(load_registry(), ["xx"])


def test_each_prompt_collected_once_and_cached_rerun_computes_nothing(llama_lm, registry, monkeypatch):
    calls = []
    real = collect_module.run_piece
    monkeypatch.setattr(collect_module, "run_piece", lambda lm, job, *a, **k: calls.append(job.template) or real(lm, job, *a, **k))
    first = family_matrix(llama_lm, registry)
    assert len(calls) == len(set(calls)) == 3  # 9 cells, 3 tables of one piece each

    def refuse(*args, **kwargs):
        raise AssertionError("a cached table was recomputed")

    monkeypatch.setattr(collect_module, "domain_scores", refuse)
    again = family_matrix(llama_lm, registry)
    np.testing.assert_array_equal(again.labelwise_r, first.labelwise_r)


def counting_scores(monkeypatch, interrupt_after: int | None = None) -> list[str]:
    """Record the prompt text of every row scored; optionally raise KeyboardInterrupt after that many batches."""
    seen: list[str] = []
    batches = [0]

    def scores(lm, rows, token_ids, logprobs):
        if interrupt_after is not None and batches[0] == interrupt_after:
            raise KeyboardInterrupt
        batches[0] += 1
        seen.extend(lm.tokenizer.decode(r, skip_special_tokens=True) for r in rows)
        return REAL_DOMAIN_SCORES(lm, rows, token_ids, logprobs)

    for module in (forward_module, collect_module):  # the head check's forward and the pieces'
        monkeypatch.setattr(module, "domain_scores", scores)
    return seen


def test_interrupted_matrix_resumes_without_recomputing_finished_work(registry, tokenizer, monkeypatch):
    monkeypatch.setattr(collect_module, "PIECE_BATCHES", 1)  # every batch a piece of its own
    lm = wrap_model(tiny_llama(len(tokenizer)), tokenizer)
    # 1 head check + 6 batches of the first prompt + 3 of the second, then Ctrl-C.
    counting_scores(monkeypatch, interrupt_after=10)
    with pytest.raises(KeyboardInterrupt):
        family_matrix(lm, registry)
    seen = counting_scores(monkeypatch)
    resumed = family_matrix(lm, registry)
    assert not [text for text in seen if "city of" in text]  # the finished first table is reused
    assert len([text for text in seen if "country of" in text]) == 30  # only the unfinished half of the second
    assert len([text for text in seen if "capital is" in text]) == 60
    fresh = family_matrix(lm, registry, use_cache=False)
    np.testing.assert_allclose(resumed.labelwise_r, fresh.labelwise_r, atol=1e-6)


def corrupt_header(cache_dir):
    header = sorted(cache_dir.glob("*.json"))[0]
    payload = json.loads(header.read_text())
    header.write_text(json.dumps({**payload, "sha256": "0" * 64}))


def corrupt_values(cache_dir):
    values = sorted(cache_dir.glob("*.npz"))[0]
    data = bytearray(values.read_bytes())
    data[len(data) // 2] ^= 0xFF
    values.write_bytes(bytes(data))


@pytest.mark.parametrize("corrupt", [
    corrupt_header,
    corrupt_values,
])
def test_corrupt_cache_entry_is_recomputed(llama_lm, registry, monkeypatch, corrupt):
    first = family_matrix(llama_lm, registry)
    cache_dir = TableStore().directory
    assert len(list(cache_dir.glob("*.npz"))) == 3
    corrupt(cache_dir)
    seen = counting_scores(monkeypatch)
    again = family_matrix(llama_lm, registry)
    assert len(seen) == 60  # exactly one table recomputed
    np.testing.assert_allclose(again.labelwise_r, first.labelwise_r, atol=1e-6)


def test_matrix_save_writes_csv_png_json(llama_lm, registry, tmp_path):
    result = family_matrix(llama_lm, registry)
    result.save(tmp_path / "out")
    payload = json.loads((tmp_path / "out" / "matrix.json").read_text())
    assert payload["rows"] == list(FAMILY) and payload["labelwise_r"][1][0] == pytest.approx(result.labelwise_r[1, 0])
    assert payload["skipped"][0]["prompt"] == "tiny_ghost"
    header = (tmp_path / "out" / "labelwise_r.csv").read_text().splitlines()[0]
    assert header == "source," + ",".join(FAMILY)
    for name in ("labelwise_r", "instancewise_r", "labelwise_std"):
        assert (tmp_path / "out" / f"{name}.png").stat().st_size > 1000
    assert len((tmp_path / "out" / "pairs.csv").read_text().splitlines()) == 1 + 9


def test_ols_too_few_inputs_fails_before_collecting(llama_lm, registry, monkeypatch):
    counting_scores(monkeypatch, interrupt_after=0)  # any collection would raise KeyboardInterrupt
    grid = Grid.square(FAMILY)
    with pytest.raises(LincorrError, match="more training inputs"):
        measure_matrix(llama_lm, registry, grid, INPUTS[:8], FitConfig(estimator="ols"))


# ---- precision on a planted W ----

def word_domain(words):
    return Domain("planted", tuple(words), tuple(range(len(words))), tuple(words), ("whole_word",) * len(words), ())


def planted_pair(estimator="ols"):
    """target column perm[i] copies source column i (plus noise): W is a known permutation."""
    rng = np.random.default_rng(0)
    sources, targets = [f"s{i}" for i in range(6)], [f"t{i}" for i in range(6)]
    perm = [2, 0, 5, 1, 3, 4]  # s_i -> t_perm[i]
    x = rng.normal(size=(400, 6)).astype(np.float32)
    y = np.zeros_like(x)
    y[:, perm] = x
    y += 0.05 * rng.normal(size=y.shape).astype(np.float32)
    inputs = tuple(f"x{i}" for i in range(400))
    source = LogitTable(x, inputs, "{} a", word_domain(sources), "logits", "m")
    target = LogitTable(y, inputs, "{} b", word_domain(targets), "logits", "m")
    return fit_tables(source, target, FitConfig(estimator=estimator, alpha=1.0), source_name="S", target_name="T"), perm


@pytest.mark.parametrize("estimator", ["ols", "ridge"])
def test_precision_on_planted_w(estimator):
    pair, perm = planted_pair(estimator)
    reference = (
        ("s0", (f"t{perm[0]}",)),             # right
        ("s1", ("t5", f"t{perm[1]}")),        # right: any of several objects counts
        ("s2", (f"t{perm[3]}",)),             # wrong: W sends s2 to t_perm[2]
        ("nowhere", ("t1",)),                 # subject not in the domain: not usable
    )
    result = precision_of(pair, reference)
    assert result.n_pairs_influenced == 3
    assert result.hit_influenced[1] == pytest.approx(2 / 3)
    # Columns: t_perm[0] <- s0 (hit), t5 <- s1 (miss: t5's top source is s2), t_perm[1] <- s1 (hit), t_perm[3] <- s2 (miss: s3).
    assert result.n_pairs_influencing == 4
    assert result.hit_influencing[1] == pytest.approx(2 / 4)
    assert result.summary()["hit_influenced"] == {"1": pytest.approx(2 / 3), "3": result.hit_influenced[3], "5": result.hit_influenced[5]}
    assert result.chance_influenced[1] == pytest.approx(np.mean([1 / 6, 2 / 6, 1 / 6]))


def test_hit_at_k_and_chance():
    scores = np.array([[0.9, 0.1, 0.5], [0.2, 0.3, 0.1]])
    right = {0: (2,), 1: (0,)}
    assert hit_at_k(scores, right, (1, 2, 3)) == {1: 0.0, 2: 1.0, 3: 1.0}
    assert invert_reference({0: (2,), 1: (0, 2)}) == {2: (0, 1), 0: (1,)}
    assert chance_hit_at_k(5, {0: (1,)}, (1, 5)) == {1: pytest.approx(0.2), 5: pytest.approx(1.0)}
    assert np.isnan(hit_at_k(scores, {}, (1,))[1])


def test_no_usable_reference_is_a_clear_error():
    pair, _ = planted_pair()
    with pytest.raises(LincorrError, match="no pair of the reference can be used for S->T .1 read.: 'Paris' -> 'France' .subject not in"):
        precision_of(pair, (("Paris", ("France",)),))


def test_read_reference_file_tsv_and_json(tmp_path):
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("# city\tcountry\nBoston\tUSA\nParis\tFrance\nBoston\tAmerica\n\n", encoding="utf-8")
    assert read_reference_file(tsv).pairs == (("Boston", ("USA",)), ("Paris", ("France",)), ("Boston", ("America",)))
    mapping = tmp_path / "pairs.json"
    mapping.write_text('{"Boston": ["USA", "America"], "Paris": "France"}', encoding="utf-8")
    assert read_reference_file(mapping).pairs == (("Boston", ("USA", "America")), ("Paris", ("France",)))
    listed = tmp_path / "list.json"
    listed.write_text('[["Boston", "USA"], ["Boston", "America"]]', encoding="utf-8")
    assert read_reference_file(listed).pairs == (("Boston", ("USA",)), ("Boston", ("America",)))
    bad = tmp_path / "bad.tsv"
    bad.write_text("Boston\tUSA\nParis France\n", encoding="utf-8")
    with pytest.raises(LincorrError, match=r"bad.tsv:2: expected 'subject<TAB>object'"):
        read_reference_file(bad)


def test_precision_table_uses_registry_reference_and_reports_skips(llama_lm, registry):
    relations = [RelationSpec("tiny_city", "tiny_country", "cities"), RelationSpec("tiny_ghost", "tiny_country", "ghost"),
                 RelationSpec("tiny_country", "tiny_capital", "unrelated")]
    configs = [FitConfig(estimator="ols"), FitConfig(estimator="ridge", alpha="cv")]
    table = measure_precision(llama_lm, registry, relations, INPUTS, configs)
    assert [(r.label, r.estimator) for r in table.rows] == [("cities", "ols"), ("cities", "ridge")]
    assert table.rows[0].reference == "tiny_cities->tiny_countries" and table.rows[0].n_pairs_influenced == 5
    assert {label for label, _ in table.skipped} == {"ghost", "unrelated"}
    assert "| cities | ols |" in table.markdown()


# ---- case tables ----

def test_case_table_rows_directions_and_right_answers(tmp_path):
    pair, perm = planted_pair()
    reference = (("s0", (f"t{perm[0]}",)), ("s2", ("t1",)))
    rows = case_table(pair, "influenced", words=["s0", "s2", "zzz"], k=2, reference_pairs=reference)
    assert [r.word for r in rows.rows] == ["s0", "s2"] and rows.missing == ("zzz",)
    assert rows.rows[0].top[0][0] == f"t{perm[0]}" and rows.rows[0].right == (f"t{perm[0]}",)
    assert f"| s0 | **t{perm[0]}**," in rows.text()
    columns = case_table(pair, "influencing", k=1, reference_pairs=reference)
    assert len(columns.rows) == 6
    assert {r.word: r.top[0][0] for r in columns.rows}[f"t{perm[4]}"] == "s4"
    assert {r.word: r.right for r in columns.rows}["t1"] == ("s2",)
    CaseTables((rows, columns)).save(tmp_path / "cases")
    assert (tmp_path / "cases" / "cases.md").read_text().count("|---|---|") == 2
    assert len((tmp_path / "cases" / "cases.csv").read_text().splitlines()) == 1 + 2 * 2 + 6


# ---- resilience ----

def test_resilience_same_checkpoint_is_unchanged_and_other_checkpoint_differs(llama_lm, registry, tokenizer):
    grid = Grid.square(FAMILY)
    same = measure_resilience(llama_lm, wrap_model(copy.deepcopy(llama_lm.model), tokenizer, name="copy"), registry, grid,
                              INPUTS, FitConfig(estimator="ols"))
    np.testing.assert_allclose(same.difference, 0.0, atol=1e-6)
    other = wrap_model(tiny_llama(len(tokenizer), seed=1), tokenizer, name="other")
    moved = measure_resilience(llama_lm, other, registry, grid, INPUTS, FitConfig(estimator="ols"))  # ols: a prompt onto itself is exact
    np.testing.assert_allclose(moved.fit_on_fit.labelwise_r, same.fit_on_fit.labelwise_r)
    assert np.nanmax(np.abs(moved.difference)) > 0.05
    np.testing.assert_allclose(np.diag(moved.eval_on_eval.labelwise_r), 1.0, atol=1e-4)
    pairs = moved.pairs()
    assert len(pairs) == 9 and pairs[1]["source"] == "tiny_city" and pairs[1]["target"] == "tiny_country"
    assert "A's W on B" in moved.text()


def test_resilience_refuses_a_different_tokenizer(llama_lm, registry):
    from helpers.tiny import tiny_tokenizer

    other_tokenizer = tiny_tokenizer(list(CITIES) + list(NAMES))
    other = wrap_model(tiny_llama(len(other_tokenizer)), other_tokenizer, name="other")
    with pytest.raises(LincorrError, match="different tokenizers"):
        measure_resilience(llama_lm, other, registry, Grid.square(FAMILY), INPUTS)


def test_finetune_on_text_trains_a_copy(llama_lm, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("Alice lives in the city of Paris\n\n" + " ".join(["Bob is in Tokyo"] * 30) + "\n", encoding="utf-8")
    assert [len(f.answer.split()) for f in text_facts(text, max_words=48)] == [7, 48, 48, 24]
    before = {n: p.detach().clone() for n, p in llama_lm.model.named_parameters()}
    tuned, training = finetune_on_text(llama_lm, text, TrainConfig(learning_rate=1e-2, epochs=2, batch_size=2))
    assert training["n_examples"] == 4 and training["steps"] == 4 and training["losses"][1] < training["losses"][0]
    assert tuned.fingerprint != llama_lm.fingerprint and tuned.name.endswith("+ft(text.txt)")
    assert all(torch.equal(before[n], p) for n, p in llama_lm.model.named_parameters())


# ---- scale ----

def test_scale_orders_models_by_size_and_saves_a_plot(registry, tokenizer, tmp_path):
    models = {"small": tiny_llama(len(tokenizer)), "big": tiny_gpt2(len(tokenizer))}
    result = measure_scale(
        ["big", "small"], registry, [RelationSpec("tiny_city", "tiny_country", "cities")], 60,
        [FitConfig(estimator="ridge", alpha=1.0)], load=lambda spec: wrap_model(models[spec], tokenizer, name=spec),
    )
    sizes = [p.n_parameters for p in result.points]
    assert sizes == sorted(sizes) and {p.model_name for p in result.points} == {"small", "big"}
    assert list(result.series("ridge")) == ["cities: label-wise r", "cities: Hit@1 influenced", "cities: Hit@5 influenced",
                                             "cities: Hit@1 influencing"]
    result.save(tmp_path / "scale")
    assert (tmp_path / "scale" / "scale_ridge.png").stat().st_size > 1000
    assert len(json.loads((tmp_path / "scale" / "scale.json").read_text())["rows"]) == 2


def test_a_size_series_is_measured_apart_from_the_models_beside_it(registry, tokenizer, tmp_path, monkeypatch):
    import lincorr.studies.logits.scale as scale_module

    from helpers.tiny import tiny_gemma3

    models = {"small": tiny_llama(len(tokenizer)), "big": tiny_gpt2(len(tokenizer)), "other": tiny_gemma3(len(tokenizer))}
    monkeypatch.setattr(scale_module, "size_series", lambda name: ("small", "big") if name == "tiny" else pytest.fail(name))
    result = measure_scale(
        ["other", "small"], registry, [RelationSpec("tiny_city", "tiny_country", "cities")], 60,
        [FitConfig(estimator="ridge", alpha=1.0)], series="tiny", load=lambda spec: wrap_model(models[spec], tokenizer, name=spec),
    )
    assert [(p.model_name, p.in_series) for p in result.points][-1] == ("other", False)
    assert [p.model_name for p in result.series_points] == ["small", "big"]  # smallest first; "small" named twice is measured once
    assert all(len(values) == 2 for values in result.series("ridge").values())
    assert result.note() == scale_module.TWO_POINT_NOTE and "not a trend" in result.text()
    summary = result.summary()
    assert summary["size_series"] == "tiny" and [m["in_series"] for m in summary["models"]] == [True, True, False]


# ---- CLI ----

@pytest.fixture
def workspace(tmp_path, tokenizer, registry_file):
    model_dir = tmp_path / "model"
    tiny_llama(len(tokenizer)).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    (tmp_path / "inputs.txt").write_text("\n".join(INPUTS), encoding="utf-8")
    return tmp_path


def cli(ws, registry_file, command, *extra):
    return main([command, *extra, "--model", str(ws / "model"), "--inputs", str(ws / "inputs.txt"),
                 "--registry", str(registry_file), "--quiet"])


def test_cli_matrix_json_and_files(workspace, registry_file, capsys):
    out = workspace / "matrix"
    assert cli(workspace, registry_file, "matrix", "--family", "tiny", "--json", "--out", str(out)) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["rows"] == payload["columns"] == list(FAMILY) and len(payload["labelwise_r"]) == 3
    assert {"instancewise_r", "labelwise_std", "skipped", "n_inputs", "estimator"} <= payload.keys()
    assert (out / "labelwise_r.png").exists() and (out / "labelwise_r.csv").exists()
    assert cli(workspace, registry_file, "matrix", "--prompts", "tiny_city,tiny_country") == 0
    text = capsys.readouterr().out
    assert "label-wise r" in text and "tiny_country" in text


def test_cli_precision_json_contract(workspace, registry_file, capsys):
    assert cli(workspace, registry_file, "precision", "tiny_city", "tiny_country", "--json") == 0
    payload = json.loads(capsys.readouterr().out)
    assert set(payload["hit_influenced"]) == set(payload["hit_influencing"]) == {"1", "3", "5"}
    assert payload["n_pairs_influenced"] == 5 and payload["n_pairs_influencing"] == 5 and payload["estimator"] == "ridge-std"
    assert set(payload["by_estimator"]) == {"ridge-std", "ols", "ridge"}
    assert cli(workspace, registry_file, "precision", "tiny_city", "tiny_country", "--estimator", "ols", "--json") == 0
    assert json.loads(capsys.readouterr().out)["estimator"] == "ols"
    pairs = workspace / "pairs.tsv"
    pairs.write_text("Paris\tFrance\nTokyo\tJapan\n", encoding="utf-8")
    assert cli(workspace, registry_file, "precision", "tiny_capital", "tiny_country", "--references", str(pairs), "--json") == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["n_pairs_influenced"] == 2 and payload["reference"] == "user file"


def test_cli_precision_n_curve_fits_every_n_on_a_prefix_of_the_inputs(workspace, registry_file, capsys):
    out = workspace / "curve"
    assert cli(workspace, registry_file, "precision", "tiny_city", "tiny_country", "--n-curve", "40,20", "--json", "--out", str(out)) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["ns"] == [20, 40]
    assert [(row["n_inputs"], row["estimator"]) for row in payload["rows"]] == [
        (n, fit) for n in (20, 40) for fit in ("ridge-std", "ols", "ridge")]
    assert (out / "precision_curve.png").exists() and (out / "precision_curve.csv").exists()


def test_cli_cases_and_resilience(workspace, registry_file, tokenizer, capsys):
    assert cli(workspace, registry_file, "cases", "tiny_city", "tiny_country", "--word", "Paris", "-k", "3") == 0
    assert "| Paris |" in capsys.readouterr().out
    copied = workspace / "copied"  # the same weights under another path: refused by fingerprint once loaded
    shutil.copytree(workspace / "model", copied)
    assert cli(workspace, registry_file, "resilience", "--eval-model", str(copied), "--prompts", "tiny_city,tiny_country") == 2
    assert "same weights" in capsys.readouterr().err
    other = workspace / "other"
    tiny_llama(len(tokenizer), seed=1).save_pretrained(other)
    tokenizer.save_pretrained(other)
    assert cli(workspace, registry_file, "resilience", "--eval-model", str(other), "--prompts",
               "tiny_city,tiny_country", "--json") == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["mean_offdiagonal"]["difference"] != pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize(
    "command, extra, message",
    [
        ("precision", [], "name a SOURCE and a TARGET"),
        ("precision", ["tiny_city", "nowhere"], "unknown prompt 'nowhere'"),
        ("precision", ["tiny_country", "tiny_capital"], "no reference between"),
        ("matrix", ["--family", "nope"], "unknown family"),
        ("cases", ["tiny_city", "tiny_country", "--word", "Atlantis"], "none of Atlantis"),
    ],
)
def test_cli_mistakes_exit_2_with_one_line(workspace, registry_file, capsys, command, extra, message):
    assert cli(workspace, registry_file, command, *extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lincorr: error:") and message in err[0]


def test_cli_resilience_with_another_tokenizer_exits_2(workspace, registry_file, capsys):
    from helpers.tiny import tiny_tokenizer

    other_tokenizer = tiny_tokenizer(list(CITIES) + list(NAMES))
    other_dir = workspace / "other"
    tiny_llama(len(other_tokenizer)).save_pretrained(other_dir)
    other_tokenizer.save_pretrained(other_dir)
    assert cli(workspace, registry_file, "resilience", "--prompts", "tiny_city,tiny_country", "--eval-model", str(other_dir)) == 2
    assert "different tokenizers" in capsys.readouterr().err


def test_cli_resilience_after_finetuning_on_a_text_file(workspace, registry_file, capsys):
    text = workspace / "text.txt"
    text.write_text("Alice lives in the city of Paris\nBob lives in the country of Japan\n", encoding="utf-8")
    assert cli(workspace, registry_file, "resilience", "--finetune-text", str(text), "--prompts", "tiny_city,tiny_country",
               "--lr", "1e-2", "--epochs", "3", "--json") == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["training"]["steps"] == 3 and payload["eval_model"].endswith("+ft(text.txt)")
    assert payload["mean_offdiagonal"]["difference"] != pytest.approx(0.0, abs=1e-6)
