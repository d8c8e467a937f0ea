"""Helpers for the command-line tests: the `evalflow` app in process, and its installed script."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from cli.main import app

REPO_ROOT = Path(__file__).resolve().parents[2]
# the console script `uv sync` installs next to the interpreter
EVALFLOW = str(Path(sys.executable).with_name("evalflow"))
PREFECT = str(Path(sys.executable).with_name("prefect"))


@pytest.fixture
def evalflow(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    """`evalflow ARGS...` in this process, from the repo root (as `make` runs it)."""
    monkeypatch.chdir(REPO_ROOT)

    def invoke(*args: str) -> Result:
        return CliRunner().invoke(app, list(args), prog_name="evalflow")

    return invoke
