# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
# They install uv if it is missing, sync the orchestrator's environment from uv.lock, and create
# the vLLM runtime (its own virtual environment, reused afterwards) before running.
SHELL := /bin/bash
.DEFAULT_GOAL := help

UV := $(shell command -v uv 2>/dev/null || echo python3 -m uv)
RUN := $(UV) run --frozen
POOL ?= evalflow-cpu
.PHONY: help uv sync runtime browser demo demo-local server deploy blocks worker stop test lint format clean

help:
	@echo "make demo       - local Prefect server + worker, deploy, run eval/smoke (SmolLM2 on vLLM CPU), print the report"
	@echo "make test       - lint and run the test suite (unit + end-to-end on a real vLLM server)"
	@echo "make demo-local - the same evaluation without a Prefect server (python -m flows.eval)"
	@echo "make server     - start a local Prefect server (127.0.0.1:4200, home .prefect/) unless one answers"
	@echo "make deploy     - work pools, blocks and every deployment in prefect.yaml"
	@echo "make worker     - start a process worker for POOL (default evalflow-cpu; evalflow-gpu on GPU nodes)"
	@echo "make stop       - stop the workers and the server started here"
	@echo "make lint       - ruff check + format check"

uv:
	@command -v uv >/dev/null 2>&1 || python3 -m uv --version >/dev/null 2>&1 || python3 -m pip install --quiet uv

sync: uv
	$(UV) sync --frozen

runtime: sync
	$(RUN) python -m tasks.runtime.venv

# Headless Chromium for the HTML report tests (Debian's package; no browser download).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium is missing: install Debian's chromium package for the HTML tests" >&2; exit 1; fi; }

# The real path: server, blocks, deployments, a worker, `prefect deployment run eval/smoke`.
demo: runtime
	$(RUN) python -m ops.local demo

demo-local: runtime
	$(RUN) python -m flows.eval --config configs/demo.yaml

server: sync
	$(RUN) python -m ops.local server

deploy: server
	$(RUN) python -m ops.local deploy

blocks: server
	$(RUN) python -m ops.local blocks

worker: runtime
	$(RUN) python -m ops.local worker --pool $(POOL)

stop:
	$(RUN) python -m ops.local stop

lint: sync
	$(RUN) ruff check .
	$(RUN) ruff format --check .

test: runtime browser lint
	$(RUN) pytest -x --timeout=1800 --durations=30

format: sync
	$(RUN) ruff format .
	$(RUN) ruff check --fix .

clean:
	rm -rf .venv .pytest_cache .ruff_cache
