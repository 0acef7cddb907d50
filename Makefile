# Two entry points for a fresh machine: `make run` (the main job) and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test test-fast lint setup setup-dev browser postgres netns slurm clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Installed once per change of pyproject.toml (the install is editable, so the sources need
# no reinstall): `make run` then spends no time, and prints nothing, on pip.
INSTALLED := $(VENV)/.installed
setup: $(INSTALLED)
$(INSTALLED): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	@touch $@

setup-dev: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(INSTALLED)

# The real parts the tests use beside the Python packages (Ray, psycopg and playwright come
# with setup-dev): Chromium, PostgreSQL, iproute2 and root. Where one cannot be had, its
# tests say "not checked"; under CI (CI=true) every test must check, so the build stops here
# (and tests/real_parts.py fails any test that still skips for a missing part).
ON_CI = case "$${CI:-}" in [Tt][Rr][Uu][Ee]|1|[Yy][Ee][Ss]) true;; *) false;; esac
# $(call missing,PART,TESTS): stop under CI, else say which tests will not be checked.
missing = { if $(ON_CI); then echo "$(1) is missing, and CI=true needs it for $(2)" >&2; exit 1; fi; \
  echo "$(1) is missing: $(2) will say not checked"; }
APT_INSTALL = apt-get update -qq && apt-get install -y -qq

# Headless Chromium for the report's browser test (Debian package).
browser:
	@command -v chromium >/dev/null 2>&1 || ($(APT_INSTALL) chromium >/dev/null) || true
	@command -v chromium >/dev/null 2>&1 || $(call missing,chromium,the browser test)

# PostgreSQL server binaries for the shared-store tests (Debian package; each test session
# starts its own throwaway cluster with initdb, see tests/pg_cluster.py).
postgres:
	@$(HAVE_INITDB) || ($(APT_INSTALL) postgresql >/dev/null) || true
	@$(HAVE_INITDB) || $(call missing,PostgreSQL (initdb),the PostgreSQL store tests)
HAVE_INITDB = { ls /usr/lib/postgresql/*/bin/initdb || command -v initdb; } >/dev/null 2>&1

# ip and tc (iproute2) and root, for the network drills and the namespaced Ray cluster.
netns:
	@$(HAVE_IPROUTE) || ($(APT_INSTALL) iproute2 >/dev/null) || true
	@$(HAVE_IPROUTE) || $(call missing,iproute2 (ip and tc),the network-namespace tests)
	@[ "$$(id -u)" = 0 ] || $(call missing,root (network namespaces need it),the network-namespace tests)
HAVE_IPROUTE = { command -v ip && command -v tc; } >/dev/null 2>&1

# Slurm (slurmctld, slurmd, the client commands) and munge for the Slurm fleet tests (Debian
# packages; each test module starts its own cluster on this machine, see tests/slurm_cluster.py).
# The packages' postinst would start the system's daemons on the default ports: a temporary
# policy-rc.d (exit 101) stops that; one already there (as in Docker images) is left alone.
slurm:
	@$(HAVE_SLURM) || { \
	  made=; [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d \
	    && chmod 755 /usr/sbin/policy-rc.d && made=1; }; \
	  ($(APT_INSTALL) slurm-wlm munge >/dev/null) || true; \
	  [ -z "$$made" ] || rm -f /usr/sbin/policy-rc.d; } 2>/dev/null || true
	@$(HAVE_SLURM) || $(call missing,Slurm (slurm-wlm and munge),the Slurm fleet tests)
	@[ "$$(id -u)" = 0 ] || $(call missing,root (the test cluster's slurmd runs as root),the Slurm fleet tests)
HAVE_SLURM = { command -v slurmctld && command -v slurmd && command -v sbatch \
  && command -v munged; } >/dev/null 2>&1

# The main job on its embedded default (config.py's DEFAULT_BASELINE and DEFAULT_CANDIDATE:
# torch 2.14.1 against torch 2.13.0, here). It exits with torchcanary's code; make then adds
# "Error N", so first say what N means.
run: setup
	@echo '$(BIN)/torchcanary run'
	@$(BIN)/torchcanary run; \
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

# Every test's time (--durations=0), the JUnit XML, and the seconds per kind of real part and
# per module (tests/suite_time.py, also as JSON) land in test-results/.
TEST_RESULTS := test-results
TEST_REPORTS = --durations=0 --junitxml=$(TEST_RESULTS)/junit.xml --suite-times=$(TEST_RESULTS)/times.json

# Two pytest-xdist workers: some of a test's time is waiting (a drill's timeout, a cluster's
# scheduler, a rank's start), which the other worker fills. tests/xdist_scopes.py keeps each
# cluster's and the PostgreSQL server's tests on one worker, every other test with its
# module, and sends the heaviest scopes first. Not three: both CPUs are busy with two, and a
# third only adds contention (26.4 min against 23.6 on 2026-12-07).
TEST_WORKERS ?= 2
test: setup-dev browser postgres netns slurm lint
	$(BIN)/python -m pytest -q -ra -n $(TEST_WORKERS) $(TEST_REPORTS)

# The contributors' loop: every test that needs no real torch environment and no cluster
# (markers set from the fixtures a test uses: tests/auto_marks.py), on two workers.
FAST_TESTS = not torch_envs and not ray and not slurm and not netns
test-fast: setup-dev
	$(BIN)/python -m pytest -q -ra -m "$(FAST_TESTS)" -n 2 --durations=15

clean:
	rm -rf $(VENV) canary-results test-results .pytest_cache .ruff_cache
