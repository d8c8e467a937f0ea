# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
# They install uv if it is missing, sync the orchestrator's environment from uv.lock, and create
# the vLLM runtime (its own virtual environment, reused afterwards) before running.
SHELL := /bin/bash
.DEFAULT_GOAL := help

UV := $(shell command -v uv 2>/dev/null || echo python3 -m uv)
RUN := $(UV) run --frozen
.PHONY: help uv sync runtime browser demo test lint format clean

help:
	@echo "make demo   - evaluate SmolLM2 on the GSM8K-style set on a real vLLM (CPU) server, write the report"
	@echo "make test   - lint and run the test suite (unit + end-to-end on a real vLLM server)"
	@echo "make lint   - ruff check + format check"

uv:
	@command -v uv >/dev/null 2>&1 || python3 -m uv --version >/dev/null 2>&1 || python3 -m pip install --quiet uv

sync: uv
	$(UV) sync --frozen

runtime: sync
	$(RUN) python -m tasks.runtime

# Headless Chromium for the HTML report tests (Debian's package; no browser download).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium is missing: install Debian's chromium package for the HTML tests" >&2; exit 1; fi; }

demo: runtime
	$(RUN) python -m flows.eval --config configs/demo.yaml

lint: sync
	$(RUN) ruff check .
	$(RUN) ruff format --check .

test: runtime browser lint
	$(RUN) pytest -x --timeout=1800

format: sync
	$(RUN) ruff format .
	$(RUN) ruff check --fix .

clean:
	rm -rf .venv .pytest_cache .ruff_cache
