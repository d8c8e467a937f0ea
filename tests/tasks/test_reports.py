"""Reports: files, contents, self-containment, escaping, and Prefect artifacts."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec
import pytest
from plotly.offline import get_plotlyjs

from tasks import store
from tasks.analysis import compute_metrics
from tasks.reports import (
    format_terminal_summary,
    headline_rows,
    publish_artifacts,
    report_task,
    write_report,
)

CHARTS_PER_BENCHMARK = 6
EVIL = "<script>alert('x')</script> & <b>bold</b>"


def run_info(**overrides: Any) -> dict[str, Any]:
    info = {
        "run_id": "run-2025-01-01-abc",
        "flow_run_id": None,
        "model": "SmolLM2-135M-Instruct",
        "model_fingerprint": "sha256:feedbeef",
        "started_at": "2025-01-01T00:00:00+00:00",
        "finished_at": "2025-01-01T00:42:00+00:00",
        "config": {
            "sampling": {"temperature": 0.7, "max_tokens": 512},
            "store": {"url": "s3://bucket/runs", "storage_options": {"key": "AKIA", "secret": "hunter2"}},
        },
        "timings": {"prepare_model": 12.5, "serve": 95.0, "collect": 1800.25, "analyze": 0.4},
    }
    info.update(overrides)
    return info


@pytest.fixture
def run_files(make_rollout: Callable[..., dict], write_batch: Callable[..., str]) -> list[str]:
    """gsm8k: 3 prompts x 4 repeats (accuracy 5/12) with gsm8k info flags; tetris: 2 games x 2."""
    gsm = []
    for p, outcomes in {"p0": [1, 0, 0, 0], "p1": [0, 0, 0, 0], "p2": [1, 1, 1, 1]}.items():
        for i, ok in enumerate(outcomes):
            gsm.append(
                make_rollout(
                    prompt_id=p,
                    repeat=i,
                    success=bool(ok),
                    reward=float(ok),
                    parsed_answer="2" if ok else "3",
                    completion=("long reasoning " * 30 + EVIL) if p == "p1" else "#### 2",
                    info={"strict_correct": bool(ok), "flexible_correct": bool(ok) or i == 1},
                )
            )
    tetris = [
        make_rollout(
            benchmark="tetris",
            prompt_id=f"game-{g}",
            repeat=i,
            reward=-0.9 if g else 19.2,
            success=not g,
            tool_calls=3 + i,
            parsed_answer="Left || Down",
            reference=None,
        )
        for g in range(2)
        for i in range(2)
    ]
    return [write_batch(gsm), write_batch(tetris)]


@pytest.fixture
def report(tmp_path: Path, run_files: list[str]) -> tuple[dict[str, str], dict[str, Any]]:
    metrics = compute_metrics(run_files)
    urls = write_report(str(tmp_path / "report"), metrics, run_info(), run_files)
    return urls, metrics


def read(url: str) -> str:
    return Path(url).read_text(encoding="utf-8")


def test_writes_three_files_and_metrics_round_trip(report) -> None:
    urls, metrics = report
    assert set(urls) == {"metrics", "markdown", "html"}
    assert all(Path(u).is_file() for u in urls.values())
    assert not list(Path(urls["html"]).parent.glob(".*.tmp"))  # atomic writes leave no temporaries
    saved = json.loads(read(urls["metrics"]))
    run = saved.pop("run_info")
    assert saved == json.loads(json.dumps(metrics))
    assert run["run_id"] == "run-2025-01-01-abc" and run["timings"]["collect"] == 1800.25


def test_markdown_report(report) -> None:
    urls, metrics = report
    md = read(urls["markdown"])
    accuracy = metrics["benchmarks"]["gsm8k"]["accuracy"]
    assert accuracy == pytest.approx(5 / 12)
    assert f"{accuracy:.2%}" in md
    header = md.split("## Headline", 1)[1].strip().splitlines()[0]
    for column in ("benchmark", "accuracy", "pass@1", "pass@n", "maj@n", "strict", "flexible", "mean reward"):
        assert column in header
    for text in ("## Benchmark: gsm8k", "## Benchmark: tetris", "### pass@k and maj@k", "### Latency (s)"):
        assert text in md
    for text in ("run-2025-01-01-abc", "sha256:feedbeef", "collect", "1800.2", "42m 00s", '"temperature": 0.7'):
        assert text in md
    # Per-prompt table: worst first.
    gsm = md.split("## Benchmark: gsm8k", 1)[1].split("## Benchmark: tetris", 1)[0]
    prompts = gsm.split("### Per prompt (worst first)", 1)[1]
    assert prompts.index("| p1 |") < prompts.index("| p0 |") < prompts.index("| p2 |")
    # Tetris statistics: most common reward and Pearson r between tool calls and reward.
    assert "most common" in md and "Pearson r" in md


def test_credentials_never_reach_reports(report) -> None:
    urls, _ = report
    for url in urls.values():
        text = read(url)
        assert "hunter2" not in text and "AKIA" not in text
        assert "s3://bucket/runs" in text


def test_html_is_self_contained_with_one_plotly_bundle(report) -> None:
    urls, metrics = report
    page = read(urls["html"])
    assert page.count(get_plotlyjs()) == 1
    assert len(re.findall(r"plotly\.js v\d", page)) == 1
    assert page.count('class="plotly-graph-div"') == CHARTS_PER_BENCHMARK * len(metrics["benchmarks"])
    assert "<script src=" not in page and not re.search(r"<script[^>]+src=[\"']?http", page)
    assert f"{metrics['benchmarks']['gsm8k']['accuracy']:.2%}" in page


def test_html_escapes_model_text_and_folds_long_completions(report) -> None:
    urls, _ = report
    page = read(urls["html"])
    assert EVIL not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in page
    assert "<details><summary>long reasoning" in page
    assert page.count('<table class="rollouts">') == 2
    assert EVIL not in read(urls["markdown"])


def test_report_for_an_empty_run(tmp_path: Path) -> None:
    metrics = compute_metrics([])
    urls = write_report(str(tmp_path / "empty"), metrics, run_info(timings={}), [])
    assert "No rollouts" in read(urls["markdown"])
    page = read(urls["html"])
    assert page.count(get_plotlyjs()) == 1 and 'class="plotly-graph-div"' not in page
    assert "(no rollouts)" in format_terminal_summary(metrics, urls)


def test_report_to_an_fsspec_store(run_files: list[str]) -> None:
    run_dir = f"memory://evalflow-test-reports-{uuid.uuid4().hex}/run"
    try:
        urls = write_report(run_dir, compute_metrics(run_files), run_info(), run_files)
        assert urls["html"] == f"{run_dir}/report.html"
        assert json.loads(store.read_text(urls["metrics"]))["total_rollouts"] == 16
    finally:
        fsspec.filesystem("memory").rm(run_dir.split("://", 1)[1].split("/", 1)[0], recursive=True)


def test_headline_rows_and_terminal_summary(report) -> None:
    urls, metrics = report
    rows = {r["benchmark"]: r for r in headline_rows(metrics)}
    gsm = rows["gsm8k"]
    assert gsm["prompts"] == 3 and gsm["rollouts"] == 12 and gsm["n"] == 4
    assert gsm["accuracy"] == pytest.approx(5 / 12)
    assert gsm["pass@1"] == pytest.approx(5 / 12)
    assert gsm["pass@n"] == pytest.approx(2 / 3)
    assert gsm["maj@n"] == pytest.approx(1 / 3)
    assert gsm["strict"] == pytest.approx(5 / 12) and gsm["flexible"] == pytest.approx(7 / 12)
    assert rows["tetris"]["strict"] is None
    summary = format_terminal_summary(metrics, urls)
    assert "gsm8k" in summary and "41.67%" in summary and urls["html"] in summary


def test_publish_artifacts_outside_a_run_is_a_no_op(report) -> None:
    urls, metrics = report
    assert publish_artifacts(urls, metrics, run_info()) is None


def test_report_task_publishes_artifacts_in_a_flow(prefect_home, tmp_path: Path, run_files: list[str]) -> None:
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from tasks.analysis import analyze_task

    @flow
    def eval_report_flow() -> dict[str, str]:
        metrics = analyze_task(run_files)
        return report_task(str(tmp_path / "flow-report"), metrics, run_info(), run_files)

    urls = eval_report_flow()
    assert Path(urls["html"]).is_file()
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["eval-report", "eval-report-html"]))
        )
    by_key = {a.key: a for a in found}
    assert "41.67%" in by_key["eval-report"].data
    assert Path(urls["html"]).resolve().as_uri() in by_key["eval-report-html"].data


def test_publish_artifacts_from_an_async_flow(prefect_home, report) -> None:
    """Inside async flows prefect's artifact helpers return coroutines unless forced to run sync."""
    import asyncio

    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    urls, metrics = report

    @flow
    async def async_eval_flow() -> None:
        publish_artifacts(urls, metrics, run_info(), key="Async Eval_Report")

    asyncio.run(async_eval_flow())
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(like_="async-eval-report")))
    assert {a.key for a in found} == {"async-eval-report", "async-eval-report-html"}
