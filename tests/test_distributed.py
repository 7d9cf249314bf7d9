"""One command over several processes (torchrun, gloo on this CPU): the same result bit for bit, and a crashed rank's run resumes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.tiny import CITIES, COUNTRIES, city_country_registry, tiny_llama

from lincorr.collection import forward, pieces
from lincorr.distributed import balanced_assignment

RANK_SCRIPT = Path(__file__).parent / "helpers" / "torchrun_rank.py"
TIMINGS = ("seconds_collect", "seconds_fit")


def test_balanced_assignment_covers_every_piece_once_and_evens_the_load():
    costs = [5, 1, 1, 1, 1, 1, 8, 2]
    shares = balanced_assignment(costs, 3)
    assert sorted(i for share in shares for i in share) == list(range(len(costs)))
    loads = [sum(costs[i] for i in share) for share in shares]
    # Largest-first greedy: no rank carries more than the ideal share plus the largest piece.
    assert max(loads) <= sum(costs) / 3 + max(costs)
    assert shares == balanced_assignment(costs, 3), "every rank must compute the same assignment"
    assert balanced_assignment(costs, 1) == [list(range(len(costs)))]


@pytest.fixture
def workspace(tmp_path, tokenizer):
    tiny_llama(len(tokenizer)).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    (tmp_path / "registry.yaml").write_text(city_country_registry(CITIES, COUNTRIES, "{Paris: France, Tokyo: Japan}"))
    (tmp_path / "inputs.txt").write_text("\n".join(f"name{i}" for i in range(120)))
    return tmp_path


def matrix_args(ws: Path) -> list[str]:
    # 120 inputs in batches of 4: 30 batches, 4 pieces per table, 8 pieces to share.
    return ["matrix", "--prompts", "tiny_city,tiny_country", "--registry", str(ws / "registry.yaml"), "--model", str(ws / "model"),
            "--inputs", str(ws / "inputs.txt"), "--batch-size", "4", "--json", "--quiet"]


def run(ws: Path, args: list[str], cache: Path, processes: int, **env) -> subprocess.CompletedProcess:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes)] if processes > 1 else [sys.executable]
    return subprocess.run([*launcher, str(RANK_SCRIPT), *args], capture_output=True, text=True, timeout=600, cwd=ws,
                          env={**os.environ, "LINCORR_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1", **env})


def without_timings(output: str) -> dict:
    result = json.loads(output)
    return {key: value for key, value in result.items() if key not in TIMINGS}


def tables(cache: Path) -> dict[str, bytes]:
    return {path.name: np.load(path)["values"].tobytes() for path in sorted((cache / "logits").glob("*.npz"))}


@pytest.mark.multiprocess
def test_two_processes_give_the_single_process_result_bit_for_bit(workspace, tmp_path):
    # torchrun gives each CPU process one thread; the one-process run uses as many (see collection.forward.forward_key).
    single = run(workspace, matrix_args(workspace), tmp_path / "one", 1, OMP_NUM_THREADS="1")
    assert single.returncode == 0, single.stderr
    counts = tmp_path / "counts"
    counts.mkdir()
    shared = run(workspace, matrix_args(workspace), tmp_path / "two", 2, LINCORR_TEST_COUNT_DIR=str(counts))
    assert shared.returncode == 0, shared.stderr
    assert without_timings(shared.stdout) == without_timings(single.stdout)
    assert tables(tmp_path / "two") == tables(tmp_path / "one") and len(tables(tmp_path / "one")) == 2
    # The work really was shared: both ranks ran pieces, 8 in all, none twice.
    ran = {path.name: int(path.read_text()) for path in counts.iterdir()}
    assert ran["rank0"] > 0 and ran["rank1"] > 0 and ran["rank0"] + ran["rank1"] == 8
    assert shared.stdout.count("\n") == single.stdout.count("\n"), "only rank 0 prints"


@pytest.mark.multiprocess
def test_a_run_whose_rank_died_resumes_from_the_cache_and_equals_the_single_process_run(workspace, tmp_path):
    single = run(workspace, matrix_args(workspace), tmp_path / "one", 1, OMP_NUM_THREADS="1")
    crashed = run(workspace, matrix_args(workspace), tmp_path / "two", 2, LINCORR_TEST_DIE_AFTER="1")
    assert crashed.returncode != 0
    kept = list((tmp_path / "two" / "logits").glob("*.piece*.npz"))
    assert 1 <= len(kept) < 8, "the crash kept the finished pieces and lost the unfinished ones"
    counts = tmp_path / "counts"
    counts.mkdir()
    resumed = run(workspace, matrix_args(workspace), tmp_path / "two", 2, LINCORR_TEST_COUNT_DIR=str(counts))
    assert resumed.returncode == 0, resumed.stderr
    assert sum(int(path.read_text()) for path in counts.iterdir()) == 8 - len(kept), "finished pieces are not run again"
    assert without_timings(resumed.stdout) == without_timings(single.stdout)
    assert tables(tmp_path / "two") == tables(tmp_path / "one")
    assert not list((tmp_path / "two" / "logits").glob("*.piece*.npz")), "the finished tables replace their pieces"


@pytest.mark.multiprocess
def test_device_map_is_refused_under_torchrun_by_rank_0_even_when_it_comes_late(workspace, tmp_path):
    # The launcher stops every process once one fails; rank 1 must not fail first and silence rank 0.
    refused = run(workspace, [*matrix_args(workspace), "--device-map", "auto"], tmp_path / "c", 2, LINCORR_TEST_RANK0_LATE_S="5")
    assert refused.returncode != 0
    errors = [line for line in refused.stderr.splitlines() if line.startswith("lincorr: error:")]
    assert len(errors) == 1 and "--device-map" in errors[0], refused.stderr  # rank 0 says it, once


def test_pieces_follow_the_batches_whatever_the_world_size(tokenizer):
    job = pieces.CollectionJob({}, "{} lives in", tuple(f"name{i}" for i in range(70)), (3, 4), False, 4)
    plan = pieces.plan_job(tokenizer, job)
    rows = np.concatenate([plan.piece_rows(p) for p in range(len(plan.pieces))])
    assert sorted(rows.tolist()) == list(range(70)), "the pieces cover every input once"
    assert len(plan.pieces) == -(-len(plan.batches) // pieces.PIECE_BATCHES)


@pytest.mark.integration
@pytest.mark.multiprocess
def test_the_bundled_model_over_two_processes_equals_one_process(tmp_path, bundled, bundled_cache):
    bundled("gemma-3-270m-q4km")  # converted in the session's cache, which both runs' caches link to
    caches = [bundled_cache(), bundled_cache()]
    # 3 prompts x 136 inputs at batch 8: 17 batches, 3 pieces per table (the last one short), 9 pieces to share, unevenly.
    # Ridge: 68 training inputs are fewer than the 247 cities ols would need.
    args = ["matrix", "--prompts", "city,country,continent", "--model", "gemma-3-270m-q4km", "-n", "136", "--batch-size", "8",
            "--estimator", "ridge", "--alpha", "1", "--json", "--quiet"]
    # torchrun gives each CPU process one thread; a CPU matmul's rounding depends on its thread count (collection.forward.forward_key).
    single = run(tmp_path, args, caches[0], 1, OMP_NUM_THREADS="1")
    assert single.returncode == 0, single.stderr
    shared = run(tmp_path, args, caches[1], 2)
    assert shared.returncode == 0, shared.stderr
    assert without_timings(shared.stdout) == without_timings(single.stdout)
    assert tables(caches[1]) == tables(caches[0]) and len(tables(caches[0])) == 3


def test_a_cpu_table_is_keyed_by_its_thread_count(llama_lm, monkeypatch):
    one = forward.forward_key(llama_lm)
    monkeypatch.setattr(forward.torch, "get_num_threads", lambda: one["cpu_threads"] + 1)
    assert forward.forward_key(llama_lm)["cpu_threads"] == one["cpu_threads"] + 1, "pieces computed with other threads never mix"
