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

from core.metrics_doc import EnvMetric, Interval, RunMetrics
from core.overrides import resolve_config
from core.record import RunInfo, RunRecord
from core.store import Store
from tasks.analysis.compare import compare
from tasks.analysis.metrics import compute_metrics
from tasks.reporting.assets import plotly_bundle
from tasks.reporting.headline import headline_records, headline_rows
from tasks.reporting.report import (
    artifact_markdown,
    format_terminal_summary,
    publish_artifacts,
    report_task,
    write_report,
)
from tests.tasks import conftest

HEADLINE_CHARTS = 2  # rates with CIs, mean reward with its CI
CHARTS = {"gsm8k": 5, "tetris": 6}  # tetris has tool calls: + mean reward by tool-call count
EVIL = "<script>alert('x')</script> & <b>bold</b>"
EVIL_JSON = "\\u003cscript\\u003ealert('x')\\u003c/script\\u003e \\u0026 \\u003cb\\u003ebold\\u003c/b\\u003e"


def analyze(files: list[str], store: Store) -> RunMetrics:
    """The one call into the analysis from these tests."""
    return compute_metrics(files, store)


def declare_env_metrics(metrics: RunMetrics) -> RunMetrics:
    """What gsm8k's environment declares for the `run_files` rows, built here rather than by the analysis
    so these tests pin the rendering alone: strict and flexible as headline rates."""
    gsm = metrics.benchmarks["gsm8k"]
    gsm.env_metrics = [
        EnvMetric(key="strict_correct", label="strict", kind="rate", headline=True, value=5 / 12, n=12,
                  ci=Interval(low=0.193, high=0.681, n=12)),
        EnvMetric(key="flexible_correct", label="flexible", kind="rate", headline=True, value=7 / 12, n=12,
                  ci=Interval(low=0.319, high=0.807, n=12)),
    ]  # fmt: skip
    return metrics


def run_info(**overrides: Any) -> RunInfo:
    info: dict[str, Any] = {
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
    return conftest.run_info(**info)


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
                    parsed_answer="2" if ok else (EVIL if p == "p1" and i == 3 else "3"),
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
def store(tmp_path: Path) -> Store:
    return Store(str(tmp_path))


@pytest.fixture
def report(store: Store, run_files: list[str]) -> tuple[dict[str, str], RunMetrics]:
    metrics = declare_env_metrics(analyze(run_files, store))
    urls = write_report(store.path("report"), metrics, run_info(), run_files, store)
    return urls, metrics


def read(url: str) -> str:
    return Path(url).read_text(encoding="utf-8")


def test_writes_three_files_and_metrics_round_trip(report) -> None:
    urls, metrics = report
    assert set(urls) == {"metrics", "markdown", "html", "browser"}
    assert all(Path(u).is_file() for u in urls.values())
    assert not list(Path(urls["html"]).parent.glob(".*.tmp"))  # atomic writes leave no temporaries
    saved = json.loads(read(urls["metrics"]))
    record = RunRecord.model_validate(saved)  # metrics.json is a RunRecord (strict: no unknown key)
    run = saved.pop("run_info")
    assert "comparison" not in saved  # no baseline, no comparison
    assert saved == json.loads(json.dumps(metrics.model_dump(mode="json")))
    assert run["run_id"] == "run-2025-01-01-abc" and run["timings"]["collect"] == 1800.25
    assert record.run_info.timings["collect"] == 1800.25 and record.state == "complete"


def test_markdown_report(report) -> None:
    urls, metrics = report
    md = read(urls["markdown"])
    accuracy = metrics.benchmarks["gsm8k"].accuracy
    assert accuracy == pytest.approx(5 / 12)
    assert f"{accuracy:.2%}" in md
    header = md.split("## Headline", 1)[1].strip().splitlines()[0]
    for column in ("benchmark", "accuracy", "pass@1", "pass@n", "maj@n", "mean reward"):
        assert column in header
    # the environments' own headline metrics: rows of the table under the headline, not columns of it
    own = md.split("## Benchmark metrics", 1)[1].split("\n## ", 1)[0]
    assert "| gsm8k | strict | 41.67% |" in own and "| gsm8k | flexible | 58.33% |" in own
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


def test_stage_timings_show_the_cpu_seconds_where_the_run_kept_them(store: Store, run_files: list[str]) -> None:
    metrics = declare_env_metrics(analyze(run_files, store))
    cpu = {"prepare_model": 3.25, "collect": 41.5}  # no figure for serve or analyze: they show a dash
    md = read(write_report(store.path("cpu"), metrics, run_info(cpu_timings=cpu), run_files, store)["markdown"])
    table = md.split("## Stage timings", 1)[1].split("##", 1)[0]
    assert "| stage | seconds | CPU seconds |" in table
    assert "| collect | 1800.2 | 41.5 |" in table and "| prepare_model | 12.5 | 3.2 |" in table
    assert "| serve | 95.0 | – |" in table and "| total | 1908.2 | 44.8 |" in table
    older = read(write_report(store.path("old"), metrics, run_info(), run_files, store)["markdown"])
    assert "CPU seconds" not in older  # a record written before CPU was kept: the column is left out


def test_credentials_never_reach_reports(report) -> None:
    urls, _ = report
    for kind, url in urls.items():
        text = read(url)
        assert "hunter2" not in text and "AKIA" not in text
        assert kind == "browser" or "s3://bucket/runs" in text  # the store's URL is shown, its secrets never


def test_html_links_the_stores_plotly_copy_once(report, store: Store) -> None:
    urls, metrics = report
    page = read(urls["html"])
    name, bundle = plotly_bundle()
    assert re.findall(r'<script[^>]*src="([^"]+)"', page) == [f"../static/{name}"]  # page at <store>/report/
    assert "plotly.js v" not in page and len(page.encode()) < 1_000_000  # was 4.8 MB of plotly.js + the page
    assert (Path(store.path("static", name))).read_bytes() == bundle == get_plotlyjs().encode()
    assert page.count('class="plotly-graph-div"') == HEADLINE_CHARTS + sum(CHARTS.values())
    for name, count in CHARTS.items():
        assert len(re.findall(rf'id="chart-{name}-', page)) == count
    assert not re.search(r"<script[^>]+src=[\"']?http", page)
    assert "<link " not in page and "@import" not in page
    assert f"{metrics.benchmarks['gsm8k'].accuracy:.2%}" in page


def test_single_file_report_inlines_plotly(store: Store, run_files: list[str]) -> None:
    metrics = analyze(run_files, store)
    config = resolve_config(None, [f"store.url={store.url}", "store.self_contained_reports=true"])  # as `evalflow run`
    info = run_info(config=config.model_dump(mode="json"))
    by_config = write_report(store.path("single"), metrics, info, run_files, store)
    by_argument = write_report(store.path("arg"), metrics, run_info(), run_files, store, self_contained=True)
    for urls in (by_config, by_argument):
        page = read(urls["html"])
        assert page.count(get_plotlyjs()) == 1 and "<script src=" not in page and ' src="' not in page
    assert not Path(store.path("static")).exists()  # nothing linked, nothing shared written


def test_the_shared_plotly_copy_is_written_once_and_repaired(store: Store, run_files: list[str]) -> None:
    metrics = analyze(run_files, store)
    write_report(store.path("runs", "r1"), metrics, run_info(), run_files, store)
    copy = Path(store.path("static", plotly_bundle()[0]))
    first = copy.stat()
    write_report(store.path("runs", "r2"), metrics, run_info(), run_files, store)
    assert copy.stat().st_ino == first.st_ino and copy.stat().st_mtime_ns == first.st_mtime_ns  # not rewritten
    assert 'src="../../static/plotly-' in read(store.path("runs", "r2", "report.html"))
    copy.write_bytes(b"truncated")  # a damaged copy (wrong size) is replaced
    write_report(store.path("runs", "r3"), metrics, run_info(), run_files, store)
    assert copy.read_bytes() == plotly_bundle()[1]


def test_a_report_outside_the_store_inlines_plotly(tmp_path: Path, run_files: list[str]) -> None:
    store = Store(str(tmp_path / "store"))
    urls = write_report(str(tmp_path / "elsewhere"), analyze(run_files, store), run_info(), run_files, store)
    assert read(urls["html"]).count(get_plotlyjs()) == 1 and not (tmp_path / "store" / "static").exists()


def test_the_artifact_markdown_carries_no_script(report) -> None:
    urls, metrics = report
    md = artifact_markdown(urls, metrics, run_info())
    assert "<script" not in md and "plotly" not in md.lower() and "Full report" in md
    assert "41.67%" in md  # the headline table is there


def test_html_escapes_model_text(report) -> None:
    urls, _ = report
    page, rollouts = read(urls["html"]), read(urls["browser"])
    assert EVIL not in page and EVIL not in rollouts and EVIL not in read(urls["markdown"])
    assert EVIL_JSON in rollouts  # the transcript data: JSON with <, > and & escaped


def test_the_report_links_each_benchmarks_rollouts_on_the_browser_page(report) -> None:
    urls, _ = report
    assert urls["browser"] == str(Path(urls["html"]).with_name("rollouts.html"))
    page = read(urls["html"])
    assert re.findall(r'href="(rollouts\.html#b=[a-z0-9-]+)"', page) == [
        "rollouts.html#b=gsm8k",
        "rollouts.html#b=tetris",
    ]
    assert "browser.js" not in page and "browser-data" not in page  # the browser's script and rows live there
    assert 'id="browser-data"' in read(urls["browser"])


def test_long_transcripts_are_clipped(store: Store, make_rollout, write_batch) -> None:
    huge = [{"role": "user", "content": "x" * 50_000}]
    files = [write_batch([make_rollout(messages=huge, transcript=[*huge, {"role": "assistant", "content": "y"}])])]
    urls = write_report(store.path("clip"), analyze(files, store), run_info(), files, store)
    assert "x" * 40_000 not in read(urls["html"])
    rollouts = read(urls["browser"])
    assert "clipped (" in rollouts and "x" * 40_000 not in rollouts


def test_tool_sections_only_where_tools_were_used(report) -> None:
    urls, _ = report
    md = read(urls["markdown"])
    gsm, tetris = md.split("## Benchmark: gsm8k", 1)[1].split("## Benchmark: tetris", 1)
    assert "### Tool calls" not in gsm and "Mean reward by tool-call count" not in gsm
    assert "### Tool calls" in tetris and "### Mean reward by tool-call count" in tetris
    page = read(urls["html"])
    assert "chart-gsm8k-reward-by-tool-calls" not in page and "chart-tetris-reward-by-tool-calls" in page


def test_report_shows_intervals_outcomes_and_reward_values(report) -> None:
    urls, metrics = report
    md = read(urls["markdown"])
    header = md.split("## Headline", 1)[1].strip().splitlines()[0]
    assert "accuracy 95% CI" in header and "mean reward 95% CI" in header
    interval = metrics.benchmarks["gsm8k"].ci.accuracy
    low, high = interval.low, interval.high
    assert f"{low * 100:.1f}–{high * 100:.1f}%" in md
    assert "### Prompt outcomes" in md and "| never succeed | 1 | p1 |" in md and "| always succeed | 1 | p2 |" in md
    assert "### Reward values" in md and "| 19.200 | 2 | 50.00% |" in md
    assert "pass@k 95% CI" in md


def test_report_for_an_empty_run(store: Store) -> None:
    metrics = analyze([], store)
    urls = write_report(store.path("empty"), metrics, run_info(timings={}), [], store)
    assert "No rollouts" in read(urls["markdown"])
    page = read(urls["html"])
    assert "plotly" not in page.lower() and not Path(store.path("static")).exists()  # no chart, no plotly.js
    assert "(no rollouts)" in format_terminal_summary(metrics, urls)


def test_report_to_an_fsspec_store(run_files: list[str]) -> None:
    memory = Store(f"memory://evalflow-test-reports-{uuid.uuid4().hex}")
    run_dir = memory.path("run")
    try:
        urls = write_report(run_dir, analyze(run_files, memory), run_info(), run_files, memory)
        assert urls["html"] == f"{run_dir}/report.html"
        assert json.loads(memory.read_text(urls["metrics"]))["total_rollouts"] == 16
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
    assert gsm["strict_correct"] == pytest.approx(5 / 12) and gsm["flexible_correct"] == pytest.approx(7 / 12)
    assert rows["tetris"]["strict_correct"] is None  # declared by gsm8k only
    summary = format_terminal_summary(metrics, urls)
    assert "gsm8k" in summary and "41.67%" in summary and urls["html"] in summary


def test_publish_artifacts_outside_a_run_is_a_no_op(report) -> None:
    urls, metrics = report
    assert publish_artifacts(urls, metrics, run_info()) is None


def test_headline_records_are_flat_json(report) -> None:
    _, metrics = report
    records = headline_records(metrics)
    assert [r["benchmark"] for r in records] == ["gsm8k", "tetris"]
    assert {"accuracy_ci_low", "accuracy_ci_high", "mean_reward_ci_low", "mean_reward_ci_high"} <= set(records[0])
    json.dumps(records, allow_nan=False)


def test_report_task_publishes_artifacts_in_a_flow(prefect_home, store: Store, run_files: list[str]) -> None:
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    from tasks.analysis.metrics import analyze_task

    baseline = analyze(run_files[:1], store)

    @flow
    def eval_report_flow() -> dict[str, str]:
        metrics = analyze_task(run_files, store)
        comparison = compare(metrics, baseline)
        return report_task(store.path("runs", "run-2025-01-01-abc"), metrics, run_info(), run_files, store, comparison)

    state = eval_report_flow(return_state=True)
    urls = state.result()
    assert Path(urls["html"]).is_file() and Path(urls["index_html"]).is_file()
    assert [r["run_id"] for r in json.loads(Path(urls["index_json"]).read_text())] == ["run-2025-01-01-abc"]
    keys = ["eval-report", "eval-report-html", "eval-report-metrics", "eval-report-index", "eval-comparison"]
    with get_client(sync_client=True) as client:
        # this flow run's artifacts only: other tests of the session publish under the same keys
        own = ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id])
        found = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=keys), flow_run_id=own))
    by_key = {a.key: a for a in found}
    assert set(by_key) == set(keys)
    assert "41.67%" in by_key["eval-report"].data
    assert Path(urls["html"]).resolve().as_uri() in by_key["eval-report-html"].data
    assert Path(urls["index_html"]).resolve().as_uri() in by_key["eval-report-index"].data
    assert by_key["eval-report-metrics"].type == "table"
    table = by_key["eval-report-metrics"].data
    table = json.loads(table) if isinstance(table, str) else table
    assert [row["benchmark"] for row in table] == ["gsm8k", "tetris"]
    assert "Comparison with baseline" in by_key["eval-comparison"].data


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
    assert {a.key for a in found} == {"async-eval-report", "async-eval-report-html", "async-eval-report-metrics"}


def test_the_run_table_shows_the_status_as_words_not_a_dict() -> None:
    from tasks.reporting.tables import run_sections

    status = {"state": "failed", "reason": "r", "failed_rollouts": 3, "planned_rollouts": 20, "failed_batches": []}
    rows = dict(run_sections(conftest.run_info(run_id="x", status=status))[0].table.rows)
    assert rows["status"] == "failed (3 of 20 rollouts failed)" and rows["run_id"] == "x"
    complete = conftest.run_info(status={**status, "state": "complete", "failed_rollouts": 0})
    rows = dict(run_sections(complete)[0].table.rows)
    assert rows["status"] == "complete"
    assert not [v for v in rows.values() if "{" in v]  # no field of the run shown as a dict


def test_a_sharded_run_lists_its_shards_in_their_own_table() -> None:
    from tasks.reporting.tables import run_sections

    shards = [
        {"index": 0, "batches": 3, "state": "Completed", "attempts": 1, "flow_runs": ["a"], "seconds": 61.2,
         "message": ""},
        {"index": 1, "batches": 2, "state": "Completed", "attempts": 2, "flow_runs": ["b", "c"], "seconds": 140.0,
         "message": ""},
    ]  # fmt: skip
    sections = run_sections(conftest.run_info(run_id="x", shards=shards))
    assert "shards" not in dict(sections[0].table.rows)  # not a dict dumped into the Run table
    table = next(s.table for s in sections if s.title == "Shards")
    assert table.rows == [["1", "3", "Completed", "1", "61.2", "a"], ["2", "2", "Completed", "2", "140.0", "b, c"]]


def test_skipped_long_prompts_are_said_under_the_title(store: Store, run_files: list[str]) -> None:
    """on_long_prompt: skip leaves prompts out: the report says how many, of how many, and why."""
    metrics = declare_env_metrics(analyze(run_files, store))
    long = {"gsm8k": {"limit": 1536, "longest": 4856, "policy": "skip", "prompts": 5, "skipped": 2}}
    urls = write_report(store.path("skipped"), metrics, run_info(long_prompts=long), run_files, store)
    note = "gsm8k 2 of 5 prompts (over 1536 tokens; the longest 4856)"
    md, html = read(urls["markdown"]), read(urls["html"])
    assert md.split("## Headline")[0].count(note) == 1 and "on_long_prompt: skip" in md
    assert f'<p class="run-note">Skipped, as benchmarks.N.on_long_prompt: skip asks: {note}' in html
    assert "long_prompts" not in md  # a note, not a dict in the Run table
    plain = write_report(store.path("plain"), metrics, run_info(), run_files, store)
    assert "Skipped, as" not in read(plain["markdown"])


def test_the_artifact_and_report_carry_the_judges_sections(report) -> None:
    from core.judge_record import JudgeInfo, JudgeMetric, Pairwise

    urls, metrics = report
    metric = JudgeMetric(benchmark="gsm8k", metric="judged", judged=12, unparsed=1, passed=5, answers=12, labelled=11,
                         both_pass=4, judge_only=1, label_only=2, both_fail=4, agreement=0.73, kappa=0.45)  # fmt: skip
    pairs = Pairwise(benchmark="gsm8k", baseline_run_id="r0", pairs=12, wins=5, ties=4, losses=3, flips=2,
                     win_rate=7 / 12, ci_low=0.4, ci_high=0.75)  # fmt: skip
    judge = JudgeInfo(model="qwen3-8b", identity="i", mode="external", asked=36, requests=30, metrics=[metric],
                      pairwise=[pairs])  # fmt: skip
    md = artifact_markdown(urls, metrics, run_info().model_copy(update={"judge": judge}))
    assert "**Judge**" in md and "| gsm8k | judged | 12 | 41.67% | 8.33% | 11 |" in md
    assert "**Judge: pairwise against the baseline**" in md and "| gsm8k | r0 | 12 | 5 | 4 | 3 | 58.33% |" in md
