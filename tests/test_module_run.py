"""`python -m flows.eval --config ...` (older instructions' entry point) says what to run instead and exits 2,
from any folder, instead of exiting 0 having done nothing; `python -m cli` stays the command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from errors.module_run import module_run_target


@pytest.mark.parametrize(
    ("argv", "target"),
    [
        (["python", "-m", "flows.eval", "--config", "x.yaml"], "flows.eval"),
        (["python", "-u", "-X", "importtime", "-mflows.eval"], "flows.eval"),
        (["python", "/venv/bin/pytest", "-m", "e2e"], None),  # a script's own -m
        (["python", "-c", "print()"], None),
        (["python", "-m"], None),
    ],
)
def test_the_module_of_a_python_dash_m_command_line(argv: list[str], target: str | None) -> None:
    assert module_run_target(argv) == target


@pytest.mark.parametrize(
    ("module", "instead"),
    [
        ("flows.eval", "evalflow run --config FILE"),
        ("tasks.serving.server", "evalflow --help"),
        ("core", "evalflow --help"),
    ],
)
def test_running_a_module_that_is_no_command_exits_2_in_one_line(module: str, instead: str, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", module, "--config", "configs/demo.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    line = f"usage error: {module} is not a command; run `{instead}` (or `python -m cli ...` without the installed"
    assert done.stderr.splitlines() == [f"{line} command)"]


def test_python_dash_m_cli_is_the_command(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "cli", "--help"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0 and "Usage: evalflow" in done.stdout
