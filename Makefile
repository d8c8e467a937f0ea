# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
# They install uv if it is missing, sync the orchestrator's environment from uv.lock (which installs
# this project and its `evalflow` command), and create the vLLM runtime (its own virtual environment,
# reused afterwards) before running. Every target below is one `evalflow` command.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# evalflow starts many Python processes (the Prefect server, workers, flow runs, tests' subprocesses): where
# the environment forbids writing bytecode, each one compiles every module it imports again (importing the
# eval flow: 9.5 s against 5.1 s with bytecode, 2-core EPYC). The project's own .venv and checkout may keep it.
unexport PYTHONDONTWRITEBYTECODE
UV := $(shell command -v uv 2>/dev/null || echo python3 -m uv)
RUN := $(UV) run --frozen
POOL ?= evalflow-cpu
.PHONY: help uv sync runtime browser demo demo-local server deploy blocks worker stop reports docs docs-serve screenshots test test-all test-fast test-e2e test-server lint format clean

help:
	@echo "make demo       - local Prefect server + worker, deploy, run eval/smoke (SmolLM2 on vLLM CPU), print the report"
	@echo "make test       - what CI runs: lint, unit and end-to-end tests (real vLLM server), less tests/tiers.py's long ones"
	@echo "make test-all   - lint and every test, tests/tiers.py's too (about 90 min on 2 cores)"
	@echo "make test-fast  - the tests that need no vLLM server (pytest -m 'not e2e'); TIER= adds the long ones"
	@echo "make test-e2e   - the end-to-end tests alone, against one shared vLLM server; TIER= adds the long ones"
	@echo "make test-server - start the e2e lane's shared vLLM server and print EVALFLOW_TEST_SERVER for test runs"
	@echo "make demo-local - the same evaluation without a Prefect server (evalflow run)"
	@echo "make server     - start a local Prefect server (127.0.0.1:4200, home .prefect/) unless one answers"
	@echo "make deploy     - work pools, blocks and every deployment in prefect.yaml"
	@echo "make blocks     - register the block types and save the defaults (blocks/defaults.yaml)"
	@echo "make worker     - start a process worker for POOL (default evalflow-cpu; evalflow-gpu on GPU nodes)"
	@echo "make stop       - stop the workers and the server started here"
	@echo "make reports    - serve reports/ (index and every run's report) on http://127.0.0.1:8000"
	@echo "make docs       - build the documentation site (MkDocs, strict: a broken link or reference fails) into site/"
	@echo "make docs-serve - serve the documentation on http://127.0.0.1:8001, rebuilt on every change"
	@echo "make screenshots - rerun a small real evaluation and retake docs/images/ with headless Chromium (~5 min)"
	@echo "make lint       - ruff check, ruff format check, import-layer contracts (lint-imports), types (basedpyright)"
	@echo "Everything else: $(RUN) evalflow --help"

uv:
	@command -v uv >/dev/null 2>&1 || python3 -m uv --version >/dev/null 2>&1 || python3 -m pip install --quiet uv

sync: uv
	$(UV) sync --frozen

runtime: sync
	$(RUN) evalflow runtime

# Headless Chromium for the HTML report tests (Debian's package; no browser download).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium is missing: install Debian's chromium package for the HTML tests" >&2; exit 1; fi; }

# The real path: server, blocks, deployments, a worker, a flow run of eval/smoke followed in the terminal.
# `evalflow demo` creates the vLLM runtime itself, while the Prefect server starts. Without the dev tools (test,
# lint and docs packages: a third of a first sync's downloads); --inexact keeps them where `make test` put them.
demo: uv
	$(UV) sync --frozen --no-dev --inexact
	$(RUN) --no-dev evalflow demo

demo-local: runtime
	$(RUN) evalflow run --config configs/demo.yaml

server: sync
	$(RUN) evalflow local server

deploy: server
	$(RUN) evalflow local deploy

blocks: server
	$(RUN) evalflow local blocks

worker: runtime
	$(RUN) evalflow local worker --pool $(POOL)

stop:
	$(RUN) evalflow local stop

reports: sync
	$(RUN) evalflow reports serve --store reports

docs: sync
	NO_MKDOCS_2_WARNING=1 $(RUN) mkdocs build --strict --site-dir site

docs-serve: sync
	NO_MKDOCS_2_WARNING=1 $(RUN) mkdocs serve --dev-addr 127.0.0.1:8001

screenshots: runtime browser
	$(RUN) python scripts/docs_screenshots.py

lint: sync
	$(RUN) ruff check .
	$(RUN) ruff format --check .
	$(RUN) lint-imports
	$(RUN) basedpyright

# Two lanes: every test that needs no vLLM server on three workers (one file per worker; measured on
# 2 cores: 231 s against 242 s with two, since many tests wait on subprocesses and servers), then the
# end-to-end tests one at a time against the real server (they share one and must not overlap).
# CI's tier leaves out the long tests tests/tiers.py lists (marked `full`, each with the test CI keeps for
# it): `make test` stays near 20 minutes on 2 cores; `make test-all` (TIER empty) runs every test, ~90.
TIER ?= and not full
FAST = pytest -x -m "not e2e $(TIER)" -n 3 --dist loadfile --timeout=1800 --durations=30
E2E = pytest -x -m "e2e $(TIER)" --timeout=1800 --durations=30
test: runtime browser lint
	$(RUN) $(FAST)
	$(RUN) $(E2E)

test-all:
	$(MAKE) test TIER=

test-fast: runtime browser
	$(RUN) $(FAST)

test-e2e: runtime browser
	$(RUN) $(E2E)

# The e2e lane's shared server, kept up between test runs: EVALFLOW_TEST_SERVER=URL pytest FILE uses it.
test-server: runtime
	$(RUN) python -m tests.server

format: sync
	$(RUN) ruff format .
	$(RUN) ruff check --fix .

clean:
	rm -rf .venv .pytest_cache .ruff_cache
