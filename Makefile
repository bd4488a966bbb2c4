# One command to set up and run the daemon, one to set up and run the tests.
# Needs only python3 (3.11+) and make; everything else is installed into .venv
# from the pinned lock file.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck check-all lock clean

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

lock:
	$(BIN)/python -m pip install --quiet pip-tools
	$(BIN)/pip-compile --quiet --no-emit-index-url --no-emit-find-links --strip-extras --extra dev --output-file requirements.lock pyproject.toml

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
