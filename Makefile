# Two commands do everything on a fresh machine:
#   make study   run the whole study (quick profile): figures/ and reports/
#   make test    lint, unit tests, and every notebook in the smoke profile
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PROFILE ?= quick
# Penn Treebank lives outside the repo; use the shared copy when it is there.
export STRUCTATTN_DATA ?= $(if $(wildcard ../shared/data/ptb),$(abspath ../shared/data),)

.PHONY: study test lint format clean-runs

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Reinstall only when the dependency list changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

study: $(VENV)/.installed
	$(BIN)/structattn study --profile $(PROFILE)

test: $(VENV)/.installed
	$(BIN)/ruff check structattn_lite tests benchmarks
	$(BIN)/ruff format --check structattn_lite tests benchmarks
	$(BIN)/pytest -n 2 --nbmake --nbmake-timeout=600 tests notebooks

lint: $(VENV)/.installed
	$(BIN)/ruff check structattn_lite tests benchmarks

format: $(VENV)/.installed
	$(BIN)/ruff format structattn_lite tests benchmarks

clean-runs:
	rm -rf data/runs
