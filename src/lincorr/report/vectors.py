"""The report's sections of the vector-arithmetic studies (Merullo et al.): the logit lens, o-vectors, FFN ablation, and o-vectors against W.

A logit-lens result (`lincorr lens`'s lens.json) is also recognised by its content in a directory
that records no study: a JSON object with `layers` (the lens layers) and per-layer curves as long,
named `*_rr`, `*_top1`, `*_rank` or `*_accuracy`.
"""

from __future__ import annotations

from pathlib import Path

from lincorr.report import figures
from lincorr.report.files import ANY, NUMBER, REAL, SCALAR, TEXT, Items, Maybe, checked, read_document
from lincorr.report.page import Figure, KeyNumbers, Section
from lincorr.report.sections import plotted, read_provenance, scalar_fields, shown

LENS_CURVE_SUFFIXES = ("_rr", "_top1", "_rank", "_accuracy")


def lens_curves(document) -> dict[str, list[float]]:
    """The per-layer curves of a logit-lens result (empty for any other JSON)."""
    if not isinstance(document, dict) or not isinstance(document.get("layers"), list):
        return {}
    return {key: value for key, value in document.items() if key.endswith(LENS_CURVE_SUFFIXES) and isinstance(value, list)
            and len(value) == len(document["layers"]) and all(v is None or isinstance(v, (int, float)) for v in value)}


def read_lens(directory: Path, path: Path, document: dict) -> Section:
    """A logit-lens result (`lincorr lens` writes lens.json): its curves over the lens layers, the crossing marked."""
    checked(document, {"layers": Items(SCALAR)}, path)
    curves = lens_curves(document)
    bounded = all(curve.endswith(("_rr", "_top1", "_accuracy")) for curve in curves)
    task, model = document.get("task"), document.get("model")
    figure = figures.line_figure(document["layers"], {curve.replace("_", " "): [plotted(v) for v in values]
                                                      for curve, values in curves.items()},
                                 f"logit lens{f': {task}' if task else ''}", x_name="lens layer l (resid[l]; the last is the output)",
                                 y_name="reciprocal rank / share", y_range=(0, 1.02) if bounded else None)
    if isinstance(document.get("crossing_layer"), int):
        figure.add_vline(x=document["crossing_layer"], line_dash="dot", line_color="grey", annotation_text="crossing")
    return Section(f"logit lens: {task or path.stem}{f' on {model}' if model else ''}", "lens", str(directory),
                   read_provenance(directory, document), (KeyNumbers(scalar_fields(document)), Figure(figure)))


def read_lens_run(directory: Path) -> Section:
    """`lincorr lens --out`: lens.json."""
    path = directory / "lens.json"
    return read_lens(directory, path, read_document(path, ANY))


CONDITIONS = (("o-vector added", "with"), ("nothing added", "without"), ("other task's o-vector", "other_task"), ("random vector", "random"))
OVECTOR = {"task": ANY, "other_task": ANY, "model": ANY, "layer": SCALAR, "scale": REAL, "n_pairs": SCALAR, "transfer_argument": ANY,
           **{f"{kind}_{key}": NUMBER for kind in ("accuracy", "rr") for _, key in CONDITIONS},
           **{key: NUMBER for key in ("transfer_accuracy", "transfer_rr", "copy_without", "copy_with", "p_vs_other_task", "p_vs_random")},
           "protocol": Maybe(TEXT),
           "by_context": Maybe(Items({"context": TEXT, **{f"accuracy_{key}": NUMBER for _, key in CONDITIONS},
                                      "p_over_every_control": NUMBER})),
           }
PROTOCOLS = {"paper": "one solved prompt's mlp[L] replacing every FFN from block L - 1 on, BOS kept",
             "averaged": "the mean mlp[L] of several solved prompts, added once at L"}


def context_numbers(result: dict) -> tuple[tuple[str, str], ...]:
    """The protocol, and one line per context kind: each condition's accuracy and the p-value over every control."""
    protocol = result.get("protocol") or "averaged"
    rows = tuple((f"{row['context']} contexts", ", ".join(f"{name} {shown(row[f'accuracy_{key}'], '.2f')}" for name, key in CONDITIONS)
                  + f"; p {shown(row['p_over_every_control'], '.2g')} over every control") for row in result.get("by_context") or ())
    return (("protocol", f"{protocol}: {PROTOCOLS.get(protocol, protocol)}"), *rows)


def read_ovector(directory: Path) -> Section:
    """`lincorr ovector --out`: accuracy and reciprocal rank of the answer with the o-vector, without it and with the controls."""
    result = read_document(directory / "ovector.json", OVECTOR)
    figure = figures.grouped_bar_figure([name for name, _ in CONDITIONS], {
        "accuracy": [plotted(result[f"accuracy_{key}"]) for _, key in CONDITIONS],
        "reciprocal rank": [plotted(result[f"rr_{key}"]) for _, key in CONDITIONS]},
        f"{result['task']} o-vector at mlp[{result['layer']}] x {result['scale']:g} ({result.get('protocol') or 'averaged'}) "
        f"on {result['n_pairs']} {(result.get('by_context') or [{'context': 'copy'}])[0]['context']} contexts",
        y_name="share / mean reciprocal rank", y_range=(0, 1.02))
    numbers = KeyNumbers((
        ("o-vector", f"{result['task']} at mlp[{result['layer']}] x {result['scale']:g}; control task {result['other_task']}"),
        ("paired tests", f"p {shown(result['p_vs_other_task'], '.2g')} against the other task's vector, "
                         f"p {shown(result['p_vs_random'], '.2g')} against a random one"),
        ("one pair's vector", f"{result['transfer_argument']}: accuracy {shown(result['transfer_accuracy'], '.2f')}"),
        ("argument copied", f"{shown(result['copy_without'], '.2f')} without, {shown(result['copy_with'], '.2f')} with the o-vector"),
        *context_numbers(result),
    ))
    return Section(f"o-vector: {result['task']} on {result['model']}", "ovector", str(directory), read_provenance(directory, result),
                   (numbers, Figure(figure)))


FFN_ABLATION = {"task": ANY, "model": ANY, "from_layer": SCALAR, "how": ANY, "n_pairs": SCALAR, "n_layers_ablated": SCALAR,
                **{f"{kind}_{when}": NUMBER for kind in ("abstractive", "extractive") for when in ("before", "after")},
                "p_abstractive_hurt_more": NUMBER}


def read_ffn_ablation(directory: Path) -> Section:
    """`lincorr ffn-ablate --out`: accuracy on the task (abstractive) and on its extractive control, before and after the ablation."""
    result = read_document(directory / "ffn_ablation.json", FFN_ABLATION)
    figure = figures.grouped_bar_figure(["abstractive (the task)", "extractive (the control)"], {
        when: [plotted(result[f"{kind}_{when}"]) for kind in ("abstractive", "extractive")] for when in ("before", "after")},
        f"{result['how']}-ablating mlp[{result['from_layer']}..] ({result['n_layers_ablated']} FFNs), {result['task']}",
        y_name="accuracy", y_range=(0, 1.02))
    numbers = KeyNumbers((("ablated", f"{result['how']} outputs of {result['n_layers_ablated']} FFNs from mlp[{result['from_layer']}]"),
                          ("pairs", str(result["n_pairs"])),
                          ("abstractive hurt more", f"p {shown(result['p_abstractive_hurt_more'], '.2g')} (one-sided exact McNemar)")))
    return Section(f"FFN ablation: {result['task']} on {result['model']}", "ffn-ablate", str(directory), read_provenance(directory, result),
                   (numbers, Figure(figure)))


OVECTOR_W = {"task": ANY, "relation": ANY, "model": ANY, "layer": SCALAR, "n_subjects": SCALAR, "n_domain": SCALAR, "n_shuffles": SCALAR,
             **{key: NUMBER for key in ("r_mean", "control_r_mean", "control_r_95", "p_value", "effect_hit1", "w_hit1", "w_labelwise_r")}}


def read_ovector_w(directory: Path) -> Section:
    """`lincorr ovector-w --out`: r between the o-vector's effect and W's row, same subject against W's rows shuffled."""
    result = read_document(directory / "ovector_w.json", OVECTOR_W)
    figure = figures.bar_figure(["same subject", "W rows shuffled (mean)", "W rows shuffled (95th percentile)"],
                                [plotted(result[key]) for key in ("r_mean", "control_r_mean", "control_r_95")],
                                f"{result['task']} o-vector against W of {result['relation']}", value_name="mean r(effect, W row)")
    numbers = KeyNumbers((("subjects", f"{result['n_subjects']} subjects, {result['n_domain']} target words, mlp[{result['layer']}]"),
                          ("p", f"{shown(result['p_value'], '.3g')} over {result['n_shuffles']} shuffles"),
                          ("top word right", f"o-vector effect {shown(result['effect_hit1'], '.2f')}, W row {shown(result['w_hit1'], '.2f')}"),
                          ("W's own label-wise r", shown(result["w_labelwise_r"]))))
    return Section(f"o-vector against W: {result['task']}, {result['relation']} on {result['model']}", "ovector-w", str(directory),
                   read_provenance(directory, result), (numbers, Figure(figure)))
