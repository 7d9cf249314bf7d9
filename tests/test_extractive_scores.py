"""Extractive scores (Feng et al. §4) on tiny float64 models: each score against its own definition, and by token role."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch
from helpers.extractive import ANSWERS, CANDIDATES, PROMPTS, float64_pair
from helpers.tiny import WORDS, tiny_gpt2, tiny_llama, tiny_tokenizer

from lincorr.domains import build_domain
from lincorr.errors import LincorrError
from lincorr.studies.extractive.ocr import QuerySet
from lincorr.studies.extractive.positions import PADDING, ROLES, token_roles
from lincorr.studies.extractive.scores import SCORES, exact_scores, linearized_scores, score_components, component_grid
from lincorr.internals import Component, Patch, attn, component_parameters, head_indices, layout, mlp, resid, run
from lincorr.models import wrap_model

pytestmark = pytest.mark.usefixtures("single_thread")

# ---------------------------------------------------------------- scores against their definitions


@pytest.fixture(scope="module")
def word_tokenizer():
    return tiny_tokenizer(list(WORDS))


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def pair(request, word_tokenizer):
    """GPT-2 (exact float64 layer norms, one key/value head per head) and Llama (grouped-query attention)."""
    return request.param, *float64_pair({"gpt2": tiny_gpt2, "llama": tiny_llama}[request.param], word_tokenizer, 0.3)


@pytest.fixture(scope="module")
def queries(word_tokenizer):
    return QuerySet(PROMPTS, ANSWERS, build_domain(CANDIDATES, word_tokenizer))


def mean_reward(lm, queries, interventions=()) -> float:
    """R averaged over the prompts, computed here from scratch: z_answer - mean_j z_j."""
    logits = run(lm, list(queries.prompts), interventions=interventions, token_ids=torch.tensor(queries.candidates.token_ids)).logits
    return float(torch.stack([row[a] - row.mean() for row, a in zip(logits, queries.answers)]).mean())


def weight_slices(lm, component):
    if component.kind == "head":
        return head_indices(lm, component)
    return {name: None for name in component_parameters(lm, component)}


def mixed(original, tuned, components, scale: float = 1.0):
    """A copy of `original` whose `components`' weights are W + scale (W' - W)."""
    model = copy.deepcopy(original.model)
    own, other, base = dict(model.named_parameters()), dict(tuned.model.named_parameters()), dict(original.model.named_parameters())
    with torch.no_grad():
        for component in components:
            for name, where in weight_slices(original, component).items():
                delta = other[name] - base[name]
                if where is None:
                    own[name].copy_(base[name] + scale * delta)
                else:
                    axis, index = where
                    own[name].index_copy_(axis, index, (base[name] + scale * delta).index_select(axis, index))
    return wrap_model(model, original.tokenizer, "mixed")


def later_components(lm, component):
    """What "late" means for the upstream score: block l's FFN for a head of block l, then every later block."""
    n_layers = layout(lm).n_layers
    later = [Component(kind, l) for l in range(component.layer + 1, n_layers) for kind in ("attn", "mlp")]
    return ([mlp(component.layer)] if component.kind == "head" else []) + later


def earlier_components(component):
    """What y_c depends on besides its own weights: the blocks before it, and for an MLP its block's attention."""
    before = [Component(kind, l) for l in range(component.layer) for kind in ("attn", "mlp")]
    return before + ([attn(component.layer)] if component.kind == "mlp" else [])


def shifted_output(original, tuned, queries, component):
    """f_c(z'_c, W_c) by patching the fine-tuned block input (and, for an MLP, attention output) into the original model."""
    layer = component.layer
    sources = [resid(layer)] + ([attn(layer)] if component.kind == "mlp" else [])
    fine = run(tuned, list(queries.prompts), capture=sources, positions="all")
    patches = [Patch(c, fine[c], "all") for c in sources]
    return run(original, list(queries.prompts), capture=[component], interventions=patches, positions="all")[component]


def central_difference(f, h: float) -> float:
    return (f(h) - f(-h)) / (2 * h)


def right_aligned_mean(values, mask):
    counts = mask.sum(0)[:, None].to(values.dtype)
    return (values * mask[..., None]).sum(0) / counts


H = 1e-3
TOLERANCE = dict(rtol=1e-6, atol=1e-9)


@pytest.fixture(scope="module", autouse=True)
def float64_rms_norm():
    """Llama's RMS norm computes in float32 even in a float64 model; finite differences need it in float64."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(LlamaRMSNorm, "forward", forward)
        yield


def test_informative_score_is_the_derivative_along_the_weight_change(pair, queries):
    arch, original, tuned = pair
    components = score_components(original)
    linear = linearized_scores(original, tuned, queries, components=components, upstream=False)["informative"]
    expected = [central_difference(lambda t: mean_reward(mixed(original, tuned, [c], t), queries), H) for c in components]
    np.testing.assert_allclose(linear, expected, **TOLERANCE)
    assert np.abs(linear).max() > 1e-3  # the check compares numbers, not zeros


def test_downstream_score_is_the_derivative_along_the_shifted_output(pair, queries):
    arch, original, tuned = pair
    components = score_components(original)
    linear = linearized_scores(original, tuned, queries, components=components, upstream=False)["downstream"]
    reference = run(original, list(queries.prompts), capture=components, positions="all")
    expected = []
    for c in components:
        step = shifted_output(original, tuned, queries, c) - reference[c]
        expected.append(central_difference(lambda t: mean_reward(original, queries, [Patch(c, t * step, "all", mode="add")]), H))
    np.testing.assert_allclose(linear, expected, **TOLERANCE)
    assert np.abs(linear).max() > 1e-3


def test_upstream_score_is_the_change_of_the_ablation_derivative_under_late_weights(pair, queries):
    arch, original, tuned = pair
    components = score_components(original)
    linear = linearized_scores(original, tuned, queries, components=components)["upstream"]
    reference = run(original, list(queries.prompts), capture=components, positions="all")
    expected = []
    for c in components:
        y_star = right_aligned_mean(reference[c], reference.attention_mask)
        away = reference[c] - y_star  # the direction from the mean ablation to the actual output
        late = mixed(original, tuned, later_components(original, c))
        slope = [central_difference(lambda t: mean_reward(model, queries, [Patch(c, t * away, "all", mode="add")]), H)
                 for model in (late, original)]
        expected.append(slope[0] - slope[1])
    np.testing.assert_allclose(linear, expected, **TOLERANCE)
    assert np.abs(linear).max() > 1e-4


def test_exact_scores_are_the_interventions_of_equations_1_to_3(pair, queries):
    _, original, tuned = pair
    components = [mlp(0), Component("head", 1, 1)]
    exact = exact_scores(original, tuned, queries, components)
    base = mean_reward(original, queries)
    reference = run(original, list(queries.prompts), capture=components, positions="all")
    for i, c in enumerate(components):
        assert exact["informative"][i] == pytest.approx(mean_reward(mixed(original, tuned, [c]), queries) - base, abs=1e-9)
        shifted = [Patch(c, shifted_output(original, tuned, queries, c), "all")]
        assert exact["downstream"][i] == pytest.approx(mean_reward(original, queries, shifted) - base, abs=1e-9)
        ablate = [Patch(c, right_aligned_mean(reference[c], reference.attention_mask), "all")]
        late = mixed(original, tuned, later_components(original, c))
        expected = (mean_reward(late, queries) - mean_reward(late, queries, ablate)) - (base - mean_reward(original, queries, ablate))
        assert exact["upstream"][i] == pytest.approx(expected, abs=1e-9)


def attribution(original, tuned, queries, component, t: float) -> float:
    """The paper's R_c = dR/dy_c . (y_c - y*_c) at W + t (W' - W): the gradient under the moved late weights at the original
    activations, y_c under the moved earlier and own weights, y* the original mean."""
    prompts = list(queries.prompts)
    reference = run(original, prompts, capture=[component], positions="all")
    y_star = right_aligned_mean(reference[component], reference.attention_mask)
    late = mixed(original, tuned, later_components(original, component), t)
    trace = run(late, prompts, capture=[component], positions="all", token_ids=torch.tensor(queries.candidates.token_ids), grad=True)
    reward = torch.stack([row[a] - row.mean() for row, a in zip(trace.logits, queries.answers)]).sum()
    (gradient,) = torch.autograd.grad(reward, [trace[component]])
    moved = mixed(original, tuned, earlier_components(component) + [component], t)
    y = run(moved, prompts, capture=[component], positions="all")[component]
    mask = reference.attention_mask[..., None]
    return float((gradient * (y - y_star) * mask).sum()) / len(prompts)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_the_three_scores_sum_to_the_first_order_change_of_the_attribution(arch, word_tokenizer, queries):
    """§4's decomposition: for W' = W + t D, (U_c + I_c + D_c) / t -> d/dt [dR/dy_c . (y_c - y*_c)] as t -> 0.

    It needs I_c = dR/dy_c . (df_c/dW_c) D_c, i.e. a component's weights reach R only through its
    own output y_c. That holds for MLPs, and for a head whose key/value head is its own (GPT-2)
    when its output-projection columns stay fixed: they act after y_c (a head's output is taken
    before the projection), and a grouped-query head's key/value rows also move its group's other
    heads. So the check covers MLPs everywhere and GPT-2's heads with the projection held fixed.
    """
    t = 1e-4
    builder = {"gpt2": tiny_gpt2, "llama": tiny_llama}[arch]
    keep = (r"attn\.c_proj",) if arch == "gpt2" else ()
    original, tuned = float64_pair(builder, word_tokenizer, 0.3 * t, keep)
    _, direction = float64_pair(builder, word_tokenizer, 0.3, keep)
    components = [c for c in score_components(original) if c.kind == "mlp" or arch == "gpt2"]
    scores = linearized_scores(original, tuned, queries, components=components)
    total = sum(scores[key] for key in SCORES) / t
    expected = [central_difference(lambda s: attribution(original, direction, queries, c, s), H) for c in components]
    np.testing.assert_allclose(total, expected, rtol=1e-3, atol=1e-7)
    assert np.abs(total).max() > 1e-3


SUBJECTS = ("Alice", "Bob", "X Y Z")  # the second prompt's subject is its first word, the third's spans three tokens


def test_token_roles_name_the_subject_other_and_last_columns_of_the_left_padded_batch(word_tokenizer):
    lm = wrap_model(tiny_llama(len(word_tokenizer)), word_tokenizer)
    roles = token_roles(lm, PROMPTS, SUBJECTS)
    S, O, L, P = ROLES.index("subject"), ROLES.index("other"), ROLES.index("last"), PADDING
    assert roles.tolist() == [
        [P, P, O, S, O, O, O, O, L],  # <bos> Alice lives in the city of
        [P, P, P, P, P, O, S, O, L],  # <bos> Bob capital is
        [O, S, S, S, O, O, O, O, L],  # <bos> X Y Z lives in the country of
    ]
    assert token_roles(lm, PROMPTS).tolist()[1] == [P, P, P, P, P, O, O, O, L]
    with pytest.raises(LincorrError, match="not in the prompt"):
        token_roles(lm, PROMPTS, ("Alice", "Carol", "X"))


@pytest.mark.parametrize("key", SCORES)
def test_scores_by_role_sum_to_the_summed_scores(pair, queries, key):
    _, original, tuned = pair
    scores = linearized_scores(original, tuned, dataclasses.replace(queries, subjects=SUBJECTS), batch_size=2)
    assert scores[f"{key}_by_role"].shape == (len(scores[key]), len(ROLES))
    np.testing.assert_allclose(scores[f"{key}_by_role"].sum(1), scores[key], rtol=1e-12, atol=1e-15)
    assert np.abs(scores[f"{key}_by_role"][:, ROLES.index("subject")]).max() > 1e-6  # every role holds a share
    assert np.abs(scores[f"{key}_by_role"][:, ROLES.index("other")]).max() > 1e-6


def test_informative_score_by_role_is_the_weight_change_at_that_roles_positions_alone(pair, queries):
    """An MLP's weights act position by position: changing them at one role's positions only moves y_c there."""
    _, original, tuned = pair
    located = dataclasses.replace(queries, subjects=SUBJECTS)
    components = [mlp(0), mlp(1)]
    linear = linearized_scores(original, tuned, located, components=components, upstream=False)["informative_by_role"]
    roles = token_roles(original, PROMPTS, SUBJECTS)
    before = run(original, list(PROMPTS), capture=components, positions="all")
    for i, c in enumerate(components):
        for r in range(len(ROLES)):
            at_role = (roles == r)[..., None].to(before[c].dtype)

            def moved(t, c=c, at_role=at_role):
                after = run(mixed(original, tuned, [c], t), list(PROMPTS), capture=[c], positions="all")[c]
                return mean_reward(original, queries, [Patch(c, before[c] + at_role * (after - before[c]), "all")])

            assert linear[i, r] == pytest.approx(central_difference(moved, H), rel=1e-6, abs=1e-9)
    assert abs(linear[0, ROLES.index("subject")]) > 1e-4
    assert linear[1, ROLES.index("subject")] == linear[1, ROLES.index("other")] == 0  # the last FFN reaches the logits only at the last token


def test_score_grid_places_mlps_first_and_heads_after(word_tokenizer):
    lm = wrap_model(tiny_llama(len(word_tokenizer)), word_tokenizer)
    components = score_components(lm)
    assert [str(c) for c in components[:5]] == ["mlp[0]", "head[0,0]", "head[0,1]", "head[0,2]", "head[0,3]"]
    grid = component_grid(lm, components, np.arange(len(components), dtype=float))
    assert grid.shape == (2, 5) and grid[1, 0] == 5 and grid[1, 4] == 9


def test_scores_refuse_a_model_of_another_shape(word_tokenizer, queries):
    small = wrap_model(tiny_llama(len(word_tokenizer)), word_tokenizer)
    other = wrap_model(tiny_gpt2(len(word_tokenizer)), word_tokenizer)
    with pytest.raises(LincorrError, match="fine-tuned copy of the same model"):
        linearized_scores(small, other, queries)
