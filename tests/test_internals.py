"""lincorr.internals on tiny in-code models of every mapped architecture."""

from __future__ import annotations

import pytest
import torch
from helpers.precision import tiny_forward_atol
from helpers.tiny import tiny_gemma3, tiny_gpt2, tiny_llama
from helpers.tiny_archs import (
    tiny_gemma2,
    tiny_gemma3_multimodal,
    tiny_gpt_neox,
    tiny_mistral,
    tiny_olmo,
    tiny_olmo2,
    tiny_phi3,
    tiny_qwen2,
    tiny_qwen3,
)

from lincorr.models import left_pad, tokenize_prompts
from lincorr.errors import LincorrError
from lincorr.internals import (
    ARCHITECTURES,
    Ablate,
    Component,
    Patch,
    attn,
    component_parameters,
    decode,
    head,
    head_indices,
    hidden_ranks,
    layout,
    list_components,
    logit_lens,
    mean_activation,
    mlp,
    resid,
    run,
    token_ranks,
)
from lincorr.models import position_ids_from_mask, wrap_model

BUILDERS = {
    "llama": tiny_llama, "gemma3": tiny_gemma3, "gpt2": tiny_gpt2, "qwen2": tiny_qwen2, "qwen3": tiny_qwen3,
    "mistral": tiny_mistral, "olmo": tiny_olmo, "olmo2": tiny_olmo2, "gemma3-multimodal": tiny_gemma3_multimodal,
    "gpt_neox": tiny_gpt_neox, "gemma2": tiny_gemma2, "phi3": tiny_phi3,
}
# Architectures that normalise attention / FFN outputs before the residual add.
POST_NORM = {"gemma3", "olmo2", "gemma3-multimodal", "gemma2"}
# Different lengths (3 to 7 tokens with <bos>), so batches are left-padded.
PROMPTS = ["Alice lives in the city of", "Bob is", "the capital of France is", "X Y", "Carol lives in"]
# EXACT: one computation read two ways (a hook against the model's own outputs, a patch that writes back what was read,
# a residual sum in the model's own order): the same float32 operations, equal on any machine up to a few ulps of
# values below 1. CLOSE: two computations of a logit or an attention output (the head applied by lincorr and by the
# model, heads rebuilt through the output projection, a batch against one prompt): float32 rounding apart.
EXACT = dict(atol=1e-6, rtol=0)
CLOSE = dict(atol=tiny_forward_atol(1.0), rtol=tiny_forward_atol(1.0))
pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(params=list(BUILDERS))
def arch(request, tokenizer):
    """(architecture name, LM) for every mapped architecture."""
    return request.param, wrap_model(BUILDERS[request.param](len(tokenizer)), tokenizer, name=f"tiny-{request.param}")


@pytest.fixture
def lm(arch):
    return arch[1]


def full_forward(lm, prompts, **kwargs):
    """The model's own forward on left-padded prompts with mask-derived position ids."""
    ids, mask = left_pad(tokenize_prompts(lm.tokenizer, prompts), lm.tokenizer.pad_token_id)
    with torch.inference_mode():
        return lm.model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask), **kwargs)


def every_resid(lm):
    return [resid(layer) for layer in range(layout(lm).n_layers + 1)]


def test_resid_matches_the_models_own_hidden_states_and_logits(lm):
    n_layers = layout(lm).n_layers
    seen = []
    handle = layout(lm).final_norm().register_forward_pre_hook(lambda _m, args: seen.append(args[0].clone()))
    try:
        out = full_forward(lm, PROMPTS, output_hidden_states=True)
    finally:
        handle.remove()
    # One batch holds every prompt, so even the padding columns are computed exactly as in the full forward.
    trace = run(lm, PROMPTS, capture=every_resid(lm), positions="all", batch_size=len(PROMPTS))
    assert torch.equal(trace[resid(n_layers)], seen[0])
    # transformers ties hidden_states[-1] to the post-norm state; the earlier ones are block inputs.
    for layer in range(n_layers):
        torch.testing.assert_close(trace[resid(layer)], out.hidden_states[layer], **EXACT)
    torch.testing.assert_close(decode(lm, trace[resid(n_layers)][:, -1]), out.logits[:, -1], **CLOSE)
    torch.testing.assert_close(trace.logits, out.logits[:, -1], **CLOSE)


def test_resid_is_the_sum_of_embeddings_and_every_block_output(lm):
    n_layers = layout(lm).n_layers
    trace = run(lm, PROMPTS, capture=list_components(lm, ("resid", "attn", "mlp")), positions="all", batch_size=2)
    stream = trace[resid(0)]
    for layer in range(n_layers):
        # Gemma 3 / OLMo2: attn and mlp are captured after their post-norms, which is what the block adds.
        stream = stream + trace[attn(layer)] + trace[mlp(layer)]
        torch.testing.assert_close(stream, trace[resid(layer + 1)], **EXACT)


def test_heads_through_the_output_projection_make_the_attention_output(arch):
    name, lm = arch
    parts = layout(lm)
    layer = parts.n_layers - 1
    heads = [head(layer, h) for h in range(parts.n_heads)]
    trace = run(lm, PROMPTS, capture=heads + [attn(layer)], positions="all", batch_size=len(PROMPTS))
    o_proj = parts.block(layer).get_submodule(parts.arch.o_proj)
    weight_name = f"{parts.block_path(layer, parts.arch.o_proj)}.weight"
    with torch.inference_mode():
        total = o_proj(torch.zeros(parts.n_heads * parts.head_dim))  # the projection's bias (GPT-2, OLMo here), or zeros
        for component in heads:
            axis, columns = head_indices(lm, component)[weight_name]
            own_weight = o_proj.weight.index_select(axis, columns)
            total = total + trace[component] @ (own_weight.T if axis == 1 else own_weight)
        # With a post-attention norm the identity is norm(sum of heads through o_proj) == attn[l].
        # GPT-2's resid_dropout after c_proj is the identity in eval, like every dropout here.
        expected = parts.block(layer).get_submodule(parts.arch.attn[-1])(total) if name in POST_NORM else total
    torch.testing.assert_close(expected, trace[attn(layer)], **CLOSE)


@pytest.mark.parametrize("positions", ["last", "all", [-1, 0], 1])
def test_patching_a_component_with_its_own_value_changes_nothing(lm, positions):
    parts = layout(lm)
    components = [resid(0), resid(1), resid(parts.n_layers), attn(0), mlp(1), head(1, parts.n_heads - 1)]
    reference = run(lm, PROMPTS, capture=components, positions=positions, batch_size=2)
    for component in components:
        patched = run(lm, PROMPTS, interventions=[Patch(component, reference[component], positions)], batch_size=2)
        torch.testing.assert_close(patched.logits, reference.logits, **EXACT)
    added = run(lm, PROMPTS, interventions=[Patch(mlp(0), torch.zeros(parts.d_model), positions, mode="add")], batch_size=2)
    torch.testing.assert_close(added.logits, reference.logits, **EXACT)


def test_adding_to_mlp_moves_the_next_resid_by_that_vector_at_that_position_only(lm):
    parts = layout(lm)
    layer = 0
    vector = torch.linspace(-1, 1, parts.d_model)
    captures = [resid(layer), resid(layer + 1)]
    before = run(lm, PROMPTS, capture=captures, positions="all", batch_size=2)
    after = run(lm, PROMPTS, capture=captures, positions="all", batch_size=2,
                interventions=[Patch(mlp(layer), vector, "last", mode="add")])
    torch.testing.assert_close(after[resid(layer)], before[resid(layer)], **EXACT)
    expected = before[resid(layer + 1)].clone()
    expected[:, -1] += vector
    torch.testing.assert_close(after[resid(layer + 1)], expected, **EXACT)


def test_batched_left_padded_runs_equal_one_prompt_at_a_time(lm):
    parts = layout(lm)
    components = [resid(1), attn(0), mlp(parts.n_layers - 1), head(0, 1)]
    batched = run(lm, PROMPTS, capture=components, positions="all", batch_size=3)
    lens = logit_lens(lm, PROMPTS, batch_size=3)
    for i, prompt in enumerate(PROMPTS):
        alone = run(lm, [prompt], capture=components, positions="all")
        width = alone.attention_mask.shape[1]
        for component in components:
            torch.testing.assert_close(batched[component][i, -width:], alone[component][0], **CLOSE)
        torch.testing.assert_close(batched.logits[i], alone.logits[0], **CLOSE)
        torch.testing.assert_close(lens[i], logit_lens(lm, [prompt])[0], **CLOSE)
    assert torch.equal(batched.attention_mask.sum(1), torch.tensor([len(r) for r in tokenize_prompts(lm.tokenizer, PROMPTS)]))


def test_logit_lens_ends_at_the_models_logits_and_ranks_match_argsort(lm):
    n_layers = layout(lm).n_layers
    out = full_forward(lm, PROMPTS)
    model_logits = out.logits[:, -1]
    lens = logit_lens(lm, PROMPTS, batch_size=2)
    assert lens.shape == (len(PROMPTS), n_layers + 1, model_logits.shape[-1])
    torch.testing.assert_close(lens[:, n_layers], model_logits, **CLOSE)
    domain = torch.tensor([5, 3, 17, 8])
    restricted = logit_lens(lm, PROMPTS, layers=[0, n_layers], token_ids=domain)
    torch.testing.assert_close(restricted[:, 1], model_logits[:, domain], **CLOSE)
    torch.testing.assert_close(restricted[:, 0], lens[:, 0, domain], **CLOSE)

    targets = torch.tensor([5, 3, 17, 8, 0])
    ranks = token_ranks(lm, PROMPTS, targets, chunk=7, batch_size=2)  # several chunks, targets in different ones
    order = lens.argsort(-1, descending=True)
    expected = (order == targets[:, None, None]).float().argmax(-1)
    assert torch.equal(ranks, expected)


def test_ranks_of_several_tokens_under_interventions_and_of_any_stream_state(llama_lm):
    lm = llama_lm
    targets = torch.tensor([[5, 3], [17, 8], [0, 1], [9, 9], [4, 20]])
    several = token_ranks(lm, PROMPTS, targets, chunk=7, batch_size=2)
    for column in range(2):
        assert torch.equal(several[..., column], token_ranks(lm, PROMPTS, targets[:, column], chunk=7, batch_size=2))
    added = [Patch(mlp(0), torch.linspace(-1, 1, layout(lm).d_model), mode="add")]
    lens = logit_lens(lm, PROMPTS, interventions=added)
    torch.testing.assert_close(lens[:, -1], run(lm, PROMPTS, interventions=added).logits, **CLOSE)
    expected = (lens.argsort(-1, descending=True) == targets[:, :1, None]).float().argmax(-1)
    assert torch.equal(token_ranks(lm, PROMPTS, targets[:, 0], interventions=added, chunk=7), expected)
    # Between block 1's attention and its FFN: a state no resid[l] holds.
    trace = run(lm, PROMPTS, capture=[resid(1), attn(1)])
    between = trace[resid(1)] + trace[attn(1)]
    expected = (decode(lm, between).argsort(-1, descending=True) == targets[:, :1]).float().argmax(-1)
    assert torch.equal(hidden_ranks(lm, between[:, None], targets[:, 0], chunk=7)[:, 0], expected)


def test_ablations_equal_the_patches_they_stand_for(lm):
    d_model = layout(lm).d_model
    zeroed = run(lm, PROMPTS, interventions=[Ablate(mlp(0))], batch_size=2)
    patched = run(lm, PROMPTS, interventions=[Patch(mlp(0), torch.zeros(d_model))], batch_size=2)
    assert torch.equal(zeroed.logits, patched.logits)

    mean = mean_activation(lm, PROMPTS, mlp(1), batch_size=2)
    torch.testing.assert_close(mean, run(lm, PROMPTS, capture=[mlp(1)])[mlp(1)].mean(0), **EXACT)
    ablated = run(lm, PROMPTS, capture=[mlp(1)], interventions=[Ablate(mlp(1), "mean", mean)], batch_size=2)
    replaced = run(lm, PROMPTS, interventions=[Patch(mlp(1), mean)], batch_size=2)
    assert torch.equal(ablated.logits, replaced.logits)
    assert torch.equal(ablated[mlp(1)], mean.expand(len(PROMPTS), -1))


@pytest.mark.parametrize("frozen", [False, True])
def test_one_backward_gives_gradients_that_match_finite_differences(arch, frozen):
    # float64 only partly helps: the RMS norms compute in float32 whatever the model's dtype,
    # so the step is 1% of each activation's scale and the agreement asked for is 1%.
    name, lm = arch
    if name == "gemma2":
        pytest.skip("transformers' Gemma 2 in float64 puts NaN at left-padding positions, which attention spreads to every row")
    lm.model.double().requires_grad_(not frozen)
    components = [mlp(0), mlp(1), attn(0), head(1, 1), resid(1)]
    token_ids = torch.tensor([5, 9])

    def score(trace):
        return (trace.logits[:, 0] - trace.logits[:, 1]).sum()

    trace = run(lm, PROMPTS, capture=components, token_ids=token_ids, grad=True)
    gradients = torch.autograd.grad(score(trace), [trace[c] for c in components])
    generator = torch.Generator().manual_seed(0)
    for component, gradient in zip(components, gradients):
        activation = trace[component].detach()
        step = 1e-2 * activation.std() * torch.randn(activation.shape, generator=generator, dtype=torch.float64)
        up, down = (score(run(lm, PROMPTS, token_ids=token_ids, interventions=[Patch(component, sign * step, mode="add")]))
                    for sign in (1, -1))
        torch.testing.assert_close((gradient * step).sum(), (up - down) / 2, rtol=1e-2, atol=1e-9)


def test_parameters_partition_each_block_and_head_indices_address_the_head(arch):
    _, lm = arch
    parts = layout(lm)
    for layer in range(parts.n_layers):
        block = {f"{parts.arch.blocks}.{layer}.{name}" for name, _ in parts.block(layer).named_parameters()}
        attn_names, mlp_names = set(component_parameters(lm, attn(layer))), set(component_parameters(lm, f"mlp[{layer}]"))
        assert not attn_names & mlp_names
        assert attn_names | mlp_names == block
    layer, index = 1, parts.n_heads - 1
    parameters = component_parameters(lm, head(layer, index))
    indices = head_indices(lm, head(layer, index))
    assert set(parameters) == set(indices)
    named = dict(lm.model.named_parameters())
    assert all(parameters[name] is named[name] for name in parameters)
    # Zeroing head h's output-projection columns is zero-ablating head h everywhere.
    weight_name = f"{parts.block_path(layer, parts.arch.o_proj)}.weight"
    ablated = run(lm, PROMPTS, interventions=[Ablate(head(layer, index), position="all")], batch_size=2)
    axis, columns = indices[weight_name]
    with torch.no_grad():
        parameters[weight_name].index_fill_(axis, columns, 0.0)
    torch.testing.assert_close(run(lm, PROMPTS, batch_size=2).logits, ablated.logits, **CLOSE)


def test_head_indices_hold_the_heads_own_values(lm):
    """Zeroing head h's query/key/value rows zeroes head h's output: its values are all zero, whatever the layout of a fused projection."""
    parts = layout(lm)
    component = head(1, 2)  # under GPT-2's layout GPT-NeoX's head 1 would keep its values by chance; head 2 would not
    o_name = f"{parts.block_path(1, parts.arch.o_proj)}.weight"
    named = dict(lm.model.named_parameters())
    before = run(lm, PROMPTS, capture=[component])[component]
    assert before.abs().max() > 0
    with torch.no_grad():
        for name, (axis, rows) in head_indices(lm, component).items():
            if name != o_name:
                named[name].index_fill_(axis, rows, 0.0)
    after = run(lm, PROMPTS, capture=[component])[component]
    torch.testing.assert_close(after, torch.zeros_like(after), **EXACT)


def test_heads_cover_the_projections_exactly_once(lm):
    parts = layout(lm)
    per_head = [head_indices(lm, head(0, h)) for h in range(parts.n_heads)]
    o_name = f"{parts.block_path(0, parts.arch.o_proj)}.weight"
    columns = torch.cat([indices[o_name][1] for indices in per_head]).sort().values
    assert torch.equal(columns, torch.arange(parts.n_heads * parts.head_dim))
    for name, (axis, rows) in per_head[0].items():
        assert rows.max() < component_parameters(lm, head(0, 0))[name].shape[axis]


def test_component_names_round_trip():
    for text in ("resid[0]", "mlp[3]", "attn[12]", "head[3,2]"):
        assert str(Component.parse(text)) == text
    assert Component.parse("head[3, 2]") == head(3, 2)
    assert Component.parse("mlp[3]") == mlp(3)


def test_unmapped_architecture_raises_one_line(lm, monkeypatch):
    model_type = lm.model.config.model_type
    monkeypatch.delitem(ARCHITECTURES, model_type)
    with pytest.raises(LincorrError) as error:
        run(lm, PROMPTS, capture=[mlp(0)])
    message = str(error.value)
    assert "\n" not in message and f"'{model_type}'" in message and "supported" in message and "ArchMap" in message


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda lm: run(lm, PROMPTS, capture=[mlp(2)]), "0..1"),
        (lambda lm: run(lm, PROMPTS, capture=[resid(3)]), "0..2"),
        (lambda lm: run(lm, PROMPTS, capture=["head[0,4]"]), "0..3"),
        (lambda lm: run(lm, PROMPTS, capture=["mlp3"]), "head[l,h]"),
        (lambda lm: run(lm, PROMPTS, capture=["head[1]"]), "head[l,h]"),
        (lambda lm: run(lm, PROMPTS, capture=[mlp(0)], positions=[-4]), "-3..2"),
        (lambda lm: run(lm, PROMPTS, capture=[mlp(0)], positions="first"), "'last', 'all'"),
        (lambda lm: run(lm, PROMPTS, interventions=[Patch(mlp(0), torch.zeros(7))]), "[32]"),
        (lambda lm: run(lm, PROMPTS, interventions=[Patch(mlp(0), torch.zeros(32), mode="mul")]), "'add'"),
        (lambda lm: run(lm, PROMPTS, interventions=[Ablate(mlp(0), "mean")]), "mean_activation"),
        (lambda lm: component_parameters(lm, resid(1)), "no parameters"),
        (lambda lm: token_ranks(lm, PROMPTS, [1, 2]), "one token id per prompt"),
    ],
)
def test_user_mistakes_raise_lincorr_errors(llama_lm, call, needle):
    with pytest.raises(LincorrError) as error:
        call(llama_lm)
    assert needle in str(error.value) and "\n" not in str(error.value)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in llama_lm.model.modules())
