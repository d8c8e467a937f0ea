"""index.html, the run store's front page: every run linked to its report, and trend charts.

Runs are listed newest first; the trends are accuracy and mean reward per deployment (or run name) and
benchmark. Training runs (runs whose info names one, a checkpoint each) get a table of their own linking
each one's curve page, `training/<id>/index.html` (training_curve.py); which run stands for a step is
decided here (`step_runs`), so the index and the curve page count the same steps.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import plotly.graph_objects as go
from pydantic import Field

from core.record import IndexEntry
from core.store import Store
from tasks.reporting.assets import plotly_script
from tasks.reporting.charts import chart, error_bars
from tasks.reporting.format import NONE, fmt_ci, fmt_num, fmt_rate, slug
from tasks.reporting.headline import StoredHeadline
from tasks.reporting.parts import Chart
from tasks.reporting.render import render_html

MAX_TREND_CHARTS = 40
INDEX_HTML = "index.html"
TRAINING_DIR = "training"
_TRAINING_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")
E = TypeVar("E", bound=IndexEntry)


class StoredEntry(IndexEntry):
    """An index entry (core.record.IndexEntry) as the page shows it: headline rows typed, its group and link."""

    # IndexEntry's open rows read back typed (pydantic validates each into a StoredHeadline): a narrower field
    headline: dict[str, StoredHeadline] = Field(default_factory=dict)  # pyright: ignore[reportIncompatibleVariableOverride]  # read-only view

    @property
    def group(self) -> str:
        """What a run is compared with over time: its deployment, else its run name."""
        if self.deployment:
            return f"deployment: {self.deployment}"
        if self.run_name:
            return f"run name: {self.run_name}"
        return "(no deployment or run name)"

    @property
    def href(self) -> str:
        """Reports inside the store are relative links; a report elsewhere on this disk gets a file:// URI."""
        report = self.report or ""
        if report and "://" not in report and os.path.isabs(report):
            return Path(report).as_uri()
        return report


@dataclass(frozen=True)
class IndexRow:
    """One (run, benchmark) row of the runs table."""

    run_id: str
    label: str  # the run name, else its id
    status: str  # complete | incomplete | failed
    href: str
    finished: str
    group: str
    model: str
    benchmark: str
    size: str  # prompts × n
    accuracy: str
    accuracy_ci: str
    pass_at_1: str
    pass_at_n: str
    maj_at_n: str
    mean_reward: str
    mean_reward_ci: str
    flags: str = ""  # this benchmark's regressions against the run's baseline ("accuracy, pass@1")
    gate_failed: bool = False


@dataclass(frozen=True)
class TrainingRunRow:
    """One training run in the index: how many steps have a complete evaluation, the latest and the best."""

    training_run: str
    href: str  # its curve page, relative to the store root; "" for an id that cannot name a folder
    steps: int
    latest: str
    best: str  # by the accuracy of its first benchmark (by name)


@dataclass(frozen=True)
class IndexView:
    title: str
    runs: int
    trends: list[Chart]
    rows: list[IndexRow]
    training_runs: list[TrainingRunRow] = field(default_factory=list)


def _rows(entry: StoredEntry) -> list[IndexRow]:
    run_id = str(entry.run_id)
    base: dict[str, Any] = {
        "run_id": run_id,
        "label": entry.run_name or entry.run_id or "?",
        "status": entry.status,
        "href": entry.href,
        "finished": (entry.finished_at or NONE)[:19].replace("T", " "),
        "group": entry.group,
        "model": entry.model or NONE,
    }
    if not entry.headline:
        empty = StoredHeadline()
        return [IndexRow(**base, benchmark=NONE, size=NONE, **_cells(empty))]
    failed = entry.gate_passed is False
    return [
        IndexRow(
            **base,
            benchmark=name,
            size=f"{fmt_num(h.prompts)} × {fmt_num(h.n)}",
            **_cells(h),
            flags=", ".join(r.split(": ", 1)[1] for r in entry.regressions if r.split(": ", 1)[0] == name),
            gate_failed=failed,
        )
        for name, h in entry.headline.items()
    ]


def _cells(h: StoredHeadline) -> dict[str, Any]:
    return {
        "accuracy": fmt_rate(h.accuracy),
        "accuracy_ci": fmt_ci(*h.accuracy_ci),
        "pass_at_1": fmt_rate(h.pass_at_1),
        "pass_at_n": fmt_rate(h.pass_at_n),
        "maj_at_n": fmt_rate(h.maj_at_n),
        "mean_reward": fmt_num(h.mean_reward),
        "mean_reward_ci": fmt_ci(*h.mean_reward_ci, rate=False),
    }


def _time_range(when: list[str]) -> dict[str, Any]:
    """A day either side when every point has one timestamp (plotly would zoom to milliseconds)."""
    try:
        times = {datetime.fromisoformat(w.replace("Z", "+00:00")) for w in when}
    except ValueError:
        return {}
    if len(times) != 1:
        return {}
    (t,) = times
    return {"range": [(t - timedelta(days=1)).isoformat(), (t + timedelta(days=1)).isoformat()]}


def trend_figure(points: list[tuple[StoredEntry, StoredHeadline]]) -> go.Figure:
    """Accuracy (with its CI, a percent axis from 0) and mean reward (its own axis) of runs over time."""
    when = [str(e.finished_at or e.started_at) for e, _ in points]
    labels = [f"{e.run_id} · {e.model}" for e, _ in points]
    acc = [h.accuracy for _, h in points]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=when,
            y=acc,
            text=labels,
            mode="lines+markers",
            name="accuracy",
            error_y=error_bars(acc, [h.accuracy_ci for _, h in points]),
            hovertemplate="%{text}<br>accuracy %{y:.2%}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=when,
            y=[h.mean_reward for _, h in points],
            text=labels,
            mode="lines+markers",
            name="mean reward",
            yaxis="y2",
            line={"dash": "dot"},
            hovertemplate="%{text}<br>mean reward %{y:.3f}<extra></extra>",
        )
    )
    fig.update_layout(
        xaxis={"title": "finished", "type": "date", **_time_range(when)},
        # whole percents from 0; the reward axis has its own ticks (not synced to the accuracy grid)
        yaxis={"title": "accuracy", "tickformat": ".0%", "rangemode": "tozero", "nticks": 8},
        yaxis2={"title": "mean reward", "overlaying": "y", "side": "right", "rangemode": "tozero",
                "tickmode": "auto", "nticks": 8, "tickformat": ".3~g", "showgrid": False},
        legend={"orientation": "h", "y": -0.25},
    )  # fmt: skip
    return fig


def trend_charts(entries: list[StoredEntry], limit: int = MAX_TREND_CHARTS) -> list[Chart]:
    """Accuracy and mean reward over time, one chart per (group, benchmark), the most recently updated
    first; `entries` are newest first, as the index keeps them."""
    series: dict[tuple[str, str], list[tuple[StoredEntry, StoredHeadline]]] = {}
    for entry in reversed(entries):
        for name, h in entry.headline.items():
            series.setdefault((entry.group, name), []).append((entry, h))
    position = {id(entry): i for i, entry in enumerate(entries)}
    latest = sorted(series, key=lambda key: position[id(series[key][-1][0])])[:limit]
    return [
        chart(trend_figure(series[key]), f"trend-{slug(key[0])}-{slug(key[1])}", f"{key[1]} — {key[0]}")
        for key in latest
    ]


def training_page(training_run: str) -> str | None:
    """The store path of a training run's curve page; None for an id that could leave `training/` (its
    folder is named after it)."""
    return f"{TRAINING_DIR}/{training_run}/{INDEX_HTML}" if _TRAINING_RUN_ID.match(training_run) else None


def step_runs(entries: Iterable[E], training_run: str) -> dict[int, list[E]]:
    """A training run's complete runs per step, by step; each step's newest first when `entries` are (as the
    index keeps them). A failed or partial run is no point of the curve; a re-evaluation supersedes."""
    steps: dict[int, list[E]] = {}
    for e in entries:
        if e.training_run == training_run and e.step is not None and e.status == "complete":
            steps.setdefault(e.step, []).append(e)
    return dict(sorted(steps.items()))


def best_step(values: Iterable[tuple[int, float | None]]) -> int | None:
    """The step with the highest value (the earliest on ties: it got there first); None when none has one."""
    scored = [(v, -s) for s, v in values if v is not None]
    return -max(scored)[1] if scored else None


def training_run_rows(entries: list[StoredEntry]) -> list[TrainingRunRow]:
    """The training runs among `entries` (newest first), the most recently active first."""
    ids = list(dict.fromkeys(e.training_run for e in entries if e.training_run))
    rows = []
    for run in ids:
        steps = {s: runs[0] for s, runs in step_runs(entries, run).items()}
        first = min((name for e in steps.values() for name in e.headline), default=None)
        accuracy = [(s, e.headline[first].accuracy if first in e.headline else None) for s, e in steps.items()]
        best = best_step(accuracy)
        best_text = NONE
        if best is not None and first is not None:
            best_text = f"{best} ({first} accuracy {fmt_rate(steps[best].headline[first].accuracy)})"
        latest = str(max(steps)) if steps else NONE
        rows.append(TrainingRunRow(run, training_page(run) or "", len(steps), latest, best_text))
    return rows


def index_view(entries: list[IndexEntry]) -> IndexView:
    """The page of `entries` (newest first, as read_entries returns them)."""
    stored = [StoredEntry.model_validate(e.model_dump()) for e in entries]
    return IndexView(
        title="evalflow runs",
        runs=len(stored),
        trends=trend_charts([e for e in stored if e.status == "complete"]),  # a failed run is not a point
        rows=[row for entry in stored for row in _rows(entry)],
        training_runs=training_run_rows(stored),
    )


def render_index_html(entries: list[IndexEntry], store: Store) -> str:
    """index.html of `store` (at its root), linking the store's plotly.js when there are trend charts."""
    view = index_view(entries)
    plotly = plotly_script(store, store.path(INDEX_HTML)) if view.trends else None
    return render_html("index.html.j2", view=view, plotly=plotly)
