"""The o-vector study on a tiny in-code Llama: each protocol against plain hooks, one prompt at a time, and the claims' tests."""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import pytest
import torch
from helpers.precision import tiny_forward_atol
from helpers.tiny import tiny_gpt2, tiny_llama
from helpers.vectors import added_at_last, hooked, last_outputs, planted_task, planted_write, rank, task

from lincorr.internals import layout, resid, run
from lincorr.knowledge import TaskSpec

from lincorr.studies.vectors.arithmetic import more_often, ovector, pair_order
from lincorr.studies.vectors.protocol import easier_than, o_interventions, over_every_control
from lincorr.studies.vectors.sources import source_runs
from lincorr.tasks import bind_task, copy_prompts, fewshot_prompts
from lincorr.models import wrap_model

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture
def llama(tokenizer):
    return wrap_model(tiny_llama(len(tokenizer)), tokenizer, name="tiny-llama")


def test_the_paired_test_counts_only_discordant_pairs():
    first = np.array([True] * 5 + [False] + [True] * 10)
    second = np.array([False] * 5 + [False] + [True] * 10)  # ten pairs where both hold say nothing
    assert more_often(first, second) == pytest.approx(0.5 ** 5)
    assert more_often(second, first) == 1.0 and more_often(first, first) == 1.0
    assert more_often(np.array([True, False]), np.array([False, True])) == pytest.approx(0.75)


def test_ovector_addition_equals_a_manual_add_through_hooks(llama):
    spec, control = planted_task(llama, 0, 40, "toy"), planted_task(llama, 60, 40, "other")
    result = ovector(llama, spec, 1, control=control, scale=2.0, n_source=3, n_pairs=6)
    bound = bind_task(spec, llama.tokenizer)
    order = pair_order(bound, 0)
    sources, evaluation = order[:3], order[9:15]  # every planted prompt is solved: the first three are the sources
    assert result.source_arguments == tuple(bound.pairs[i].argument for i in sources)
    assert result.transfer_argument == bound.pairs[sources[0]].argument
    ffn = llama.model.model.layers[1].mlp
    captured = last_outputs(llama, ffn, fewshot_prompts(bound, sources))
    vector = 2.0 * torch.stack(captured).mean(0)

    def manual(added):
        hits, rrs = [], []
        with hooked(ffn, added_at_last(added)):
            for index, prompt in zip(evaluation, copy_prompts(bound, evaluation)):
                logits = llama.model(**llama.tokenizer(prompt, return_tensors="pt")).logits[0, -1]
                best = min(rank(logits, t) for t in bound.pairs[index].answer_ids)
                hits.append(best == 0)
                rrs.append(1 / (1 + best))
        return np.mean(hits), np.mean(rrs)

    accuracy, rr = manual(vector)
    assert result.accuracy_with == pytest.approx(accuracy) and result.rr_with == pytest.approx(rr, rel=1e-5)
    accuracy, rr = manual(2.0 * captured[0])
    assert result.transfer_accuracy == pytest.approx(accuracy) and result.transfer_rr == pytest.approx(rr, rel=1e-5)
    accuracy, rr = manual(torch.zeros_like(vector))
    assert result.accuracy_without == pytest.approx(accuracy) and result.rr_without == pytest.approx(rr, rel=1e-5)
    assert result.norm == pytest.approx(float(vector.norm()), abs=tiny_forward_atol(vector))  # captured batched vs alone
    assert result.other_task == "other" and result.per_layer == ()  # the paired test itself: test_the_paired_test_counts_only_discordant_pairs


def test_ovector_sweep_repeats_the_vector_at_every_layer(llama):
    spec, control = planted_task(llama, 0, 40, "toy"), planted_task(llama, 60, 40, "other")
    one = ovector(llama, spec, 0, control=control, n_source=3, n_pairs=6)
    swept = ovector(llama, spec, 1, control=control, n_source=3, n_pairs=6, sweep=True)
    assert [row["layer"] for row in swept.per_layer] == [0, 1]
    assert swept.per_layer[0] == {"layer": 0, "accuracy_with": one.accuracy_with, "rr_with": one.rr_with}
    assert swept.per_layer[1]["rr_with"] == swept.rr_with


def replaced_but_bos(vector):
    """A hook edit replacing the output at every position but the first (BOS) by `vector` (the paper's FFN substitution)."""
    def edit(out):
        out = out.clone()
        out[:, 1:] = vector
        return out

    return edit


def test_the_papers_protocol_replaces_every_ffn_from_one_block_before_by_one_prompts_vector_bos_kept(llama):
    spec, control = planted_task(llama, 0, 40, "toy"), planted_task(llama, 60, 40, "other")
    result = ovector(llama, spec, 1, control=control, protocol="paper", contexts=("copy", "zero-shot"), n_source=3, n_pairs=6)
    bound = bind_task(spec, llama.tokenizer)
    order = pair_order(bound, 0)
    evaluation = order[9:15]
    assert result.source_arguments == (bound.pairs[order[0]].argument,) and result.scale == 1.0  # one solved prompt, as computed
    layers = llama.model.model.layers
    (vector,) = last_outputs(llama, layers[1].mlp, fewshot_prompts(bound, order[:1]))  # the vector of block 1 ...

    def manual(replaced, prompts):
        with contextlib.ExitStack() as stack:
            for layer in replaced:
                stack.enter_context(hooked(layer.mlp, replaced_but_bos(vector)))
            ranks = [min(rank(llama.model(**llama.tokenizer(p, return_tensors="pt")).logits[0, -1], t) for t in bound.pairs[i].answer_ids)
                     for i, p in zip(evaluation, prompts)]
        return float(np.mean([r == 0 for r in ranks])), float(np.mean([1 / (1 + r) for r in ranks]))

    copy, zero_shot = (dict(row) for row in result.by_context)
    assert (copy["context"], zero_shot["context"]) == ("copy", "zero-shot")
    accuracy, rr = manual(layers, copy_prompts(bound, evaluation))  # ... replacing blocks 0 and 1: from one block before
    assert (result.accuracy_with, result.rr_with) == (copy["accuracy_with"], copy["rr_with"]) == (accuracy, pytest.approx(rr, rel=1e-5))
    accuracy, rr = manual(layers, [spec.query(bound.pairs[i].argument) for i in evaluation])
    assert (zero_shot["accuracy_with"], zero_shot["rr_with"]) == (accuracy, pytest.approx(rr, rel=1e-5))
    _, rr_own_block_only = manual(layers[1:], copy_prompts(bound, evaluation))  # the wrong range: the vector's block alone
    assert rr_own_block_only != pytest.approx(result.rr_with, rel=1e-4)
    assert set(copy) >= {"p_vs_without", "p_vs_other_task", "p_vs_random", "p_over_every_control"}


def test_the_bos_residual_is_bit_identical_with_and_without_the_intervention(llama):
    prompts = ["table mug France is", "Alice lives in Paris"]
    n_layers = layout(llama).n_layers
    streams = [resid(layer) for layer in range(n_layers + 1)]
    vector = np.full(32, 5.0, dtype=np.float32)

    def bos(interventions):
        trace = run(llama, prompts, capture=streams, positions=[0], interventions=interventions)
        return torch.stack([trace[c] for c in streams])

    patches = o_interventions("paper", 1, n_layers, vector, 1.0)
    assert torch.equal(bos([]), bos(patches))
    everywhere = [dataclasses.replace(patch, position="all") for patch in patches]
    assert not torch.equal(bos([])[1:], bos(everywhere)[1:])  # writing every position, BOS included, would change it


@pytest.fixture
def planted(tokenizer):
    """A tiny GPT-2 whose last FFN writes "Paris" after "is" and "Tokyo" after "of", and nothing elsewhere."""
    lm = wrap_model(tiny_gpt2(len(tokenizer)), tokenizer, name="tiny-gpt2-planted")
    planted_write(lm, {"is": "Paris", "of": "Tokyo"})
    return lm


def test_each_sources_ovector_raises_the_answers_rank_where_the_model_does_not_answer(planted):
    spec = task([(f"name{i}", ["Paris"]) for i in range(40)], demonstrations=0, name="planted")
    control = TaskSpec("other", "the capital is {} of", "{x} {y} the capital is {x} of", tuple((f"name{i}", ("Tokyo",)) for i in range(40, 80)), 0)
    runs = source_runs(planted, spec, 1, control, n_sources=4, n_contexts=16)
    assert len(runs.sources) == 4 and runs.replaced == (0, 1) and not set(runs.sources) & set(runs.context_arguments)
    assert sorted(runs.context_source) == sorted(list(range(4)) * 4), "each source its own four of the sixteen contexts"
    before, after = runs.ranks("copy", "none"), runs.ranks("copy", "with")
    assert after.shape == (16,) and (before > 0).all() and (after == 0).all()  # each source's vector puts Paris on top
    assert (runs.ranks("copy", "other_task") > 0).all() and (runs.ranks("copy", "random") > 0).all()
    assert (runs.per_source_rr("copy", "with") > runs.per_source_rr("copy", "other_task")).all()
    assert runs.described("copy")["with"]["top1"] == 1.0 and runs.described("copy")["none"]["median_rank"] > 0


def test_over_every_control_takes_the_largest_paired_p_and_easier_than_compares_counts():
    right = {"with": np.array([True] * 8 + [False] * 2), "without": np.zeros(10, bool), "other_task": np.array([True] * 6 + [False] * 4),
             "random": np.zeros(10, bool)}
    p = over_every_control(right)
    assert p["p_vs_without"] == pytest.approx(0.5 ** 8) and p["p_vs_other_task"] == pytest.approx(0.25)
    assert p["p_over_every_control"] == p["p_vs_other_task"]
    assert easier_than(9, 10, 2, 10) < 0.01 < easier_than(5, 10, 4, 10) and easier_than(2, 10, 9, 10) > 0.99
