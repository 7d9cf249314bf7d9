"""`lincorr models`: the bundled models, what each is, where it comes from, and whether it is ready on this machine."""

from __future__ import annotations

from lincorr.cli.options import add_command, add_json_option, print_json


def add_commands(commands) -> None:
    models = add_command(commands, "models")
    add_json_option(models)
    models.set_defaults(handler=run_models)


def packages_text(bundle) -> str:
    first, last = bundle.chunks[0].package, bundle.chunks[-1].package
    if len(bundle.chunks) == 1:
        return f"{first}=={bundle.version}"
    return f"{first} .. {last} =={bundle.version} ({len(bundle.chunks)} packages, each a chunk of the GGUF file)"


def fine_tuning_peaks() -> dict[str, float]:
    """Each paper's fine-tuning peak in multiples of the model's weights (its claims.yaml `fine_tuning_memory`), where it has one."""
    from lincorr.reproduce.claims import known_papers, load_paper

    peaks = {paper: load_paper(paper).fine_tuning_peak for paper in known_papers()}
    return {paper: peak for paper, peak in peaks.items() if peak is not None}


def run_models(args) -> None:
    from lincorr.bundled import DEFAULT_MODEL, bundled_status, install_command, machine_memory
    from lincorr.cli.cache import checked_root
    from lincorr.reading import human_size

    checked_root()
    rows = bundled_status()
    machine, peaks = machine_memory(), fine_tuning_peaks()

    def fine_tuning_bytes(run_bytes: int) -> dict[str, int]:
        return {paper: int(peak * run_bytes) for paper, peak in peaks.items()}

    if args.json:
        print_json([{"alias": r.model.alias, "formerly": r.model.formerly, "family": r.model.family, "size": r.model.size,
                     "tuning": r.model.tuning, "quantisation": r.model.quantisation, "tensors": r.model.tensors,
                     "license": r.model.license, "series": r.model.series, "packages": list(r.model.requirements), "sha256": r.model.sha256,
                     "installed": r.installed, "converted": r.converted, "convert_bytes": r.convert_bytes,
                     "run_bytes": r.run_bytes, "fine_tuning_bytes": fine_tuning_bytes(r.run_bytes), "machine_bytes": machine,
                     "default": r.model.alias == DEFAULT_MODEL} for r in rows])
        return
    for r in rows:
        bundle = r.model
        notes = [f"formerly {bundle.formerly}"] if bundle.formerly else []
        notes += [f"size series {bundle.series}"] if bundle.series else []
        notes += ["the default"] if bundle.alias == DEFAULT_MODEL else []
        print(f"{bundle.alias}" + (f" ({', '.join(notes)})" if notes else ""))
        print(f"  {bundle.family} {bundle.size}, {bundle.tuning}, {bundle.quantisation} GGUF (tensors: {bundle.tensors})")
        print(f"  license: {bundle.license}")
        print(f"  from: {packages_text(bundle)}")
        print(f"  installed: {'yes' if r.installed else 'no'}   converted: {'yes' if r.converted else 'no'}   memory: "
              f"about {human_size(r.convert_bytes)} to convert, {human_size(r.run_bytes)} of float32 weights to run")
        if not r.installed:
            print(f"  to install: {install_command(bundle.requirements)}")
        tuning = [f"{human_size(needed)} for {paper}'s claims" + (" (more than this machine's)" if needed > machine else "")
                  for paper, needed in fine_tuning_bytes(r.run_bytes).items()]
        print(f"  to fine-tune: about {', '.join(tuning)}; this machine has {human_size(machine)}")
