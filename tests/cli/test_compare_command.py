"""`evalflow compare RUN [BASELINE]` on a store whose runs went through the real analysis, report and index: the
table and flips it prints, its exit status as a gate (0 pass, 1 a drop beyond the threshold, 2 a usage error), the
gate settings from the run's config and the command line; run from another working directory than the repo's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from core.schema import to_parquet_bytes
from core.store import Store
from tasks.analysis.compare import baseline_comparison
from tasks.analysis.gate import gate
from tasks.analysis.metrics import compute_metrics
from tasks.reporting.index import index_entry, read_entries, update_index
from tasks.reporting.report import write_report
from tests.cli.conftest import EVALFLOW
from tests.tasks.conftest import rollout, run_info

PROMPTS, REPEATS = 40, 2


def rows(run_id: str, right: set[int], question: dict[int, str] | None = None) -> list[dict[str, Any]]:
    """Prompt i is right in both repeats when i is in `right`; its question is "q<i>" unless `question` says."""
    question = question or {}
    return [
        rollout(
            run_id=run_id, prompt_id=f"p{i:02d}", repeat=r, success=i in right, reward=float(i in right),
            messages=[{"role": "user", "content": question.get(i, f"q{i}")}],
        )
        for i in range(PROMPTS)
        for r in range(REPEATS)
    ]  # fmt: skip


def add_run(store: Store, run_id: str, day: int, records: list[dict[str, Any]], **info: Any) -> None:
    """A run the way the eval flow ends one: analysis, comparison with its baseline, gate, report, index entry."""
    url = store.write_bytes(store.path("runs", run_id, "rollouts", "b0.parquet"), to_parquet_bytes(records))
    metrics = compute_metrics([url], store)
    fields = {"run_id": run_id, "deployment": "nightly", "finished_at": f"2025-01-{day:02d}T02:00:00+00:00", **info}
    ri = run_info(**fields)
    comparison = baseline_comparison(store, metrics, ri, read_entries(store))
    if comparison is not None:
        from core.gate_config import GateConfig

        comparison = comparison.model_copy(update={"gate": gate(comparison, GateConfig())})
    urls = write_report(store.path("runs", run_id), metrics, ri, [url], store, comparison=comparison)
    update_index(store, index_entry(ri, metrics, urls, store.url, comparison))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("compare") / "store"
    s = Store(str(root))
    good = set(range(30))  # 30 of 40 right
    add_run(s, "night-1", 1, rows("night-1", good))
    add_run(s, "night-2", 2, rows("night-2", good), config={"gate": {"max_drop": 0.5}})  # same answers
    worse = good - set(range(12))  # 12 prompts went right -> wrong
    add_run(s, "night-3", 3, rows("night-3", worse | {35}))  # and one wrong -> right
    add_run(s, "night-4", 4, rows("night-4", good), status="failed")
    # another dataset version: p00..p09 are other questions under the same ids
    add_run(s, "other", 5, rows("other", good, {i: f"new {i}" for i in range(10)}), deployment="elsewhere")
    return root


def evalflow(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EVALFLOW, *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_a_regression_fails_the_gate_and_lists_the_flipped_prompts(store: Path, tmp_path: Path) -> None:
    out = evalflow(tmp_path, "compare", "night-3", "--store", str(store))  # its baseline: night-2
    assert out.returncode == 1, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("night-3 against night-2: ")
    assert "paired-clustered" in out.stdout and "regression ▼" in out.stdout
    assert "flips in gsm8k: 12 right → wrong, 1 wrong → right of 40 shared prompts" in out.stdout
    listed = [line.split()[-4] for line in lines if "right → wrong" in line and line.startswith("  ")]
    assert sorted(listed) == [f"p{i:02d}" for i in range(12)]
    assert lines[-1].startswith("gate FAILED (") and "gsm8k accuracy CI bound" in lines[-1]
    # the same pair, told to allow a 40-point drop: passes (30/40 -> 19/40 is -27.5 points)
    allowed = evalflow(tmp_path, "compare", "night-3", "night-2", "--store", str(store), "--max-drop", "0.4")
    assert allowed.returncode == 0 and allowed.stdout.splitlines()[-1].startswith("gate passed")
    absolute = evalflow(tmp_path, "compare", "night-3", "--store", str(store), "--rule", "absolute",
                        "--max-drop", "0.2", "--metric", "accuracy")  # fmt: skip
    assert absolute.returncode == 1 and "gate FAILED (1 of 1 metrics)" in absolute.stdout


def test_no_change_passes_and_the_json_document_is_the_comparison(store: Path, tmp_path: Path) -> None:
    out = evalflow(tmp_path, "compare", "night-2", "--store", str(store), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["baseline"]["run_id"] == "night-1" and doc["gate"]["passed"] is True
    assert doc["gate"]["rules"] == {"max_drop": 0.5}  # night-2's own config's gate
    acc = doc["benchmarks"]["gsm8k"]["accuracy"]
    assert acc["delta"] == 0 and acc["method"] == "paired-clustered" and acc["se"] == 0
    assert doc["pairing"]["gsm8k"] == {
        "shared": 40, "only_current": 0, "only_baseline": 0, "changed": 0, "lost_count": 0, "gained_count": 0,
        "lost": [], "gained": [],
    }  # fmt: skip


def test_prompts_whose_content_changed_are_not_paired(store: Path, tmp_path: Path) -> None:
    out = evalflow(tmp_path, "compare", "other", "night-1", "--store", str(store), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["pairing"]["gsm8k"]["shared"] == 30 and doc["pairing"]["gsm8k"]["changed"] == 10
    assert doc["benchmarks"]["gsm8k"]["accuracy"]["n_current"] == 30


def test_usage_errors_exit_2_in_one_line(store: Path, tmp_path: Path) -> None:
    cases = {
        ("nope",): "run 'nope' is not in the run index of",
        ("night-4",): "run 'night-4' is failed, not complete",
        ("night-3", "night-4"): "baseline 'night-4' is failed, not complete",
        ("night-1",): "no baseline for run 'night-1': no earlier complete run of deployment 'nightly'",
        ("night-3", "--rule", "absolute"): "gate: ",
    }
    for args, message in cases.items():
        out = evalflow(tmp_path, "compare", *args, "--store", str(store))
        assert out.returncode == 2 and out.stdout == "", (args, out.stdout, out.stderr)
        (line,) = out.stderr.strip().splitlines()
        assert line.startswith("config error: ") and message in line, line


def test_the_report_and_index_carry_the_flips_and_flags(store: Path) -> None:
    page = (store / "runs/night-3/report.html").read_text()
    assert "Flipped prompts" in page and "12 right → wrong, 1 wrong → right of 40 shared prompts" in page
    assert 'href="rollouts.html#b=gsm8k&amp;p=p00"' in page
    assert 'href="../../runs/night-2/rollouts.html#b=gsm8k&amp;p=p00"' in page
    assert "gate FAILED" in page
    md = (store / "runs/night-3/report.md").read_text()
    assert "| gsm8k | right → wrong | p00 | 100.00% | 0.00% | [this run](rollouts.html#b=gsm8k&p=p00)" in md
    index = (store / "index.html").read_text()
    assert "▼ accuracy, pass@1, pass@2, mean reward" in index and "gate failed" in index
    entry = json.loads((store / "index/entries/night-3.json").read_text())
    assert entry["baseline_run_id"] == "night-2" and entry["gate_passed"] is False
    assert entry["regressions"] == ["gsm8k: accuracy", "gsm8k: pass@1", "gsm8k: pass@2", "gsm8k: mean reward"]


def test_the_readme_walk_through_and_gate_example_run(store: Path, tmp_path: Path) -> None:
    """README "Comparing runs": every command line of its walk-through runs (RUN_ID: a run that regressed,
    BASELINE_ID: an earlier one), and its `gate:` example is a valid config section."""
    import re

    import yaml

    from core.config import EvalConfig
    from tests.examples.test_readme_own_benchmark_e2e import DOCS, walk_through

    page = DOCS / "guides" / "comparing-runs.md"
    lines = walk_through(page)
    assert len(lines) == 4 and all(line.startswith("uv run evalflow compare RUN_ID") for line in lines)
    for line in lines:
        words = line.replace("RUN_ID", "night-3").replace("BASELINE_ID", "night-1").split()[3:]
        out = evalflow(tmp_path, *words, "--store", str(store))
        assert out.returncode == 1, (line, out.stdout, out.stderr)  # night-3 lost 27.5 points: every gate fails
        if "--json" in words:
            assert json.loads(out.stdout)["gate"]["passed"] is False
        else:
            assert out.stdout.splitlines()[-1].startswith("gate FAILED"), line
    section = page.read_text()
    example = re.search(r"^```yaml\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL)
    assert example is not None
    gate = EvalConfig.model_validate(yaml.safe_load(example.group(1))).gate
    assert gate.rule_for("tetris").rule == "absolute" and gate.rule_for("gsm8k").max_drop == 0.0


def test_runs_on_s3_compare_the_same(tmp_path: Path) -> None:
    """A store on an S3-compatible server (moto on loopback): credentials from the environment, the endpoint as an
    fsspec option; the verdict and flips as on disk."""
    import os

    from tests.conftest import moto_s3

    with moto_s3("evals") as endpoint:
        options = {"client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
        s3 = Store("s3://evals/team", {**options, "key": "testing", "secret": "testing"})
        add_run(s3, "a", 1, rows("a", set(range(30))))
        add_run(s3, "b", 2, rows("b", set(range(10, 30))))
        out = subprocess.run(
            [EVALFLOW, "compare", "b", "--store", "s3://evals/team",
             "--option", f"client_kwargs.endpoint_url={endpoint}", "--option", "client_kwargs.region_name=us-east-1"],
            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300,
        )  # fmt: skip
    assert out.returncode == 1, out.stderr
    assert "flips in gsm8k: 10 right → wrong, 0 wrong → right of 40 shared prompts" in out.stdout
    assert "testing" not in out.stdout + out.stderr
