"""The step behind `merullo.scale`: the mechanism at each size of a bundled size series (`reproduce.series`).

The paper finds the mechanism from GPT-2 small to BLOOM. Here it is the protocol of `merullo.ovector.*` (the lens picks
the block, the o-vector of each source prompt replaces the FFNs from one block earlier on) run at every size of the
series, through `task_runs` and `over_control`: each size's sources raise the answer above no vector, each size its own
line. The averaged vector is the variant, as for the o-vector claims.
"""

from __future__ import annotations

from collections.abc import Callable

from lincorr.reproduce.merullo.steps import averaged_test, over_control, task_layer, task_runs
from lincorr.reproduce.series import Member, per_size
from lincorr.reproduce.step import Context, Measured
from lincorr.reproduce.verdicts import Test, all_of, relabelled
from lincorr.studies.vectors.sources import SourceRuns

COMMAND = "lincorr reproduce merullo --model {model} --only merullo.scale"


def mechanism_by_size(ctx: Context) -> Measured:
    """The settings' `task` o-vector on its `context` contexts above no vector, over sources, at every size of the `series`."""
    name, kind = str(ctx.settings["task"]), str(ctx.settings["context"])
    sizes = per_size(ctx, COMMAND, lambda size: (task_layer(size, name), task_runs(size, name)))
    ours = {"series": str(ctx.settings["series"]), "task": name, "context": kind, "sizes": [
        {"model": member.alias, "layer": layer, "layer_from": origin, "sources": list(runs.sources), "n_contexts": len(runs.context_arguments),
         **{condition: runs.described(kind)[condition] for condition in ("none", "with", "averaged")}}
        for member, ((layer, origin), runs) in sizes]}
    text = "; ".join(f"{row['model']} mlp[{row['layer']}] ({row['layer_from']}): answer RR none {row['none']['rr']:.3f} -> "  # type: ignore[index]  # rows are the dicts built just above
                     f"with {row['with']['rr']:.3f}, top-1 {row['none']['top1']:.2f} -> {row['with']['top1']:.2f}"  # type: ignore[index]  # rows are the dicts built just above
                     for row in ours["sizes"]) + f" ({len(sizes)} sizes: the mechanism at each, not a trend)"
    return Measured(ours, text, each_size(sizes, lambda runs: over_control(runs, kind, "none", ctx.interest)),  # type: ignore[arg-type]  # a list of these pairs, read only
                    each_size(sizes, lambda runs: averaged_test(runs, kind, ctx.interest)))  # type: ignore[arg-type]  # a list of these pairs, read only


def each_size(sizes: list[tuple[Member, tuple[object, SourceRuns]]], test_of: Callable[[SourceRuns], Test]) -> Test:
    """`test_of` each size's runs, every size its own line named by its alias; all must hold."""
    return all_of([relabelled(test, f"{member.alias}: {test.name}") for member, (_, runs) in sizes for test in [test_of(runs)]],
                  "sizes")


STEPS = {"merullo_scale": mechanism_by_size}
