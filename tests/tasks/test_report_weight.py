"""Report weight and charts: one shared plotly.js per store that pages link relatively (rendered in
headless Chromium from a file, from `evalflow reports serve` and from S3), and the chart specs
(mode bar, k/n-aligned per-prompt bins, percent trend axes, no maj@k where it is not declared)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import pytest

from core.metrics_doc import BenchmarkMetrics, PromptRow, RunMetrics
from core.record import RunInfo, RunStatus
from core.store import Store
from core.sweep_record import SweepRecord
from tasks.analysis.metrics import compute_metrics
from tasks.reporting.assets import plotly_bundle
from tasks.reporting.charts import (
    CHART_CONFIG,
    TITLE_TOP_PX,
    benchmark_charts,
    chart,
    headline_charts,
    pass_maj_curve,
    prompt_figure,
    rate_axis,
)
from tasks.reporting.headline import StoredHeadline
from tasks.reporting.index import index_entry, update_index
from tasks.reporting.index_page import StoredEntry, trend_figure
from tasks.reporting.report import write_report
from tasks.reporting.serve import make_server
from tasks.reporting.sweep import write_sweep_report
from tests.tasks.conftest import serve_in_thread
from tests.tasks.test_s3_e2e import BUCKET, s3_endpoint, s3_options  # noqa: F401 (s3_endpoint: a fixture)

CHROMIUM = Path("/usr/bin/chromium")
RUN_ID = "20250101-000000-weight"


def bench(per_prompt: list[tuple[int, int]], maj: bool = True) -> BenchmarkMetrics:
    """A benchmark's metrics with one PromptRow per (n, successes)."""
    prompts = [PromptRow(prompt_id=f"p{i:04d}", n=n, successes=s, success_rate=s / n, mean_reward=s / n)
               for i, (n, s) in enumerate(per_prompt)]  # fmt: skip
    total, ok = sum(n for n, _ in per_prompt), sum(s for _, s in per_prompt)
    ci = {"low": 0.1, "high": 0.3, "n": total}
    return BenchmarkMetrics(
        n_prompts=len(prompts), n_rollouts=total, successes=ok, repeats={"min": 1, "max": 4},
        accuracy=ok / total, mean_reward=ok / total, per_prompt=prompts,
        pass_at_k={"1": 0.2, "2": 0.3, "4": 0.4},
        maj_at_k={"1": 0.2, "2": 0.25, "4": 0.3} if maj else {},
        ci={"accuracy": ci, "pass_at_k": {"1": ci}, "maj_at_k": {"1": ci} if maj else {}},
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Chart specs


def test_the_mode_bar_shows_on_hover_above_a_left_aligned_title() -> None:
    rendered = chart(go.Figure(go.Bar(x=[1], y=[1])), "chart-x", "A long title " * 5)
    assert CHART_CONFIG["displayModeBar"] == "hover" and '"displayModeBar": "hover"' in rendered.html
    fig = go.Figure()
    chart(fig, "chart-y", "t")
    title = fig.layout.title
    assert (title.yref, title.y, title.yanchor, title.pad.t) == ("container", 1, "top", TITLE_TOP_PX)
    assert (title.x, title.xanchor) == (0, "left") and fig.layout.margin.t > TITLE_TOP_PX + 30  # room for the title


def test_per_prompt_success_bars_are_centred_on_k_over_n() -> None:
    # 150 prompts of 4 repeats: 30 each of 0..4 successes, and one prompt with 3 rollouts and 1 success
    bm = bench([(4, i % 5) for i in range(150)] + [(3, 1)])
    fig, title = prompt_figure(bm)
    (bar,) = fig.data
    assert list(bar.x) == [0, 0.25, 0.5, 0.75, 1] and list(bar.y) == [30, 31, 30, 30, 30]  # 1/3 -> nearest 1/4
    assert bar.width == pytest.approx(0.9 / 4)
    assert fig.layout.xaxis.range == (-0.125, 1.125) and fig.layout.xaxis.tickformat == ".0%"
    assert title == "Per-prompt success rates (151 prompts)"
    few, few_title = prompt_figure(bench([(4, 1), (4, 4)]))  # few prompts: one bar each
    assert list(few.data[0].x) == ["p0001", "p0000"] and few_title == "Success rate per prompt"


def test_many_repeats_label_about_ten_ticks() -> None:
    fig, _ = prompt_figure(bench([(100, i % 101) for i in range(202)]))
    assert len(fig.data[0].x) == 101 and list(fig.layout.xaxis.tickvals) == [k / 100 for k in range(0, 101, 10)]


def test_no_maj_series_where_the_environment_declares_none() -> None:
    with_maj, without = pass_maj_curve(bench([(4, 1)] * 3)), pass_maj_curve(bench([(4, 1)] * 3, maj=False))
    assert [t.name for t in with_maj.data] == ["pass@k", "maj@k"] and with_maj.layout.showlegend
    assert [t.name for t in without.data] == ["pass@k"] and without.layout.showlegend is False
    titles = [c.title for c in benchmark_charts("tetris", bench([(4, 1)] * 3, maj=False))]
    assert "pass@k (95% CI)" in titles and not any("maj" in t for t in titles)
    run = RunMetrics(total_rollouts=12, benchmarks={"tetris": bench([(4, 1)] * 3, maj=False)})
    rates = headline_charts(run)[0].html
    assert '"name":"maj@n"' not in rates.replace(" ", "") and '"name":"pass@n"' in rates.replace(" ", "")


def test_rate_axes_reach_the_data_not_100_percent() -> None:
    """A 0.6% bar on a 0-100% axis cannot be seen: the axis ends 10% above the highest value or CI bound."""
    run = RunMetrics(total_rollouts=12, benchmarks={"tetris": bench([(4, 1)] * 3, maj=False)})
    rates = headline_charts(run)[0].html.replace(" ", "")
    assert '"range":[0,0.44000000000000006]' in rates and '"tickformat":".0%"' in rates  # pass@n 0.4 on top
    assert rate_axis("rate", [0.006, None], [(0.002, 0.011)]) == {
        "title": "rate", "range": [0, pytest.approx(0.0121)], "tickformat": ".1%",
    }  # fmt: skip
    assert rate_axis("rate", [0.001], [(None, None)])["tickformat"] == ".2%"
    assert rate_axis("rate", [0.98], [(0.95, 1.0)])["range"] == [0, 1.05]  # never past 105%


def trend_point(run_id: str, finished: str) -> tuple[StoredEntry, StoredHeadline]:
    headline = {"accuracy": 0.712, "accuracy_ci": [0.7, 0.72], "mean_reward": 0.712}
    entry = StoredEntry.model_validate({"run_id": run_id, "finished_at": finished, "headline": {"b": headline}})
    return entry, entry.headline["b"]


def test_trend_axes_are_percent_and_a_single_run_is_not_zoomed_to_milliseconds() -> None:
    fig = trend_figure([trend_point("r1", "2025-01-02T12:00:00+00:00")])
    assert fig.layout.yaxis.tickformat == ".0%" and fig.layout.yaxis.rangemode == "tozero"
    assert fig.layout.yaxis2.tickformat == ".3~g" and fig.layout.yaxis2.rangemode == "tozero"
    assert fig.layout.yaxis2.showgrid is False  # its ticks are its own, not the accuracy grid's
    assert fig.layout.xaxis.range == ("2025-01-01T12:00:00+00:00", "2025-01-03T12:00:00+00:00")
    two = trend_figure([trend_point("r1", "2025-01-01T00:00:00"), trend_point("r2", "2025-01-02T00:00:00")])
    assert two.layout.xaxis.range is None  # two dates: plotly's own range


# ---------------------------------------------------------------------------------------------
# Pages in Chromium


def rendered_charts(url: str) -> int:
    """How many plotly charts Chromium drew in the page at `url` (one .plot-container per chart)."""
    if not CHROMIUM.exists():
        pytest.skip(f"needs Debian's chromium at {CHROMIUM}")
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=15000", "--dump-dom", url]
    dom = subprocess.run([str(CHROMIUM), *args], capture_output=True, text=True, timeout=120, check=True).stdout
    assert 'class="main-svg"' in dom or "plot-container" not in dom
    return len(re.findall(r'class="plot-container plotly"', dom))


@pytest.fixture
def site(make_rollout: Callable[..., dict[str, Any]], write_batch: Callable[..., str]) -> Callable[[Store], int]:
    """Write a run's report and the index into a store; returns how many charts the report has."""
    rows = [make_rollout(prompt_id=f"p{p}", repeat=r, success=(p + r) % 3 == 0, reward=float((p + r) % 3 == 0))
            for p in range(6) for r in range(4)]  # fmt: skip
    files = [write_batch(rows)]

    def build(store: Store) -> int:
        metrics = compute_metrics(files, store)
        info = RunInfo(
            run_id=RUN_ID, model="tiny", status=RunStatus(state="complete"), finished_at="2025-01-01T00:00:00+00:00"
        )
        urls = write_report(store.path("runs", RUN_ID), metrics, info, files, store)
        update_index(store, index_entry(info, metrics, urls, store.url))
        return store.read_text(urls["html"]).count('class="plotly-graph-div"')

    return build


@pytest.fixture
def served() -> Iterator[Callable[[Store], str]]:
    servers = []

    def start(store: Store) -> str:
        server = make_server(store, port=0)
        serve_in_thread(server)
        servers.append(server)
        host, port = server.server_address[:2]
        return f"http://{host}:{port}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_report_linking_the_shared_plotly_renders_from_a_file_and_served(
    tmp_path: Path, site: Callable[[Store], int], served: Callable[[Store], str]
) -> None:
    store = Store(str(tmp_path / "store"))
    charts = site(store)
    report = tmp_path / "store" / "runs" / RUN_ID / "report.html"
    assert charts == 7 and f'src="../../static/{plotly_bundle()[0]}"' in report.read_text()
    assert report.stat().st_size < 1_000_000
    assert rendered_charts(report.as_uri()) == charts
    assert rendered_charts((tmp_path / "store" / "index.html").as_uri()) == 1  # the trend
    base = served(store)
    assert rendered_charts(f"{base}/runs/{RUN_ID}/report.html") == charts


def test_a_report_on_s3_links_the_copy_on_s3(
    s3_endpoint: str,  # noqa: F811
    site: Callable[[Store], int],
    served: Callable[[Store], str],
) -> None:
    store = Store(f"s3://{BUCKET}/weight", s3_options(s3_endpoint))
    charts = site(store)
    name, bundle = plotly_bundle()
    assert store.read_bytes(store.path("static", name)) == bundle
    assert f'src="../../static/{name}"' in store.read_text(store.path("runs", RUN_ID, "report.html"))
    assert rendered_charts(f"{served(store)}/runs/{RUN_ID}/report.html") == charts


def test_a_sweep_page_links_plotly_and_the_point_reports_relatively(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    info = {"sweep_id": "sw1", "grid": {"sampling.temperature": [0.6, 0.8]}}
    headline = {"accuracy": 0.25, "accuracy_ci": [0.1, 0.5], "mean_reward": 0.25}
    elsewhere = str(tmp_path / "other" / "report.html")
    reports = {0.6: "runs/r0/report.html", 0.8: elsewhere}
    points = [{"index": i, "values": {"sampling.temperature": t}, "state": "Completed", "headline": {"b": headline},
               "report": report} for i, (t, report) in enumerate(reports.items())]  # fmt: skip
    urls = write_sweep_report(store, SweepRecord.model_validate({**info, "points": points}))
    page = Path(urls["html"]).read_text()
    name = plotly_bundle()[0]
    assert urls["html"] == store.path("sweeps", "sw1", "report.html") and f'src="../../static/{name}"' in page
    assert "plotly.js v" not in page and (tmp_path / "store" / "static" / name).is_file()
    # inside the store: relative, so it works served and on S3 (was file:///...); elsewhere: a file:// URI
    assert re.findall(r'<li>p\d: <a href="([^"]+)"', page) == ["../../runs/r0/report.html", Path(elsewhere).as_uri()]
