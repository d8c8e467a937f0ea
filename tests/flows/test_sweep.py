"""Sweep grids: expansion to the cartesian product, and the errors found before anything runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from cli.main import app
from core.config import EvalConfig
from core.overrides import OverrideError, config_data, has_path, set_path
from core.record import IndexEntry
from core.store import Store
from core.sweep_record import SweepPoint, SweepRecord
from flows.sweep import SweepError, _attach_runs, expand_grid, load_sweep
from tasks.reporting.index import update_index
from tasks.reporting.render import render_html, render_markdown
from tasks.reporting.sweep import points_table, sweep_view, write_sweep_report
from tests.conftest import REPO_ROOT


def base() -> EvalConfig:
    return EvalConfig.model_validate(
        {"run_name": "s", "server": {"block": "cpu-smoke"}, "benchmarks": [{"name": "gsm8k", "limit": 2}]}
    )


def test_two_by_two_grid_is_four_points_over_the_unset_base() -> None:
    points = expand_grid(base(), {"sampling.temperature": [0.6, 0.8], "benchmarks.0.repeats": [1, 2]})
    assert [v for v, _ in points] == [
        {"sampling.temperature": 0.6, "benchmarks.0.repeats": 1},
        {"sampling.temperature": 0.6, "benchmarks.0.repeats": 2},
        {"sampling.temperature": 0.8, "benchmarks.0.repeats": 1},
        {"sampling.temperature": 0.8, "benchmarks.0.repeats": 2},
    ]
    _, data = points[3]
    # only what the base set plus the point: a server block still supplies every other server field
    assert data["server"] == {"block": "cpu-smoke"}
    assert data["sampling"] == {"temperature": 0.8}
    assert data["benchmarks"] == [{"name": "gsm8k", "limit": 2, "repeats": 2}]
    cfg = EvalConfig.model_validate(data)
    assert cfg.server.model_fields_set == {"block"}
    assert cfg.sampling.top_p == 1.0  # defaults untouched


@pytest.mark.parametrize(
    ("grid", "words"),
    [
        ({"sampling.temprature": [0.6]}, "'sampling.temprature' is not a field"),
        ({"benchmarks.1.repeats": [2]}, "'benchmarks.1.repeats' is not a field"),
        ({"sampling.temperature": []}, "non-empty list"),
        ({}, "grid is empty"),
        ({"benchmarks.0.repeats": [4, -1]}, "sweep point {'benchmarks.0.repeats': -1}"),
        ({"benchmarks.0.options.fewshot": [0, 99]}, "fewshot must be an integer from 0 to"),
        ({"benchmarks.0.options.fewshoot": [4]}, "fewshoot"),
    ],
)
def test_bad_grids_fail_before_anything_runs(grid: dict, words: str) -> None:
    with pytest.raises(SweepError) as exc:
        expand_grid(base(), grid)
    assert words in str(exc.value)


def test_environment_options_are_grid_keys() -> None:
    points = expand_grid(base(), {"benchmarks.0.options.fewshot": [0, 4]})
    assert [d["benchmarks"][0]["options"] for _, d in points] == [{"fewshot": 0}, {"fewshot": 4}]


def evalflow(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), prog_name="evalflow")


def test_a_plain_api_key_is_not_spread_over_child_parameters() -> None:
    cfg = EvalConfig.model_validate({"server": {"mode": "external", "base_url": "http://h:1/v1", "api_key": "sk-x"}})
    with pytest.raises(SweepError, match="server block"):
        expand_grid(cfg, {"sampling.temperature": [0.1, 0.2]})


def test_sweep_file_must_name_the_same_base_as_the_command_line(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("base: configs/smoke.yaml\ngrid:\n  sampling.temperature: [0.6]\n")
    with pytest.raises(SweepError, match=r"written for base config 'configs/smoke\.yaml'"):
        load_sweep(str(sweep), "configs/demo.yaml")
    assert load_sweep(str(sweep), None)[1] == "configs/smoke.yaml"
    assert evalflow("sweep", "--sweep", str(sweep), "--config", "configs/demo.yaml").exit_code == 2


def test_cli_rejects_unknown_grid_key(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("grid:\n  sampling.temp: [0.6, 0.7]\n")
    result = evalflow("sweep", "--sweep", str(sweep), "--config", "configs/demo.yaml")
    assert result.exit_code == 2
    assert "'sampling.temp' is not a field" in result.stderr


def test_dotted_paths() -> None:
    data: dict = {"benchmarks": [{"name": "gsm8k"}]}
    set_path(data, "benchmarks.0.options.fewshot", 4)
    set_path(data, "sampling.seed", 7)
    assert data == {"benchmarks": [{"name": "gsm8k", "options": {"fewshot": 4}}], "sampling": {"seed": 7}}
    assert has_path(data, "benchmarks.0.options.fewshot") and not has_path(data, "benchmarks.1")
    with pytest.raises(OverrideError, match="not an index"):
        set_path(data, "benchmarks.x.name", "math")
    with pytest.raises(OverrideError, match=r"not key\.path=value"):
        config_data(None, ["sampling.seed"])


def test_sweep_report_puts_points_side_by_side() -> None:
    info = {"sweep_id": "sw1", "name": "t", "deployment": "eval/smoke", "grid": {"sampling.temperature": [0.6, 0.8]}}
    headline = {"accuracy": 0.25, "accuracy_ci": [0.1, 0.5], "pass@n": 0.5, "mean_reward": 0.25}
    points = [
        {"index": 0, "values": {"sampling.temperature": 0.6}, "state": "Completed", "run_id": "r0",
         "headline": {"gsm8k": headline}, "report": "runs/r0/report.html"},
        {"index": 1, "values": {"sampling.temperature": 0.8}, "state": "Failed", "message": "boom"},
    ]  # fmt: skip
    sweep = SweepRecord.model_validate({**info, "points": points})
    table = points_table(sweep)
    assert table.header[:3] == ["point", "sampling.temperature", "state"]
    assert table.rows[0] == ["p0", "0.6", "Completed", "25.00% (10.0–50.0%)", "50.00%", "0.250", "r0"]
    assert table.rows[1][2] == "Failed" and table.rows[1][-1] == "boom"
    view = sweep_view(sweep)
    md = render_markdown("sweep.md.j2", view=view)
    assert "runs/r0/report.html" in md and "| p1 | 0.8 | Failed |" in md
    page = render_html("sweep.html.j2", view=view)
    assert "sweep-accuracy" in page and 'href="../../runs/r0/report.html"' in page


def test_points_find_their_runs_and_sweep_json_is_the_record(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    headline = {"accuracy": 0.25, "accuracy_ci": [0.1, 0.5], "pass@n": 0.5, "mean_reward": 0.25}
    update_index(store, IndexEntry(run_id="r0", flow_run_id="f0", headline={"gsm8k": headline}, report="runs/r0/x"))
    update_index(store, IndexEntry(run_id="r1", headline={"gsm8k": headline}, report="runs/r1/x"))
    values = [{"sampling.temperature": t} for t in (0.6, 0.8, 1.0)]
    points = [
        SweepPoint(index=0, values=values[0], state="Completed", flow_run_id="f0"),  # a deployment's child
        SweepPoint(index=1, values=values[1], state="Completed", run_id="r1"),  # run in the sweep's process
        SweepPoint(index=2, values=values[2], state="Failed", message="boom", flow_run_id="f2"),
    ]
    found = _attach_runs(points, store)
    assert [(p.run_id, p.report, list(p.headline)) for p in found] == [
        ("r0", "runs/r0/x", ["gsm8k"]), ("r1", "runs/r1/x", ["gsm8k"]), (None, None, [])
    ]  # fmt: skip
    assert found[2] == points[2]
    sweep = SweepRecord(sweep_id="sw2", grid={"sampling.temperature": [0.6, 0.8, 1.0]}, points=found)
    urls = write_sweep_report(store, sweep)
    written = json.loads(Path(urls["json"]).read_text())
    assert SweepRecord.model_validate(written) == sweep
    assert written["points"][0]["headline"]["gsm8k"]["pass@n"] == 0.5 and written["points"][2]["message"] == "boom"


def test_cli_dry_run_prints_each_point_and_starts_nothing(tmp_path: Path) -> None:
    """`python -m cli sweep` (the command line without the installed `evalflow` script)."""
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("base: configs/demo.yaml\ngrid:\n  benchmarks.0.repeats: [1, 3]\n")
    store = tmp_path / "store"
    args = ["--sweep", str(sweep), "--config", "configs/demo.yaml", f"store.url={store}", "--dry-run"]
    out = subprocess.run([sys.executable, "-m", "cli", "sweep", *args], cwd=REPO_ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(p["values"], p["rollouts"]["to_generate"]) for p in lines] == [
        ({"benchmarks.0.repeats": 1}, 12),
        ({"benchmarks.0.repeats": 3}, 36),
    ]
    assert not store.exists()  # nothing written, nothing started
