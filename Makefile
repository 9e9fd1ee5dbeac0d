# murk: the README's first two commands, `make demo` and `make test`, set everything up.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.murk-installed
SNAKE := PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/snakemake --cores $(or $(CORES),1)

.PHONY: demo test paper study plan lab clean-outputs

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

## demo: the study on a small sample, end to end (select → depth → readout → analyse → paper)
demo: $(STAMP)
	$(SNAKE)

## test: the test suite (installs first)
test: $(STAMP)
	$(BIN)/python -m pytest -q

## plan: what `make demo` would run (snakemake dry run)
plan: $(STAMP)
	$(SNAKE) -n

## paper: render the paper (Quarto where installed, else pandoc + Typst)
paper: $(STAMP)
	$(SNAKE) paper

## study: the full study (1000 items, five models; needs a GPU and network or a hub cache)
study: $(STAMP)
	$(SNAKE) --configfile data/workflow.yaml data/study.yaml

## lab: JupyterLab on the stage notebooks (jupytext opens the .py files as notebooks)
lab: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[lab]'
	$(BIN)/jupyter lab notebooks/

clean-outputs:
	rm -rf outputs .snakemake
