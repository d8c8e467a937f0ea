"""Bad input fails early, in one line naming what to fix, with exit status 2: config files (YAML syntax,
missing file), benchmark options, stores that cannot be written, and an endpoint nobody serves; and
every evalflow process runs with Prefect analytics off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from tests.cli.conftest import EVALFLOW, REPO_ROOT


def one_line_error(result: Result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_yaml_syntax_error_names_file_line_and_column(evalflow: Callable[..., Result], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  source: x\n bad: [\n")
    line = one_line_error(evalflow("run", "--config", str(bad), "--dry-run"))
    assert line.startswith(f"config error: {bad}:3:2: invalid YAML"), line
    assert "<unicode string>" not in line


def test_unknown_benchmark_options_name_the_field(evalflow: Callable[..., Result]) -> None:
    line = one_line_error(evalflow("run", "--dry-run", "benchmarks.0.options.bogus=1"))
    assert line.startswith("config error: benchmarks.0.options: ") and "bogus" in line


@pytest.mark.parametrize("probe", [True, False], ids=["run", "dry-run"])
def test_a_store_that_is_a_file_fails_before_anything_starts(
    evalflow: Callable[..., Result], tmp_path: Path, probe: bool
) -> None:
    afile = tmp_path / "file"
    afile.write_text("not a folder")
    args = ["run", f"store.url={afile}/runs", "benchmarks.0.limit=2"] + ([] if probe else ["--dry-run"])
    line = one_line_error(evalflow(*args))
    assert "is not writable" in line and str(afile) in line
    assert afile.read_text() == "not a folder"


def test_an_unreachable_endpoint_fails_in_seconds_naming_url_and_field(tmp_path: Path) -> None:
    started = time.monotonic()
    proc = subprocess.run(
        [EVALFLOW, "run", "server.mode=external", "server.base_url=http://127.0.0.1:9/v1", "benchmarks.0.limit=2",
         f"store.url={tmp_path}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "PREFECT_API_URL": ""},
    )  # fmt: skip
    seconds = time.monotonic() - started
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "server error: server.base_url http://127.0.0.1:9/v1: unreachable ([Errno 111] Connection refused); "
        "start the server or fix server.base_url"
    ]
    # before any flow run: no Prefect engine or temporary API was started (their first lines would be printed)
    assert "flow run" not in proc.stdout + proc.stderr and "temporary" not in proc.stdout + proc.stderr
    # no retry loop either: a refused connection is not retried for a minute (imports alone take 5-20 s on a
    # loaded 2-core CI machine, which is why this bound is not tighter: a clean-clone fast lane measured 20.5 s)
    assert seconds < 60, seconds


def test_evalflow_processes_run_with_prefect_analytics_off() -> None:
    code = "import os, flows.eval; print(os.environ['PREFECT_SERVER_ANALYTICS_ENABLED'], os.environ['DO_NOT_TRACK'])"
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "true"}
    env.pop("DO_NOT_TRACK", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["false", "1"]


def test_dry_run_of_a_good_config_still_plans(evalflow: Callable[..., Result], tmp_path: Path) -> None:
    result = evalflow("run", "--dry-run", f"store.url={tmp_path}/new/store", "benchmarks.0.limit=2")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["rollouts"]["to_generate"] > 0
    assert not (tmp_path / "new").exists()  # a dry run creates nothing
