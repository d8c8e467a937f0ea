"""The sweep report: the grid points side by side, as files under `<store>/sweeps/<sweep id>/` and artifacts.

One row per grid point (its values, its child run's state and headline metrics) and a chart of each
benchmark's accuracy over the first grid key, as sweep.json, report.md and report.html (which links the
store's plotly.js, see assets.py).
"""

from __future__ import annotations

import json
import os
import posixpath
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from core.store import Store, join
from core.sweep_record import SweepPoint, SweepRecord
from tasks.prefect_sync import sync_call
from tasks.reporting.assets import plotly_script
from tasks.reporting.charts import chart
from tasks.reporting.format import browser_url, fmt_ci, fmt_num, fmt_rate, relative_link
from tasks.reporting.headline import StoredHeadline
from tasks.reporting.parts import Chart, Link, Table
from tasks.reporting.render import render_html, render_markdown

SWEEP_DIR = ("sweeps",)
SWEEP_FILES = {"json": "sweep.json", "markdown": "report.md", "html": "report.html"}
ARTIFACT_KEY = "sweep-report"


@dataclass(frozen=True)
class SweepView:
    title: str
    grid: list[tuple[str, str]]  # (config key, its values)
    via: str  # the deployment the points ran through, or "this process"
    points: int
    table: Table
    chart: Chart | None
    reports: list[Link]  # each point's report: its path in the store, and a link from the sweep's page


def _value(value: Any) -> str:
    return json.dumps(value) if isinstance(value, list | dict) else str(value)


def _headlines(point: SweepPoint) -> dict[str, StoredHeadline]:
    return {name: StoredHeadline.model_validate(h) for name, h in point.headline.items()}


def benchmarks_of(points: list[SweepPoint]) -> list[str]:
    return sorted({name for p in points for name in p.headline})


def points_table(sweep: SweepRecord) -> Table:
    """Grid values, state, and per benchmark: accuracy (95% CI), pass@n, mean reward."""
    points = sweep.points
    keys = list(sweep.grid)
    header = ["point", *keys, "state"]
    names = benchmarks_of(points)
    for name in names:
        header += [f"{name} accuracy (95% CI)", f"{name} pass@n", f"{name} mean reward"]
    header += ["run"]
    rows = []
    for p in points:
        row = [f"p{p.index}", *(_value(p.values[k]) for k in keys), p.state]
        headlines = _headlines(p)
        for name in names:
            h = headlines.get(name)
            if h is None:
                row += ["", "", ""]
                continue
            accuracy = f"{fmt_rate(h.accuracy)} ({fmt_ci(*h.accuracy_ci)})"
            row += [accuracy, fmt_rate(h.pass_at_n), fmt_num(h.mean_reward)]
        row.append(p.run_id or p.message or "")
        rows.append(row)
    return Table(header, rows)


def accuracy_chart(sweep: SweepRecord) -> Chart | None:
    """Accuracy against the first grid key: one line per benchmark and combination of the other keys."""
    points = sweep.points
    keys = list(sweep.grid)
    if not keys or not benchmarks_of(points):
        return None
    first, rest = keys[0], keys[1:]
    fig = go.Figure()
    for name in benchmarks_of(points):
        series: dict[str, tuple[list[str], list[float]]] = {}
        for p in points:
            h = _headlines(p).get(name)
            if h is None or h.accuracy is None:
                continue
            label = name + "".join(f", {k}={_value(p.values[k])}" for k in rest)
            xs, ys = series.setdefault(label, ([], []))
            xs.append(_value(p.values[first]))
            ys.append(h.accuracy)
        for label, (xs, ys) in series.items():
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=label))
    fig.update_xaxes(title=first, type="category")
    fig.update_yaxes(title="accuracy", tickformat=".0%")
    return chart(fig, "sweep-accuracy", f"Accuracy by {first}")


def report_href(report: str, sweep_id: str) -> str:
    """A link from the sweep's page to a point's report: relative inside the store (so it works from a
    file, served, and on S3), a browser URL for a report elsewhere."""
    if "://" in report or os.path.isabs(report):
        return browser_url(report)
    return relative_link(posixpath.join(*SWEEP_DIR, sweep_id, SWEEP_FILES["html"]), report)


def sweep_view(sweep: SweepRecord) -> SweepView:
    """The sweep's page; point reports are paths relative to the store root."""
    return SweepView(
        title=f"Sweep {sweep.sweep_id}" + (f": {sweep.name}" if sweep.name else ""),
        grid=[(k, _value(v)) for k, v in sweep.grid.items()],
        via=sweep.deployment or "this process",
        points=len(sweep.points),
        table=points_table(sweep),
        chart=accuracy_chart(sweep),
        reports=[
            Link(f"p{p.index}", p.report, report_href(p.report, sweep.sweep_id)) for p in sweep.points if p.report
        ],
    )


def write_sweep_report(store: Store, sweep: SweepRecord) -> dict[str, str]:
    """Write the sweep's files (sweep.json is the record; atomically, through the store), link them as
    artifacts, return their URLs."""
    folder = store.path(*SWEEP_DIR, sweep.sweep_id)
    urls = {kind: join(folder, name) for kind, name in SWEEP_FILES.items()}
    view = sweep_view(sweep)
    markdown = render_markdown("sweep.md.j2", view=view)
    store.write_text(urls["json"], json.dumps(sweep.model_dump(mode="json"), indent=2) + "\n")
    store.write_text(urls["markdown"], markdown)
    plotly = plotly_script(store, urls["html"]) if view.chart else None
    store.write_text(urls["html"], render_html("sweep.html.j2", view=view, plotly=plotly))
    _publish(urls, markdown)
    return urls


def _publish(urls: dict[str, str], markdown: str) -> None:
    from prefect.artifacts import create_link_artifact, create_markdown_artifact
    from prefect.context import get_run_context
    from prefect.exceptions import MissingContextError

    try:
        get_run_context()
    except MissingContextError:
        return
    sync_call(create_markdown_artifact, markdown=markdown, key=ARTIFACT_KEY, description="evalflow sweep")
    sync_call(
        create_link_artifact, link=browser_url(urls["html"]), link_text="sweep report", key=f"{ARTIFACT_KEY}-html"
    )
