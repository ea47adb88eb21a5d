# Two commands do everything on a fresh machine:
#   make study   run the whole study (quick profile): figures/ and reports/
#   make test    lint, unit tests, and every notebook in the smoke profile
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PROFILE ?= quick
# Penn Treebank lives outside the repo; use the shared copy when it is there.
export STRUCTATTN_DATA ?= $(if $(wildcard ../shared/data/ptb),$(abspath ../shared/data),)

.PHONY: study test lab dashboard lint format clean-runs

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Reinstall only when the dependency list changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

study: $(VENV)/.installed
	$(BIN)/structattn study --profile $(PROFILE)

# JupyterLab on the project's venv, with STRUCTATTN_DATA set as for `make study`, so a
# notebook opened by hand reads the same data. --allow-root: machines here run as root.
# lab-settings/overrides.json turns on saving widget state with the notebook (JupyterLab's
# default is off), so a saved notebook reopens with its widgets, not "model not found".
lab: $(VENV)/.installed
	$(BIN)/jupyter lab --notebook-dir=notebooks --LabApp.app_settings_dir=$(CURDIR)/lab-settings $(if $(filter 0,$(shell id -u)),--allow-root,) $(LAB_ARGS)

# The teaching app: the dashboards in dashboards/ served by Voila without code cells, from
# the committed records only (works offline), on loopback only and with a token, as for
# `make lab`: open the URL it prints, http://127.0.0.1:$(DASHBOARD_PORT)/?token=...
DASHBOARD_PORT ?= 8866
dashboard: $(VENV)/.installed
	$(BIN)/python -m structattn_lite.dashboard dashboards --no-browser --Voila.ip=127.0.0.1 --port=$(DASHBOARD_PORT) --strip_sources=True

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
