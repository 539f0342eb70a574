# Two entry points for a fresh machine with only Python 3.11+:
#   make demo   a posterior on bundled real runs: a 70B forecast, its interval, a fan chart
#   make test   run the test suite (what CI runs)
#   make docs   build the documentation site into site/ (tutorials executed; warnings are errors)
PY ?= python3
VENV := .venv
# pytest-xdist workers for the main test run: tests are dealt out one by one, so the slow modules
# are shared; a module fixture built on both workers loads the other's programs from the tests'
# compilation cache (tests/conftest.py). The Ctrl-C tests keep a process of their own.
WORKERS ?= 2
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.docs-installed

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[train,dev,ray]"
	touch $(STAMP)

$(DOCS_STAMP): $(STAMP) pyproject.toml
	$(BIN)/pip install -q -e ".[docs]"
	touch $(DOCS_STAMP)

.PHONY: install demo test test-all docs analyses benchmarks
install: $(STAMP)

demo: $(STAMP)
	$(BIN)/bayes-scaling demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(WORKERS) -m "not slow and not isolated"
	$(BIN)/python -m pytest -q -m "isolated and not slow"

test-all: $(STAMP)
	$(BIN)/python -m pytest -q -n $(WORKERS) -m "not isolated"
	$(BIN)/python -m pytest -q -m isolated

# the site: user guide, API reference from the docstrings, tutorials (docs/tutorials/*.py, jupytext
# percent format) executed at build time, so a stale tutorial fails the build
docs: $(DOCS_STAMP)
	$(BIN)/mkdocs build --strict

analyses: $(STAMP)
	$(BIN)/bayes-scaling analyses

benchmarks: $(STAMP)
	$(BIN)/python benchmarks/fit_speed.py
