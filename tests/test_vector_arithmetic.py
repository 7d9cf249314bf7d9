"""The vector-arithmetic studies on tiny in-code models, checked against plain one-prompt-at-a-time re-implementations."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.precision import correlation_atol, tiny_forward_atol
from helpers.tiny import tiny_gemma3, tiny_llama
from helpers.vectors import EXTRACTIVE, TEMPLATE, added_at_last, cycled_task, hooked, last_outputs, planted_task, rank, task

from lincorr.errors import LincorrError
from lincorr.studies.vectors.arithmetic import crossing_component, crossing_layer, ffn_ablate, lens, other_task, ovector, pair_order
from lincorr.tasks import bind_task, copy_prompts, extractive_prompts, fewshot_prompts, task_survival
from lincorr.knowledge import load_registry
from lincorr.models import wrap_model

pytestmark = pytest.mark.usefixtures("single_thread")
@pytest.fixture(params=["llama", "gemma3"])
def lm(request, tokenizer):
    """Llama (plain head) and Gemma 3 (post-norm FFN, soft-capped head)."""
    build = {"llama": tiny_llama, "gemma3": tiny_gemma3}[request.param]
    return wrap_model(build(len(tokenizer)), tokenizer, name=f"tiny-{request.param}")


@pytest.fixture
def llama(tokenizer):
    return wrap_model(tiny_llama(len(tokenizer)), tokenizer, name="tiny-llama")


def own_logits(lm, prompt):
    """[n_layers + 1, vocab] lens logits and [n_layers, vocab] mid-block logits of one prompt, by hand.

    A plain HF forward with output_hidden_states and hooks (no lincorr code): hidden_states[l] is
    block l's input, the final norm's input is the last stream, the state between a block's
    attention and its FFN is the next stream minus the FFN's output, and the last layer is the
    model's own logits.
    """
    model = lm.model
    layers = model.model.layers
    ffn_path = "post_feedforward_layernorm" if hasattr(layers[0], "post_feedforward_layernorm") else "mlp"
    outputs, last = [], []
    handles = [layer.get_submodule(ffn_path).register_forward_hook(lambda _m, _a, out: outputs.append(out[0, -1].clone()))
               for layer in layers]
    handles.append(model.model.norm.register_forward_pre_hook(lambda _m, args: last.append(args[0][0, -1].clone())))
    try:
        with torch.inference_mode():
            out = model(**lm.tokenizer(prompt, return_tensors="pt"), output_hidden_states=True)
    finally:
        for handle in handles:
            handle.remove()

    def head(h):
        logits = model.lm_head(model.model.norm(h))
        cap = getattr(model.config, "final_logit_softcapping", None)
        return torch.tanh(logits / cap) * cap if cap else logits

    with torch.inference_mode():
        streams = [out.hidden_states[l][0, -1] for l in range(len(layers))] + last
        lens_logits = torch.stack([head(h) for h in streams[:-1]] + [out.logits[0, -1]])
        mid = torch.stack([head(streams[l + 1] - outputs[l]) for l in range(len(layers))])
    return lens_logits, mid


def test_lens_equals_a_one_prompt_one_layer_loop(lm):
    spec = cycled_task()
    result = lens(lm, spec, n_pairs=10, batch_size=4)
    bound = bind_task(spec, lm.tokenizer)
    indices = pair_order(bound, 0)[:10]
    argument_rr, answer_rr, top1, mid_argument, mid_answer, greedy = [], [], [], [], [], []
    for index, prompt in zip(indices, fewshot_prompts(bound, indices)):
        pair = bound.pairs[index]
        logits, mid = own_logits(lm, prompt)
        answer_ranks = [[rank(row, t) for t in pair.answer_ids] for row in logits]
        argument_rr.append([1 / (1 + rank(row, pair.argument_id)) for row in logits])
        answer_rr.append([1 / (1 + min(r)) for r in answer_ranks])
        top1.append([min(r) == 0 for r in answer_ranks])
        mid_argument.append([1 / (1 + rank(row, pair.argument_id)) for row in mid])
        mid_answer.append([1 / (1 + min(rank(row, t) for t in pair.answer_ids)) for row in mid])
        greedy.append(int(logits[-1].argmax()) in pair.answer_ids)
    assert result.layers == list(range(3))
    # Ranks are integers: batched and alone they agree unless another logit lies within float32 rounding (~1e-6) of the
    # ranked one, which none does here (make test-isa runs this under three instruction sets); rtol covers the mean.
    np.testing.assert_allclose(result.argument_rr, np.mean(argument_rr, 0), rtol=1e-6)
    np.testing.assert_allclose(result.answer_rr, np.mean(answer_rr, 0), rtol=1e-6)
    np.testing.assert_allclose(result.answer_top1, np.mean(top1, 0))
    np.testing.assert_allclose(result.mid_argument_rr, np.mean(mid_argument, 0), rtol=1e-6)
    np.testing.assert_allclose(result.mid_answer_rr, np.mean(mid_answer, 0), rtol=1e-6)
    # The last lens layer is the model's own output: its top-1 share is the greedy accuracy.
    assert result.final_accuracy == np.mean(greedy)
    assert result.crossing_layer == crossing_layer(result.argument_rr, result.answer_rr)
    assert result.crossing_component == crossing_component(result.crossing_layer, result.argument_rr, result.answer_rr,
                                                           result.mid_argument_rr, result.mid_answer_rr)


@pytest.mark.parametrize("argument, answer, floor, expected", [
    ([0.0, 0.05, 0.5, 0.4, 0.2], [0.0, 0.02, 0.3, 0.6, 0.9], 0.1, 3),  # the paper's shape: argument first, then the answer
    ([2e-4, 1e-4, 0.6, 0.5], [1e-4, 3e-4, 0.3, 0.4], 0.1, None),  # ahead only where the lens reads noise
    ([1e-4, 0.02, 0.5, 0.3], [1e-4, 0.05, 0.7, 0.9], 0.1, 2),  # ahead from the first readable layer on
    ([0.0, 0.3, 0.3], [0.0, 0.3, 0.2], 0.1, None),  # a tie is not a crossing
    ([0.0, 0.05, 0.5], [0.0, 0.06, 0.9], 0.01, 1),  # a lower floor reads earlier layers
])
def test_crossing_layer_on_planted_curves(argument, answer, floor, expected):
    assert crossing_layer(argument, answer, floor) == expected


@pytest.mark.parametrize("argument, answer, mid_argument, mid_answer, expected", [
    ([0.0, 0.3, 0.2], [0.0, 0.1, 0.6], [0.0, 0.5], [0.0, 0.2], "mlp"),  # after block 1's attention the argument still leads
    ([0.0, 0.3, 0.2], [0.0, 0.1, 0.6], [0.0, 0.2], [0.0, 0.5], "attn"),  # the attention already put the answer ahead
    ([0.0, 0.05, 0.2], [0.0, 0.08, 0.6], [0.0, 0.5], [0.0, 0.2], "mlp"),  # led below the floor, but the attention brought the argument
    ([0.0, 0.05, 0.2], [0.0, 0.08, 0.6], [0.0, 0.1], [0.0, 0.2], None),  # the answer led before block 1 and after its attention
])
def test_crossing_component_names_the_sub_layer_that_flipped_the_order(argument, answer, mid_argument, mid_answer, expected):
    crossing = crossing_layer(argument, answer)
    assert crossing == 2 and crossing_component(crossing, argument, answer, mid_argument, mid_answer) == expected
    assert crossing_component(None, argument, answer, mid_argument, mid_answer) is None


def but_bos(replacement):
    """A hook edit applying `replacement` at every position but the first (BOS), which keeps the FFN's own output."""
    def edit(out):
        out = out.clone()
        out[:, 1:] = replacement(out[:, 1:])
        return out

    return edit


def ablated_accuracy(lm, bound, indices, prompts, from_layer, replacement):
    """Greedy accuracy with every FFN from `from_layer` on replaced at every position but BOS, one prompt at a time."""
    with contextlib.ExitStack() as stack:
        for layer in lm.model.model.layers[from_layer:]:
            stack.enter_context(hooked(layer.mlp, but_bos(replacement)))
        hits = [int(lm.model(**lm.tokenizer(p, return_tensors="pt")).logits[0, -1].argmax()) in bound.pairs[i].answer_ids
                for i, p in zip(indices, prompts)]
    return float(np.mean(hits))


def test_zero_and_mean_ablation_equal_replacing_the_ffn_outputs_by_hand(llama):
    spec = planted_task(llama, 0, 40, "toy")
    bound = bind_task(spec, llama.tokenizer)
    order = pair_order(bound, 0)
    reference, evaluation = order[:4], order[4:14]
    abstractive, extractive = fewshot_prompts(bound, evaluation), extractive_prompts(bound, evaluation)
    zero = ffn_ablate(llama, spec, 1, "zero", n_pairs=10, n_reference=4)
    assert zero.n_layers_ablated == 1 and zero.n_pairs == 10
    assert zero.abstractive_before == 1.0  # planted: every zero-shot prompt is solved
    assert zero.abstractive_after == ablated_accuracy(llama, bound, evaluation, abstractive, 1, torch.zeros_like)
    assert zero.extractive_after == ablated_accuracy(llama, bound, evaluation, extractive, 1, torch.zeros_like)

    captured = []
    with hooked(llama.model.model.layers[1].mlp, lambda out: captured.append(out[0].clone())):
        for prompt in fewshot_prompts(bound, reference):
            llama.model(**llama.tokenizer(prompt, return_tensors="pt"))
    mean = torch.cat([out[1:] for out in captured]).mean(0)  # over every real token of the reference prompts but BOS
    by_mean = ffn_ablate(llama, spec, 1, "mean", n_pairs=10, n_reference=4)
    assert by_mean.abstractive_after == ablated_accuracy(llama, bound, evaluation, abstractive, 1, lambda out: mean.expand_as(out).clone())
    assert by_mean.abstractive_before == zero.abstractive_before and by_mean.extractive_before == zero.extractive_before


def strict_json(payload) -> dict:
    def refuse(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(json.dumps(payload, allow_nan=False), parse_constant=refuse)


def test_results_are_strict_json_and_save_whole(llama, tmp_path):
    spec, control = planted_task(llama, 0, 40, "toy"), planted_task(llama, 60, 40, "other")
    results = {
        "lens": lens(llama, spec, n_pairs=6),
        "ovector": ovector(llama, spec, 0, control=control, n_source=3, n_pairs=6),
        "ffn_ablation": ffn_ablate(llama, spec, 0, n_pairs=6, n_reference=3),
    }
    contract = {
        "lens": {"task", "model", "n_pairs", "layers", "argument_rr", "answer_rr", "answer_top1", "crossing_layer", "final_accuracy"},
        "ovector": {"layer", "accuracy_with", "accuracy_without", "accuracy_other_task", "accuracy_random", "per_layer",
                    "transfer_accuracy", "rr_with", "rr_without", "rr_other_task", "rr_random"},
        "ffn_ablation": {"from_layer", "abstractive_before", "abstractive_after", "extractive_before", "extractive_after"},
    }
    for name, result in results.items():
        summary = strict_json(result.summary())
        assert contract[name] <= summary.keys(), name
        assert result.text().strip()
        result.save(tmp_path / name)
        saved = strict_json(json.loads((tmp_path / name / f"{name}.json").read_text()))
        assert saved == summary
        assert {f"{name}.json", f"{name}.csv", f"{name}.png", "provenance.json"} <= {p.name for p in (tmp_path / name).iterdir()}
    assert len(results["lens"].summary()["argument_rr"]) == 3 and len(results["lens"].summary()["mid_answer_rr"]) == 2


def test_user_mistakes_raise_one_clear_line(llama):
    spec, control = planted_task(llama, 0, 40, "toy"), planted_task(llama, 60, 40, "other")
    with pytest.raises(LincorrError, match="outside this 2-block model; use 0..1"):
        ovector(llama, spec, 2, control=control)
    with pytest.raises(LincorrError, match="outside this 2-block model"):
        ffn_ablate(llama, spec, -1)
    with pytest.raises(LincorrError, match="use 'zero' or 'mean'"):
        ffn_ablate(llama, spec, 0, "half")
    with pytest.raises(LincorrError, match="not a kept argument"):
        ovector(llama, spec, 0, control=control, transfer_from="Atlantis")
    with pytest.raises(LincorrError, match="answers none of"):
        ovector(llama, cycled_task(0), 0, control=control, n_source=3)
    with pytest.raises(LincorrError, match="unknown task 'capital'; did you mean capitals"):
        load_registry().task("capital")


def test_binding_drops_answers_that_repeat_the_argument_and_demonstrations_share_no_answer(tokenizer):
    spec = task([("Paris", ["Paris Berlin", "London"]), ("Rome", ["Rome"]), ("Tokyo", ["Japan"]), ("Berlin", ["Germany"]),
                 ("name1", ["Japan"]), ("name2", ["France"]), ("name3", ["Italy"])], demonstrations=2)
    bound = bind_task(spec, tokenizer)
    assert [(p.argument, p.answers) for p in bound.pairs][:2] == [("Paris", ("London",)), ("Tokyo", ("Japan",))]
    assert [argument for argument, _ in bound.dropped] == ["Rome"]
    tokyo = [p.argument for p in bound.pairs].index("Tokyo")
    for seed in range(5):
        shown = bound.demonstrations(tokyo, seed)
        assert len(shown) == 2 and all("Japan" not in p.answers and p.argument != "Tokyo" for p in shown)
    # A pair's prompt depends on the seed and the pair, not on which other pairs are asked.
    assert fewshot_prompts(bound, [tokyo, 0], 3)[0] == fewshot_prompts(bound, [tokyo], 3)[0]
    prompt = fewshot_prompts(bound, [tokyo], 3)[0]
    assert prompt.endswith("the capital of Tokyo is") and prompt.count("\n") == 2
    assert extractive_prompts(bound, [tokyo], 3)[0].endswith("Tokyo capital is Japan the capital of Tokyo is")
    assert copy_prompts(bound, [tokyo]) == ["table, mug, Tokyo, table, mug, Tokyo, table, mug,"]
    assert task_survival(spec, tokenizer)["kept"] == len(bound.pairs)
    with pytest.raises(LincorrError, match="fewer than its 9 demonstrations"):
        fewshot_prompts(bind_task(task(spec.pairs, demonstrations=9), tokenizer), [0])


def test_bundled_tasks_have_100_pairs_with_aliases_and_capitals_is_the_reference():
    registry = load_registry()
    assert [t.name for t in registry.tasks] == ["capitals", "all-caps", "past-tense", "uppercase"]
    for spec in registry.tasks:
        assert len(spec.pairs) >= 100 and spec.demonstrations == 3 and spec.answer_prefix == " ", spec.name
        assert spec.template.count("{}") == 1 and "{x}" in spec.extractive_template and "{y}" in spec.extractive_template
    capitals = registry.task("capitals")
    assert capitals.reference == "country->capital" and capitals.pairs == registry.reference("country->capital").pairs
    assert dict(capitals.pairs)["Bolivia"] == ("Sucre", "La Paz") and dict(registry.task("past-tense").pairs)["dream"] == ("dreamed", "dreamt")
    assert dict(registry.task("uppercase").pairs)["bread"] == ("Bread",) and dict(registry.task("all-caps").pairs)["dog"] == ("DOG",)
    assert dict(registry.task("uppercase").pairs).keys() == dict(registry.task("all-caps").pairs).keys()
    assert capitals.demonstration("Poland", "Warsaw") + capitals.query("China") == (
        "Q: What is the capital of Poland?\nA: Warsaw\nQ: What is the capital of China?\nA:")
    # every task's control is a different function: capitals -> all-caps -> past-tense -> uppercase -> capitals
    assert [other_task(t, registry).name for t in registry.tasks] == ["all-caps", "past-tense", "uppercase", "capitals"]


TASK_FILE = """\
references:
  - name: planet->country
    source_domain: country
    target_domain: country
    pairs:
      France: [Japan]
tasks:
  - name: opposites
    template: "Q: What is the opposite of {}?\\nA:"
    extractive_template: "The opposite of {x} is {y}. Q: What is the opposite of {x}?\\nA:"
    demonstrations: 2
    pairs:
      hot: cold
      up: [down]
  - name: capitals
    template: "{} has the capital"
    extractive_template: "{x}: {y}. {x} has the capital"
    reference: planet->country
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mine.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_user_tasks_add_and_replace_bundled_ones(tmp_path):
    registry = load_registry([write(tmp_path, TASK_FILE)])
    opposites = registry.task("opposites")
    assert opposites.pairs == (("hot", ("cold",)), ("up", ("down",))) and opposites.demonstrations == 2
    assert opposites.query("big") == "Q: What is the opposite of big?\nA:"
    assert opposites.extractive_query("big", "small") == "The opposite of big is small. Q: What is the opposite of big?\nA:"
    assert registry.task("capitals").pairs == (("France", ("Japan",)),)
    assert [t.name for t in registry.tasks] == ["capitals", "all-caps", "past-tense", "uppercase", "opposites"]


@pytest.mark.parametrize("broken, line, needle", [
    (TASK_FILE.replace('    template: "Q: What is the opposite of {}?\\nA:"\n', ""), 8, "missing task field 'template'"),
    (TASK_FILE.replace("the opposite of {}?", "the opposite of {} {}?"), 9, "has 2 '{}' placeholders, not 1"),
    (TASK_FILE.replace("is {y}. Q: What is the opposite", "is. Q: What is the opposite"), 10, "lacks {x} or {y}"),
    (TASK_FILE.replace("    demonstrations: 2\n", "    demonstrations: two\n"), 11, "`demonstrations` of task 'opposites' is 'two'"),
    # '²' and '٣' pass str.isdigit() and then crash int() or read as another number: only ASCII digits are a count.
    (TASK_FILE.replace("    demonstrations: 2\n", "    demonstrations: '²'\n"), 11, "`demonstrations` of task 'opposites' is '²'"),
    (TASK_FILE.replace("    demonstrations: 2\n", "    demonstrations: ٣\n"), 11, "`demonstrations` of task 'opposites' is '٣'"),
    (TASK_FILE.replace("      up: [down]\n", "      up: []\n"), 14, "subject 'up' needs one or more objects"),
    (TASK_FILE.replace("    reference: planet->country\n", "    reference: planet->moon\n"), 18, "names unknown reference 'planet->moon'"),
    (TASK_FILE.replace("    reference: planet->country\n", "    reference: planet->country\n    pairs: {a: b}\n"), 15,
     "needs either `pairs:` or `reference:`"),
    (TASK_FILE.replace("    demonstrations: 2\n", "    demonstrations: 2\n    shots: 2\n"), 12, "unknown task field 'shots'"),
    (TASK_FILE.replace("name: capitals", "name: opposites"), 15, "task 'opposites' is defined twice"),
])
def test_malformed_tasks_name_file_and_line(tmp_path, broken, line, needle):
    path = write(tmp_path, broken)
    with pytest.raises(LincorrError) as error:
        load_registry([path])
    message = str(error.value)
    assert message.startswith(f"{path}:{line}: ") and needle in message, message


W_FILE = """\
prompts:
  - name: country
    family: attribute
    language: en
    template: "{} lives in the country of"
    domain: country
  - name: capital
    family: mechanisms
    language: en
    template: "{} lives in the capital city of"
    domain: capital
domains:
  country: [France, England, Japan, Italy, Germany]
  capital: [Paris, London, Tokyo, Rome, Berlin]
references:
  - name: country->capital
    source_domain: country
    target_domain: capital
    pairs: {France: Paris, England: London, Japan: Tokyo, Italy: Rome, Germany: Berlin}
"""


def test_ovector_w_correlates_the_hooked_effect_with_ws_rows(llama, tmp_path):
    from lincorr.fit import FitConfig, fit_relation
    from lincorr.studies.vectors.ovector_w import CAPITALS, ovector_w

    registry = load_registry([write(tmp_path, W_FILE)])
    spec = planted_task(llama, 0, 40, "capitals")
    fit = FitConfig(estimator="ridge", alpha=1.0, n_boot=10)
    result = ovector_w(llama, registry, spec, 1, scale=2.0, n_source=3, n_inputs=60, fit=fit, n_shuffles=50)
    assert result.subjects == ("France", "England", "Japan", "Italy", "Germany") and result.right[0] == ("Paris",)

    bound = bind_task(spec, llama.tokenizer)
    ffn = llama.model.model.layers[1].mlp
    vector = 2.0 * torch.stack(last_outputs(llama, ffn, fewshot_prompts(bound, pair_order(bound, 0)[:3]))).mean(0)
    ids = [llama.tokenizer.convert_tokens_to_ids(word) for word in result.domain]

    def capital_logits(prompt, added):
        with hooked(ffn, added_at_last(added)):
            return llama.model(**llama.tokenizer(prompt, return_tensors="pt")).logits[0, -1, ids]

    prompts = [f"table, mug, {s}, table, mug, {s}, table, mug," for s in result.subjects]
    effect = np.stack([(capital_logits(p, vector) - capital_logits(p, torch.zeros_like(vector))).numpy() for p in prompts])
    # The library runs the prompts batched and left-padded, this loop one at a time: float32 rounding apart.
    effect_atol = tiny_forward_atol(effect)
    np.testing.assert_allclose(result.effect, effect, atol=effect_atol, rtol=0)
    W = fit_relation(llama, registry, CAPITALS, n_inputs=60, fit=fit).fit.W
    np.testing.assert_array_equal(result.w_rows, W)  # the same fit on the same cached tables; every country a subject, in domain order
    # The correlations, in float64 on the result's own effect and W rows: equal up to float64 rounding.
    centred_effect, centred_w = result.effect - result.effect.mean(0), W - W.mean(0)
    expected = [np.corrcoef(a, b)[0, 1] for a, b in zip(centred_effect, centred_w)]
    np.testing.assert_allclose(result.r, expected, rtol=0, atol=1e-12)
    # Against the loop's effect, r may move by what the effect's float32 rounding allows (near-constant rows amplify it).
    independent = [np.corrcoef(a, b)[0, 1] for a, b in zip(effect - effect.mean(0), centred_w)]
    assert np.all(np.abs(result.r - independent) <= correlation_atol(effect - effect.mean(0), 2 * effect_atol)), (result.r, independent)
    rng = np.random.default_rng(0)
    shuffled = [np.mean([np.corrcoef(a, b)[0, 1] for a, b in zip(centred_effect, centred_w[rng.permutation(5)])]) for _ in range(50)]
    np.testing.assert_allclose(result.control_r_means, shuffled, rtol=0, atol=1e-12)
    summary = strict_json(result.summary())
    assert summary["n_subjects"] == 5 and summary["n_shuffles"] == 50
    # Permutation p: the observed mean r counts as one of the shuffles it is compared with.
    assert summary["p_value"] == pytest.approx((1 + sum(m >= np.mean(expected) for m in shuffled)) / 51)
    result.save(tmp_path / "w")
    assert {"ovector_w.json", "ovector_w.csv", "ovector_w.png"} <= {p.name for p in (tmp_path / "w").iterdir()}


# ---- the command line, on a tiny model saved to disk ----

@pytest.fixture
def cli_workspace(tmp_path, tokenizer):
    """A saved tiny Llama and a registry file with two planted tasks (one named capitals) and the W prompts."""
    lm = wrap_model(tiny_llama(len(tokenizer)), tokenizer, name="tiny-llama")
    lm.model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    lines = [W_FILE, "tasks:"]
    for spec in (planted_task(lm, 0, 40, "capitals"), planted_task(lm, 60, 40, "other")):
        lines += [f"  - name: {spec.name}", f'    template: "{TEMPLATE}"', f'    extractive_template: "{EXTRACTIVE}"',
                  "    demonstrations: 0", "    pairs:"] + [f"      {a}: {b[0]}" for a, b in spec.pairs]
    (tmp_path / "tasks.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tmp_path


def cli(workspace, *args):
    return [*args, "--model", str(workspace / "model"), "--registry", str(workspace / "tasks.yaml"), "--quiet"]


@pytest.mark.parametrize("args, name, fields", [
    (["lens", "capitals", "--n-pairs", "5"], "lens", {"crossing_layer", "argument_rr", "final_accuracy"}),
    (["ovector", "capitals", "--layer", "1", "--control", "other", "--n-source", "3", "--n-pairs", "5", "--sweep"], "ovector",
     {"accuracy_with", "accuracy_random", "transfer_accuracy", "per_layer"}),
    (["ovector", "capitals", "--layer", "0", "--control", "other", "--n-source", "3", "--n-pairs", "5", "--preset", "paper",
      "--contexts", "both"], "ovector", {"protocol", "by_context", "accuracy_with"}),
    (["ffn-ablate", "capitals", "--from-layer", "1", "--mean", "--n-pairs", "5", "--n-reference", "3"], "ffn_ablation",
     {"abstractive_after", "extractive_after"}),
    (["ovector-w", "--layer", "0", "--n-source", "3", "-n", "60", "--n-shuffles", "20"], "ovector_w", {"r_mean", "control_r_mean", "p_value"}),
])
def test_mechanism_commands_print_strict_json_and_save(cli_workspace, capsys, args, name, fields):
    from lincorr.cli import main

    out = cli_workspace / "out"
    assert main(cli(cli_workspace, *args, "--json", "--out", str(out))) == 0
    payload = strict_json(json.loads(capsys.readouterr().out))
    assert fields <= payload.keys()
    assert json.loads((out / f"{name}.json").read_text()) == payload
    assert (out / f"{name}.png").stat().st_size > 0
    assert main(cli(cli_workspace, *args)) == 0
    assert capsys.readouterr().out.strip()


@pytest.mark.parametrize("args, needle", [
    (["lens", "capital"], "unknown task 'capital'; did you mean capitals"),
    (["ovector", "capitals", "--layer", "0", "--control", "nope"], "unknown task 'nope'"),
    (["ffn-ablate", "capitals", "--from-layer", "7"], "--from-layer 7 is outside this 2-block model; use 0..1"),
    (["ovector", "capitals", "--layer", "-1"], "argument --layer: must be at least 0"),
    (["lens", "capitals", "--floor", "1.5"], "argument --floor: must be at least 0 and below 1"),
    (["ovector", "capitals", "--layer", "0", "--protocol", "papers"], "argument --protocol: invalid choice: 'papers'"),
    (["ovector", "capitals", "--layer", "0", "--contexts", "zero"], "argument --contexts: invalid choice: 'zero'"),
])
def test_mechanism_commands_fail_in_one_line(cli_workspace, capsys, monkeypatch, args, needle):
    import lincorr.models
    from lincorr.cli import main

    if "unknown task" in needle:  # a misspelt task fails before the model loads
        monkeypatch.setattr(lincorr.models, "load_model", lambda *a, **k: pytest.fail("loaded the model first"))
    assert main(cli(cli_workspace, *args)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("lincorr: error: ") and needle in err, err


@pytest.mark.parametrize("command, option, name", [("ovector", "--layer", "ovector"), ("ffn-ablate", "--from-layer", "ffn_ablation")])
def test_without_a_layer_the_mechanism_commands_take_the_lens_crossing_block(cli_workspace, capsys, monkeypatch, command, option, name):
    """`lincorr lens T` then `lincorr ovector T` / `ffn-ablate T` with no layer: the block whose sub-layer made the crossing."""
    import lincorr.studies.vectors.arithmetic as arithmetic
    from lincorr.cli import main

    crossing = {"layer": 2, "component": "mlp"}  # planted: the FFN of block 1 made the crossing at resid[2]
    monkeypatch.setattr(arithmetic, "crossing_layer", lambda *a, **k: crossing["layer"])
    monkeypatch.setattr(arithmetic, "crossing_component", lambda *a, **k: crossing["component"])
    assert main(cli(cli_workspace, "lens", "capitals", "--n-pairs", "5", "--json")) == 0
    lens_json = json.loads(capsys.readouterr().out)
    assert (lens_json["crossing_layer"], lens_json["crossing_block"]) == (2, 1)
    extra = ["--n-pairs", "5"] + (["--n-source", "3", "--control", "other"] if command == "ovector" else [])
    assert main(cli(cli_workspace, command, "capitals", *extra, "--json")) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload.get("layer", payload.get("from_layer")) == 1, payload
    # No crossing made by a sub-layer: the command says so and asks for the layer, before any o-vector is computed.
    crossing["component"] = None
    assert main(cli(cli_workspace, command, "capitals", *extra)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no crossing" in err[0], err

