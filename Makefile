# Two entry points for a fresh machine with only Python 3.11+:
#   make demo   fit a law on a bundled real dataset and print the fit and its metrics
#   make test   run the test suite (what CI runs)
PY ?= python3
VENV := .venv
# pytest-xdist workers for the main test run (each test module runs whole on one worker, so its
# module fixtures are built once); the Ctrl-C tests keep a process of their own
WORKERS ?= 2
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[train,dev,ray]"
	touch $(STAMP)

.PHONY: install demo test test-all analyses benchmarks
install: $(STAMP)

demo: $(STAMP)
	$(BIN)/bayes-scaling demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(WORKERS) --dist loadfile -m "not slow and not isolated"
	$(BIN)/python -m pytest -q -m "isolated and not slow"

test-all: $(STAMP)
	$(BIN)/python -m pytest -q -n $(WORKERS) --dist loadfile -m "not isolated"
	$(BIN)/python -m pytest -q -m isolated

analyses: $(STAMP)
	$(BIN)/bayes-scaling analyses

benchmarks: $(STAMP)
	$(BIN)/python benchmarks/fit_speed.py
