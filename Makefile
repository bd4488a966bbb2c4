# One command to set up and run the daemon, one to set up and run the tests.
# Needs only python3 (3.11+) and make; everything else is installed into .venv
# from the pinned lock file.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SOURCES := backthink tests bench

.PHONY: run test check fmt lint typecheck bench test-live test-frontends lock clean

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

## test: set everything up, then run the linters, the type checks and the test suite
test: lint typecheck
	$(BIN)/pytest -q

## check: everything a commit should pass (the same as test)
check: test

## fmt: format the tree and apply ruff's safe fixes
fmt: $(STAMP)
	$(BIN)/ruff format $(SOURCES)
	$(BIN)/ruff check --fix --quiet $(SOURCES)

## lint: ruff's rules and its formatter, checked without changing a file
lint: $(STAMP)
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/ruff format --check $(SOURCES)

## typecheck: mypy, strict, over the package
typecheck: $(STAMP)
	$(BIN)/mypy

## bench: set everything up, then run every benchmark and print figures beside targets
bench: $(STAMP)
	$(BIN)/python bench/run_all.py

## test-live: install the live extras, serve a small local model, run the `live` tests
test-live: $(STAMP)
	$(BIN)/python tests/live/run.py

# Open WebUI, pinned, in a virtual environment of its own (about 3 GB): it pins
# its own versions of many of backthink's dependencies. torch goes in first and
# stays pinned: the CPU build this machine keeps on disk, never a CUDA one.
FRONTENDS_VENV := .venv-frontends
OPEN_WEBUI_VERSION := 0.12.4
FRONTENDS_TORCH := torch==2.13.0
FRONTENDS_STAMP := $(FRONTENDS_VENV)/.installed-open-webui-$(OPEN_WEBUI_VERSION)

$(FRONTENDS_STAMP):
	$(PYTHON) -m venv $(FRONTENDS_VENV)
	$(FRONTENDS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(FRONTENDS_VENV)/bin/python -m pip install --quiet $(FRONTENDS_TORCH)
	$(FRONTENDS_VENV)/bin/python -m pip install --quiet open-webui==$(OPEN_WEBUI_VERSION) $(FRONTENDS_TORCH)
	@touch $@

## test-frontends: install a pinned Open WebUI, drive it against the relay, run the `frontends` tests
test-frontends: $(STAMP) $(FRONTENDS_STAMP)
	BACKTHINK_OPEN_WEBUI=$(CURDIR)/$(FRONTENDS_VENV)/bin/open-webui $(BIN)/pytest -m frontends tests/frontends

lock:
	$(BIN)/python -m pip install --quiet pip-tools
	$(BIN)/pip-compile --quiet --no-emit-index-url --no-emit-find-links --strip-extras --extra dev --output-file requirements.lock pyproject.toml

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
