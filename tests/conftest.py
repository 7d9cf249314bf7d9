"""Shared fixtures: tiny in-code models and tokenizers, isolated caches, the bundled models converted once per run.

No test reads or writes the user's own cache (~/.cache/lincorr or LINCORR_CACHE_DIR): the whole session runs with
LINCORR_CACHE_DIR pointing into pytest's temporary directory. Unit tests get a fresh cache each; tests of the real
bundled models (marker `integration`) share one session cache whose `models/` holds the conversions, made on first use
and kept for the run, and whose `logits/` holds the logit tables they collect; tests that need a cache of their own
(another process) get one whose `models/` links to the same conversions, and its `logits/` to the same tables where
the test asks for them.

Under pytest-xdist (`make test` runs `-n auto`) each worker has a session cache of its own, but the conversions are made
once for all workers, under a file lock, in one directory beside theirs, and the tables are kept in another, so a table
one worker collected (the quickstarts' City->Country on gemma-3-270m-q4km: four tests, about 30 s each to collect) is
read by the other (tables are keyed by what computed them, the torch threads included, and written whole by a rename,
so two workers collecting one table at once both write the same file); each worker's torch gets its share of the cores,
and so do the processes it starts (kernels, torchrun ranks, the CLI), since several processes each spinning on every core
run slower than one.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
XDIST_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if XDIST_WORKERS > 1:
    os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // XDIST_WORKERS))  # read by torch on import, and by children

from filelock import FileLock  # noqa: E402

if TYPE_CHECKING:
    from lincorr.reproduce.step import Context

# torch, transformers and lincorr are imported by the fixtures that use them, not here: pytest-xdist's controller loads
# this file before it starts the workers, and loading those first kept both cores idle for about 4 s.


@pytest.fixture(scope="session", autouse=True)
def session_cache(tmp_path_factory) -> Path:
    """The run's cache: the bundled models' conversions (made once per run) and the integration tests' tables.

    Set for the whole session before any other fixture runs, so nothing, module-scoped fixtures included, can fall
    back on the user's cache.
    """
    root = tmp_path_factory.mktemp("lincorr-cache")
    for section in ("models", "logits"):
        if XDIST_WORKERS > 1:  # the workers' base directories share a parent, made for this run
            shared = tmp_path_factory.getbasetemp().parent / f"lincorr-{section}"
            shared.mkdir(exist_ok=True)
            (root / section).symlink_to(shared, target_is_directory=True)
        else:
            (root / section).mkdir()
    previous = os.environ.get("LINCORR_CACHE_DIR")
    os.environ["LINCORR_CACHE_DIR"] = str(root)
    yield root
    if previous is None:
        os.environ.pop("LINCORR_CACHE_DIR", None)
    else:
        os.environ["LINCORR_CACHE_DIR"] = previous


@pytest.fixture(autouse=True)
def isolated_cache(request, session_cache, tmp_path_factory, monkeypatch) -> Path:
    """Unit tests get a fresh cache each; tests of the bundled models share the session's (conversions and tables)."""
    if request.node.get_closest_marker("integration"):
        cache = session_cache
    else:
        cache = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("LINCORR_CACHE_DIR", str(cache))
    return cache


@pytest.fixture
def bundled_cache(session_cache, tmp_path_factory):
    """Make a new cache whose `models/` is the session's converted models, empty but for them (or, `tables=True`, for
    them and the logit tables the run's tests collected): `bundled_cache()` -> its path."""
    def make(tables: bool = False) -> Path:
        root = tmp_path_factory.mktemp("own-cache")
        for section in ("models", "logits") if tables else ("models",):
            (root / section).symlink_to(session_cache / section, target_is_directory=True)
        return root

    return make


class BundledModels:
    """The bundled models, each loaded (and converted, the first time in a run) once per session.

    A test that runs lincorr in another process on a bundled model loads it here first, so that its conversion is made
    under the lock the other workers wait on.
    """

    def __init__(self, cache: Path):
        self.cache = cache
        self.loaded = {}

    def __call__(self, name: str):
        if name not in self.loaded:
            with pytest.MonkeyPatch.context() as patch, FileLock(self.cache / "models" / ".conversion.lock"):
                patch.setenv("LINCORR_CACHE_DIR", str(self.cache))
                from lincorr.models import load_model

                self.loaded[name] = load_model(name)
        return self.loaded[name]


@pytest.fixture(scope="session")
def bundled(session_cache) -> BundledModels:
    """`bundled("gemma-3-270m-q4km")` -> the loaded LM, shared by every test of the run."""
    return BundledModels(session_cache)


@pytest.fixture(scope="session")
def tiny_runs(tmp_path_factory) -> dict:
    """Every study's run directory on a tiny Llama, written once per run for the report tests (text and browser); under
    pytest-xdist the first worker to ask writes them beside the workers' directories, under a lock the others wait on.
    Read-only: a test that changes a run copies it first."""
    from helpers.runs import FIGURES, write_tiny_runs

    shared = tmp_path_factory.getbasetemp().parent if XDIST_WORKERS > 1 else tmp_path_factory.getbasetemp()
    root, done = shared / "tiny-runs", shared / "tiny-runs.done"
    with FileLock(shared / "tiny-runs.lock"):
        if not done.exists():
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv("LINCORR_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
                shutil.rmtree(root, ignore_errors=True)  # what a failed writer left
                root.mkdir()
                write_tiny_runs(root)
            done.touch()
    return {name: root / name for name in FIGURES}


@pytest.fixture(scope="module")
def single_thread():
    """Torch on one thread for a module of tiny-model training: hand-offs cost more than the arithmetic."""
    from helpers.tiny import one_thread

    with one_thread():
        yield


@pytest.fixture(scope="session")
def tokenizer():
    """Word-level tokenizer over the prompt words, cities, countries and 120 input names."""
    from helpers.tiny import MODEL_WORDS, tiny_tokenizer

    return tiny_tokenizer(MODEL_WORDS)


@pytest.fixture(params=["gemma3", "gpt2", "llama"])
def tiny_lm(request, tokenizer):
    """Each tiny architecture wrapped as an LM (GPT-2: absolute positions; Gemma 3: soft-capped head)."""
    import helpers.tiny

    from lincorr.models import wrap_model

    model = getattr(helpers.tiny, f"tiny_{request.param}")(len(tokenizer))
    return wrap_model(model, tokenizer, name=f"tiny-{request.param}")


@pytest.fixture
def llama_lm(tokenizer):
    from helpers.tiny import tiny_llama

    from lincorr.models import wrap_model

    return wrap_model(tiny_llama(len(tokenizer)), tokenizer, name="tiny-llama")


@pytest.fixture(scope="module")
def origins(bundled, session_cache) -> Context:
    """A reproduction context for the §6 steps on gemma-3-270m-q4km at the claims' sizes (`feng/claims.yaml`: 80 training
    names, 20 test names, 20 cities), once per test file.

    At 40 training names neither phenomenon is seen (seed 0: grafting's paired tests p = 0.065; the ordering's gap 0.5
    ranks, p = 0.21, and over seeds 1 and 2 gaps of 1.05 and 1.1 ranks, p = 0.055 and 0.26), so the tests train at the
    claims' sizes (the ordering's at half its training, calibrated in its file), each in a file of its own that
    pytest-xdist runs on a worker of its own.
    """
    from lincorr.knowledge import load_registry
    from lincorr.reproduce.step import Context

    return Context(bundled("gemma-3-270m-q4km"), load_registry(), {"n_train": 80, "n_test": 20, "n_cities": 20, "seed": 0})


# pytest-xdist (--dist loadfile --no-loadscope-reorder; by default it puts the files with the most tests first, which
# left these single-test files for the end) hands the files to its workers in collection order, two to each at the start (the
# first and third to one, the second and fourth to the other), then one to whichever runs short. The two longest go to
# one worker, which also converts gemma-3-270m-q4km; the other starts on files that need no bundled model (mypy, the
# compiled forward) while it converts, then takes the rest as it runs short, so that no long file is the last one left.
# Measured in `make test` on the 2-core machine at 5e97814: grafting 294 s, the ordering 153 s (half its claim's
# training), the notebooks 213 s, the rest 100 s or less. `make test-fast` hands out single tests and lets an
# idle worker take queued ones; the long ones going first keeps one of them from being the last test left.
LONGEST_FILES_FIRST = ("test_extractive_grafting_integration.py", "test_types.py", "test_extractive_ordering_integration.py",
                       "test_collect.py", "test_notebook.py", "test_integration.py", "test_readme.py",
                       "test_extractive_integration.py", "test_distributed.py")


def pytest_collection_modifyitems(items):
    place = {name: rank for rank, name in enumerate(LONGEST_FILES_FIRST)}
    items.sort(key=lambda item: place.get(item.path.name, len(place)))  # stable: a file's tests keep their order
