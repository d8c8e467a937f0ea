"""The sweep report: one row per grid point (its values, its child run's state and headline metrics),
a chart of each benchmark's accuracy over the first grid key, as sweep.json, report.md and a
self-contained report.html under `<store>/sweeps/<sweep id>/`, plus Prefect artifacts."""

from __future__ import annotations

import html
import json
from typing import Any

import plotly.graph_objects as go

from core import store
from tasks.reporting.report import (
    Table,
    browser_url,
    fig_html,
    fmt_ci,
    fmt_num,
    fmt_rate,
    html_page,
    html_table,
    md_table,
)

SWEEP_FILES = {"json": "sweep.json", "markdown": "report.md", "html": "report.html"}
ARTIFACT_KEY = "sweep-report"


def _value(value: Any) -> str:
    return json.dumps(value) if isinstance(value, list | dict) else str(value)


def benchmarks_of(points: list[dict[str, Any]]) -> list[str]:
    return sorted({name for p in points for name in p.get("headline", {})})


def points_table(info: dict[str, Any], points: list[dict[str, Any]], link: bool = False) -> Table:
    """Grid values, state, and per benchmark: accuracy (95% CI), pass@n, mean reward."""
    keys = list(info["grid"])
    header = ["point", *keys, "state"]
    names = benchmarks_of(points)
    for name in names:
        header += [f"{name} accuracy (95% CI)", f"{name} pass@n", f"{name} mean reward"]
    header += ["run"]
    rows = []
    for p in points:
        row = [f"p{p['index']}", *(_value(p["values"][k]) for k in keys), p["state"]]
        for name in names:
            h = p.get("headline", {}).get(name)
            if h is None:
                row += ["", "", ""]
                continue
            low, high = h.get("accuracy_ci") or (None, None)
            row += [f"{fmt_rate(h.get('accuracy'))} ({fmt_ci(low, high)})", fmt_rate(h.get("pass@n")),
                    fmt_num(h.get("mean_reward"))]  # fmt: skip
        row.append(p.get("run_id") or p.get("message") or "")
        rows.append(row)
    return Table(header, rows)


def accuracy_chart(info: dict[str, Any], points: list[dict[str, Any]]) -> str | None:
    """Accuracy against the first grid key: one line per benchmark and combination of the other keys."""
    keys = list(info["grid"])
    if not keys or not benchmarks_of(points):
        return None
    first, rest = keys[0], keys[1:]
    fig = go.Figure()
    for name in benchmarks_of(points):
        series: dict[str, tuple[list[str], list[float]]] = {}
        for p in points:
            h = p.get("headline", {}).get(name)
            if h is None or h.get("accuracy") is None:
                continue
            label = name + "".join(f", {k}={_value(p['values'][k])}" for k in rest)
            xs, ys = series.setdefault(label, ([], []))
            xs.append(_value(p["values"][first]))
            ys.append(h["accuracy"])
        for label, (xs, ys) in series.items():
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=label))
    fig.update_xaxes(title=first, type="category")
    fig.update_yaxes(title="accuracy", tickformat=".0%")
    return fig_html(fig, "sweep-accuracy", f"Accuracy by {first}")


def render_markdown(info: dict[str, Any], points: list[dict[str, Any]]) -> str:
    lines = [
        f"# Sweep {info['sweep_id']}" + (f": {info['name']}" if info.get("name") else ""),
        "",
        f"Grid: {', '.join(f'`{k}` = {_value(v)}' for k, v in info['grid'].items())}; "
        f"{len(points)} points via `{info.get('deployment') or 'this process'}`.",
        "",
        md_table(points_table(info, points)),
        "",
    ]
    for p in points:
        if p.get("report"):
            lines.append(f"- p{p['index']}: `{p['report']}`")
    return "\n".join(lines) + "\n"


def render_html(info: dict[str, Any], points: list[dict[str, Any]], store_url: str) -> str:
    title = f"Sweep {info['sweep_id']}" + (f": {info['name']}" if info.get("name") else "")
    table = points_table(info, points)
    links = "".join(
        f'<li>p{p["index"]}: <a href="{html.escape(browser_url(store.join(store_url, p["report"])))}">'
        f"{html.escape(p['report'])}</a></li>"
        for p in points
        if p.get("report")
    )
    chart = accuracy_chart(info, points) or ""
    body = (
        f"<h1>{html.escape(title)}</h1>"
        f"<p>{len(points)} points via {html.escape(info.get('deployment') or 'this process')}</p>"
        f"{html_table(table)}{chart}<h2>Reports</h2><ul>{links}</ul>"
    )
    return html_page(title, body)


def write_sweep_report(
    store_url: str, info: dict[str, Any], points: list[dict[str, Any]], storage_options: dict[str, Any] | None = None
) -> dict[str, str]:
    """Write the sweep's files (atomically, through fsspec), link them as artifacts, return their URLs."""
    folder = store.join(store_url, "sweeps", info["sweep_id"])
    urls = {kind: store.join(folder, name) for kind, name in SWEEP_FILES.items()}
    store.write_text(
        urls["json"], json.dumps({**info, "points": points}, indent=2, default=str) + "\n", storage_options
    )
    markdown = render_markdown(info, points)
    store.write_text(urls["markdown"], markdown, storage_options)
    store.write_text(urls["html"], render_html(info, points, store_url), storage_options)
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
    create_markdown_artifact(markdown=markdown, key=ARTIFACT_KEY, description="evalflow sweep", _sync=True)
    create_link_artifact(
        link=browser_url(urls["html"]), link_text="sweep report", key=f"{ARTIFACT_KEY}-html", _sync=True
    )
