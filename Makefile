# One command to set up and run the daemon, one to set up and run the tests.
# Needs only python3 (3.11+) and make; everything else is installed into .venv
# from the pinned lock file.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test bench test-live lock clean

$(STAMP): requirements.lock pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "backthink needs Python 3.11 or newer"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	@touch $(STAMP)

## run: set everything up, then start the daemon with config/backthink.toml
run: $(STAMP)
	$(BIN)/backthink run

## test: set everything up, then run linters, type checks and the test suite
test: $(STAMP)
	$(BIN)/ruff check backthink tests
	$(BIN)/mypy
	$(BIN)/pytest -q

## bench: set everything up, then run every benchmark and print figures beside targets
bench: $(STAMP)
	$(BIN)/python bench/run_all.py

## test-live: install the live extras, serve a small local model, run the `live` tests
test-live: $(STAMP)
	$(BIN)/python tests/live/run.py

lock:
	$(BIN)/python -m pip install --quiet pip-tools
	$(BIN)/pip-compile --quiet --no-emit-index-url --no-emit-find-links --strip-extras --extra dev --output-file requirements.lock pyproject.toml

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
