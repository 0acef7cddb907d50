# Two entry points for a fresh machine: `make run` (the main job) and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint setup setup-dev browser postgres clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

setup: $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .

setup-dev: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'

# Headless Chromium for the report's browser test (Debian package; skipped if unavailable).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
	  || echo "chromium could not be installed: the browser test will say not checked"; }

# PostgreSQL server binaries for the shared-store tests (Debian package; each test starts
# its own throwaway cluster with initdb; skipped as "not checked" if unavailable).
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || { \
	  (apt-get update -qq && apt-get install -y -qq postgresql >/dev/null) \
	  || echo "postgresql could not be installed: the PostgreSQL store tests will say not checked"; }

# The main job on its embedded default: qualify torch 2.14.1 against torch 2.13.0 here.
# It exits with torchcanary's code; make then adds "Error N", so first say what N means.
run: setup
	@echo '$(BIN)/torchcanary run --baseline "torch==2.13.0 numpy" --candidate "torch==2.14.1 numpy"'
	@$(BIN)/torchcanary run --baseline "torch==2.13.0 numpy" --candidate "torch==2.14.1 numpy"; \
	code=$$?; case $$code in \
	  0|130) ;; \
	  1) echo "make run: exit 1 is the no-go verdict above, not a crash;" \
	       "the verdict line says why, the report line where to read it";; \
	  2) echo "make run: exit 2 is a usage or configuration error;" \
	       "the 'torchcanary: error:' line above says what to fix";; \
	  *) echo "make run: exit $$code: the run could not finish (an internal or environment" \
	       "failure); the lines above say what failed, --debug adds the traceback";; \
	esac; exit $$code

lint: setup-dev
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy src

test: setup-dev browser postgres lint
	$(BIN)/python -m pytest -q -ra

clean:
	rm -rf $(VENV) canary-results .pytest_cache .ruff_cache
