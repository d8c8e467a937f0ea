"""A training run's curve: every evaluated checkpoint of one training run on one page, step by step.

Each checkpoint is its own evalflow run whose record names its training run and step (`run_info.training_run`,
`run_info.step`). A step's report says how good that checkpoint is; whether training helps shows only across
steps, so this page gathers them from the run index: per step the newest complete run (index_page.step_runs,
which the index's own training-run table counts with too). It writes `<store>/training/<id>/index.html`,
`curve.md` and `curve.json`: per benchmark the headline metric with its clustered CI band, pass@k, mean reward
with its bootstrap band and mean completion tokens against step; the best step; and the changes between
consecutive steps whose 95% CI excludes 0, judged as a run against its baseline (tasks.analysis.compare: paired by
prompt, since the steps of a training run ask the same prompts).
Links are relative, so the page works from a folder, from `evalflow reports serve` and from S3 alike.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any

import plotly.graph_objects as go

from core.judge_record import Pairwise
from core.metrics_doc import BenchmarkMetrics, Interval
from core.record import ComparisonRow, IndexEntry
from core.store import Store, StoreError
from tasks.analysis.compare import compare_benchmark, load_run_record
from tasks.analysis.stats import CI_LEVEL
from tasks.reporting.assets import plotly_script
from tasks.reporting.charts import bounds, chart, rate_axis
from tasks.reporting.format import NONE, browser_url, fmt_ci, fmt_delta, fmt_num, fmt_rate, relative_link, slug
from tasks.reporting.index import read_entries
from tasks.reporting.index_page import TRAINING_DIR, best_step, step_runs, training_page
from tasks.reporting.judge import pairwise_figure
from tasks.reporting.parts import Chart, Table
from tasks.reporting.render import render_html, render_markdown

logger = logging.getLogger(__name__)

CURVE_FILES = {"html": "index.html", "markdown": "curve.md", "json": "curve.json"}
# what a point keeps of each benchmark's metrics in curve.json, keyed as in metrics.json
POINT_FIELDS = {
    "n_prompts", "n_rollouts", "accuracy", "pass_at_k", "maj_at_k", "mean_reward", "ci", "tokens", "reasoning",
}  # fmt: skip
CHANGES_NOTE = (
    "Consecutive steps compared as a run with its baseline: accuracy and pass@k paired by prompt over the prompts "
    "both steps asked (per-prompt differences, SE clustered by prompt), Newcombe for maj@k and the rates, bootstrap "
    "CIs in quadrature for mean reward; listed when the Δ 95% CI excludes 0."
)
_MAIN = {"color": "#636efa", "width": 3}  # the colorway's first colour; its band the same, translucent
_BAND = "rgba(99, 110, 250, 0.18)"
_PASS_COLORS = ["#EF553B", "#00cc96", "#ab63fa", "#FFA15A", "#19d3f3", "#FF6692"]


@dataclass(frozen=True)
class CurvePoint:
    """One evaluated checkpoint: its step, the run that evaluated it, and that run's metrics per benchmark."""

    step: int
    run_id: str
    finished_at: str | None
    report: str | None  # the step's report.html, relative to the store root (as its index entry names it)
    benchmarks: dict[str, BenchmarkMetrics]
    pairwise: dict[str, Pairwise] = field(default_factory=dict)  # the judge's verdicts against its baseline


@dataclass(frozen=True)
class StepChange:
    """A significant change of one metric from one step to the next."""

    benchmark: str
    from_step: int
    to_step: int
    metric: str  # compare_benchmark's key: accuracy, pass@1, pass@n, maj@n, mean_reward, an env rate's key
    row: ComparisonRow


@dataclass(frozen=True)
class StepRow:
    cells: list[str]
    href: str  # the step's report, relative to the curve page ("" when it has none)
    best: bool


@dataclass(frozen=True)
class BenchmarkCurve:
    name: str
    best: str  # "step 200: 61.25%", or a sentence saying no step has the metric
    header: list[str]
    rows: list[StepRow]
    charts: list[Chart]


@dataclass(frozen=True)
class CurveView:
    title: str
    training_run: str
    summary: str
    metric: str
    benchmarks: list[BenchmarkCurve]
    changes: Table
    index: bool  # whether the store has a run index to link back to (it has once any run is indexed)

    @property
    def charts(self) -> list[Chart]:
        return [c for b in self.benchmarks for c in b.charts]


# ---------------------------------------------------------------------------------------------
# The points


def _points(store: Store, entries: list[IndexEntry], training_run: str) -> list[CurvePoint]:
    points = []
    for step, runs in step_runs(entries, training_run).items():
        for entry in runs:  # newest first; an unreadable record gives way to the step's previous evaluation
            try:
                record = load_run_record(store, entry)
            except (StoreError, OSError, ValueError) as exc:
                logger.warning(
                    "training run %s, step %d: leaving out run %s (%s)", training_run, step, entry.run_id, exc
                )
                continue
            pairs = {p.benchmark: p for p in record.run_info.judge.pairwise} if record.run_info.judge else {}
            points.append(
                CurvePoint(step, entry.run_id, entry.finished_at, entry.report, dict(record.benchmarks), pairs)
            )
            break
    return points


def curve_points(store: Store, training_run: str) -> list[CurvePoint]:
    """The training run's complete runs from the run index, one per step (a step evaluated several times:
    the newest), by step, each with its record's metrics."""
    return _points(store, read_entries(store), training_run)


def metric_value(bm: BenchmarkMetrics, metric: str) -> float | None:
    """A benchmark's `metric`: accuracy, mean_reward, pass@<k>, maj@<k>, or an environment metric's key."""
    if metric == "accuracy":
        return bm.accuracy
    if metric == "mean_reward":
        return bm.mean_reward
    kind, _, k = metric.partition("@")
    if kind in ("pass", "maj") and k:
        return (bm.pass_at_k if kind == "pass" else bm.maj_at_k).get(k)
    env = bm.env_metric(metric)
    return env.value if env else None


def best_steps(points: list[CurvePoint], metric: str) -> dict[str, int]:
    """Per benchmark, the step with the highest `metric` (the earliest on ties); benchmarks where no step
    has a value are left out."""
    best = {}
    for name in benchmarks_of(points):
        step = best_step((p.step, metric_value(p.benchmarks[name], metric)) for p in points if name in p.benchmarks)
        if step is not None:
            best[name] = step
    return best


def significant_changes(points: list[CurvePoint]) -> list[StepChange]:
    """Every metric that changed significantly between consecutive steps (compare's regression/improvement)."""
    changes = []
    for before, after in itertools.pairwise(points):
        for name in sorted(set(before.benchmarks) & set(after.benchmarks)):
            rows = compare_benchmark(after.benchmarks[name], before.benchmarks[name])
            changes += [
                StepChange(name, before.step, after.step, key, row)
                for key, row in rows.items()
                if row.regression or row.improvement
            ]
    return changes


def benchmarks_of(points: list[CurvePoint]) -> list[str]:
    return sorted({name for p in points for name in p.benchmarks})


def _ks(points: list[CurvePoint], name: str) -> list[str]:
    return sorted({k for p in points if name in p.benchmarks for k in p.benchmarks[name].pass_at_k}, key=int)


# ---------------------------------------------------------------------------------------------
# Charts


def _series(
    fig: go.Figure, steps: list[int], values: list[float | None], name: str, hover: str, line: dict[str, Any]
) -> None:
    fig.add_trace(go.Scatter(x=steps, y=values, mode="lines+markers", name=name, line=line,
                             hovertemplate=f"step %{{x}}<br>{hover}"))  # fmt: skip


def _band(fig: go.Figure, steps: list[int], intervals: list[Interval | None], name: str) -> None:
    """A CI as a shaded band: its lower bound (invisible), then its upper bound filled down to it."""
    lows = [i.low if i else None for i in intervals]
    highs = [i.high if i else None for i in intervals]
    line = {"width": 0}
    fig.add_trace(go.Scatter(x=steps, y=lows, mode="lines", line=line, showlegend=False, hoverinfo="skip"))
    fig.add_trace(
        go.Scatter(x=steps, y=highs, mode="lines", line=line, fill="tonexty", fillcolor=_BAND, name=name,
                   hoverinfo="skip")
    )  # fmt: skip


def _mark_best(fig: go.Figure, best: int | None, metric: str) -> None:
    if best is not None:
        fig.add_vline(x=best, line={"dash": "dash", "color": "#1a7f37", "width": 1},
                      annotation={"text": f"best {metric}: step {best}", "font": {"color": "#1a7f37"}})  # fmt: skip


def curve_charts(points: list[CurvePoint], name: str, index: int, best: int | None, metric: str) -> list[Chart]:
    """A benchmark's rates (accuracy with its clustered CI band, pass@k), mean reward (bootstrap band) and
    mean completion tokens against step, the best step marked on each."""
    mine = [(p.step, p.benchmarks[name]) for p in points if name in p.benchmarks]
    steps = [s for s, _ in mine]
    rates = go.Figure()
    _band(rates, steps, [bm.ci.accuracy for _, bm in mine], "accuracy 95% CI (clustered)")
    for k, color in zip(_ks(points, name), itertools.cycle(_PASS_COLORS), strict=False):
        hover = f"pass@{k} %{{y:.2%}}<extra></extra>"
        _series(
            rates, steps, [bm.pass_at_k.get(k) for _, bm in mine], f"pass@{k}", hover, {"color": color, "dash": "dot"}
        )
    # drawn last, on top: pass@1 equals it when no rollout errored
    _series(rates, steps, [bm.accuracy for _, bm in mine], "accuracy", "accuracy %{y:.2%}<extra></extra>", _MAIN)
    drawn = [bm.accuracy for _, bm in mine] + [bm.pass_at_k.get(k) for k in _ks(points, name) for _, bm in mine]
    rates.update_layout(yaxis=rate_axis("rate", drawn, [bounds(bm.ci.accuracy) for _, bm in mine]))  # to the data
    reward = go.Figure()
    _band(reward, steps, [bm.ci.mean_reward for _, bm in mine], "95% CI (bootstrap over prompts)")
    _series(
        reward, steps, [bm.mean_reward for _, bm in mine], "mean reward", "mean reward %{y:.3f}<extra></extra>", _MAIN
    )
    reward.update_layout(yaxis_title="mean reward")
    tokens = go.Figure()
    means = [bm.tokens.completion_mean for _, bm in mine]
    _series(tokens, steps, means, "completion tokens", "%{y:.1f} tokens per rollout<extra></extra>", _MAIN)
    thinks = any(bm.reasoning is not None for _, bm in mine)
    if thinks:  # RL makes the thinking longer: reasoning and answer tokens apart
        for key, label, color in (
            ("reasoning_tokens_mean", "reasoning", "#ab63fa"),
            ("answer_tokens_mean", "answer", "#00cc96"),
        ):
            values = [getattr(bm.reasoning, key) if bm.reasoning else None for _, bm in mine]
            hover, style = f"%{{y:.1f}} {label} tokens<extra></extra>", {"color": color, "dash": "dot"}
            _series(tokens, steps, values, f"{label} tokens", hover, style)
    tokens.update_layout(yaxis={"title": "tokens per rollout", "rangemode": "tozero"}, showlegend=thinks)
    figures = [(rates, "rates", "accuracy (95% CI) and pass@k"), (reward, "reward", "mean reward (95% CI)"),
               (tokens, "tokens", "mean completion tokens" + (", reasoning and answer" if thinks else ""))]  # fmt: skip
    if (judged := pairwise_figure(steps, [p.pairwise.get(name) for p in points if name in p.benchmarks])) is not None:
        figures.append((judged, "pairwise", "the judge's win rate against the baseline (95% CI)"))
    if thinks:
        cut = go.Figure()
        cut_cis = [bm.reasoning.ended_in_reasoning_ci if bm.reasoning else None for _, bm in mine]
        _band(cut, steps, cut_cis, "95% CI (Wilson)")
        rates_cut = [bm.reasoning.ended_in_reasoning_rate if bm.reasoning else None for _, bm in mine]
        hover = "%{y:.2%} truncated while reasoning<extra></extra>"
        _series(cut, steps, rates_cut, "truncated while reasoning", hover, _MAIN)
        cut.update_layout(yaxis={"title": "share of rollouts", "tickformat": ".0%", "rangemode": "tozero"})
        figures.append((cut, "truncated", "truncated while reasoning (95% CI)"))
    out = []
    for fig, suffix, title in figures:
        fig.update_layout(
            xaxis={"title": "step", "type": "linear"}, legend={"orientation": "h", "y": -0.25, "traceorder": "normal"}
        )
        _mark_best(fig, best, metric)
        out.append(chart(fig, f"curve-{index}-{slug(name)}-{suffix}", f"{name}: {title} by step"))
    return out


# ---------------------------------------------------------------------------------------------
# The page


def curve_page(training_run: str) -> str:
    """The curve page's path in the store (training/<id>/index.html); a refused id raises ValueError."""
    page = training_page(training_run)
    if page is None:
        raise ValueError(f"training run id {training_run!r} cannot name a folder (letters, digits, '.', '_', '-')")
    return page


def report_href(report: str | None, page: str) -> str:
    """A link from the page at store path `page` to a step's report: relative inside the store, a browser URL
    for a report elsewhere, "" for none."""
    if not report:
        return ""
    if "://" in report or os.path.isabs(report):
        return browser_url(report)
    return relative_link(page, report)


def _format_metric(bm: BenchmarkMetrics, metric: str) -> str:
    env = bm.env_metric(metric)
    rate = metric == "accuracy" or "@" in metric or (env is not None and env.kind in ("rate", "items"))
    return (fmt_rate if rate else fmt_num)(metric_value(bm, metric))


def step_rows(points: list[CurvePoint], name: str, best: int | None, page: str) -> tuple[list[str], list[StepRow]]:
    """The steps x metrics table of one benchmark: header and rows."""
    ks = _ks(points, name)
    thinks = any(name in p.benchmarks and p.benchmarks[name].reasoning is not None for p in points)
    header = ["step", "run", "accuracy", "95% CI (clustered)", *(f"pass@{k}" for k in ks), "mean reward", "95% CI",
              "completion tokens (mean)"]  # fmt: skip
    if thinks:
        header += ["reasoning tokens (mean)", "truncated while reasoning"]
    rows = []
    for p in points:
        bm = p.benchmarks.get(name)
        if bm is None:
            continue
        cells = [str(p.step), p.run_id, fmt_rate(bm.accuracy), fmt_ci(bm.ci.accuracy.low, bm.ci.accuracy.high),
                 *(fmt_rate(bm.pass_at_k.get(k)) for k in ks), fmt_num(bm.mean_reward),
                 fmt_ci(bm.ci.mean_reward.low, bm.ci.mean_reward.high, rate=False),
                 fmt_num(bm.tokens.completion_mean, 1)]  # fmt: skip
        if thinks:
            r = bm.reasoning
            cells += [
                fmt_num(r.reasoning_tokens_mean if r else None, 1),
                fmt_rate(r.ended_in_reasoning_rate if r else None),
            ]
        rows.append(StepRow(cells, report_href(p.report, page), p.step == best))
    return header, rows


def changes_table(changes: list[StepChange]) -> Table:
    rows = []
    for c in changes:
        row, rate = c.row, c.row.kind == "rate"
        fmt = fmt_rate if rate else fmt_num
        interval = NONE if row.low is None else f"{fmt_delta(row.low, rate)} … {fmt_delta(row.high, rate)}"
        verdict = "regression ▼" if row.regression else "improvement ▲"
        steps = f"{c.from_step} → {c.to_step}"
        detectable = NONE if row.detectable is None else "±" + fmt_delta(row.detectable, rate).lstrip("+")
        rows.append([c.benchmark, steps, row.label, fmt(row.baseline), fmt(row.current),
                     fmt_delta(row.delta, rate), interval, detectable, row.method, verdict])  # fmt: skip
    header = ["benchmark", "steps", "metric", "before", "after", "Δ", "Δ 95% CI", "detectable", "method", "verdict"]
    return Table(header, rows, CHANGES_NOTE)


def _summary(points: list[CurvePoint], entries: list[IndexEntry], training_run: str) -> str:
    runs = [e for e in entries if e.training_run == training_run]
    if not points:
        return (f"No step of this training run has a complete evaluation yet ({len(runs)} run(s) of it in the "
                "index). Each checkpoint's run adds its step here when it completes.")  # fmt: skip
    incomplete = sum(1 for e in runs if e.status != "complete")
    superseded = len(runs) - len(points) - incomplete  # older evaluations of a step, and unreadable records
    text = f"{len(points)} step(s) evaluated, {points[0].step} to {points[-1].step}; latest step {points[-1].step}"
    text += f" (run {points[-1].run_id}, finished {(points[-1].finished_at or NONE)[:19].replace('T', ' ')})."
    left_out = [f"{n} {what}" for n, what in ((incomplete, "not complete"), (superseded, "superseded or unreadable"))
                if n]  # fmt: skip
    return text + (f" Left out: {', '.join(left_out)} run(s)." if left_out else "")


def curve_view(
    points: list[CurvePoint],
    training_run: str,
    metric: str = "accuracy",
    entries: list[IndexEntry] | None = None,
    changes: list[StepChange] | None = None,
) -> CurveView:
    """The page of `points` (by step); `entries` (the run index) only count the runs left out; the significant
    changes are computed from `points` unless given."""
    page = curve_page(training_run)
    best = best_steps(points, metric)
    benchmarks = []
    for i, name in enumerate(benchmarks_of(points)):
        step = best.get(name)
        if step is None:
            best_text = f"no step has {metric}"
        else:
            bm = next(p.benchmarks[name] for p in points if p.step == step)
            best_text = f"step {step}: {_format_metric(bm, metric)}"
        header, rows = step_rows(points, name, step, page)
        benchmarks.append(BenchmarkCurve(name, best_text, header, rows, curve_charts(points, name, i, step, metric)))
    return CurveView(
        title=f"Training run {training_run}",
        training_run=training_run,
        summary=_summary(points, entries or [], training_run),
        metric=metric,
        benchmarks=benchmarks,
        changes=changes_table(significant_changes(points) if changes is None else changes),
        index=bool(entries),
    )


def _best_doc(points: list[CurvePoint], name: str, step: int, metric: str) -> dict[str, Any]:
    point = next(p for p in points if p.step == step)
    return {"step": step, "run_id": point.run_id, "value": metric_value(point.benchmarks[name], metric)}


def curve_document(
    points: list[CurvePoint], training_run: str, metric: str, changes: list[StepChange] | None = None
) -> dict[str, Any]:
    """curve.json: per point its step, run and the metrics' values as metrics.json holds them; the best step
    per benchmark; the significant changes (computed from `points` unless given)."""
    best = best_steps(points, metric)
    return {
        "training_run": training_run,
        "metric": metric,
        "level": CI_LEVEL,
        "points": [
            {
                "step": p.step,
                "run_id": p.run_id,
                "finished_at": p.finished_at,
                "report": p.report,
                "benchmarks": {n: bm.model_dump(mode="json", include=POINT_FIELDS) for n, bm in p.benchmarks.items()},
            }
            for p in points
        ],
        "best": {name: _best_doc(points, name, step, metric) for name, step in best.items()},
        "changes": [
            {
                "benchmark": c.benchmark,
                "from_step": c.from_step,
                "to_step": c.to_step,
                "metric": c.metric,
                **c.row.model_dump(mode="json"),
            }
            for c in (significant_changes(points) if changes is None else changes)
        ],
    }


def write_curve_report(store: Store, training_run: str, metric: str = "accuracy") -> dict[str, str]:
    """Write the training run's curve page, curve.md and curve.json under `<store>/training/<id>/` (each
    atomically, through the store) and return their URLs. A training run with no complete step gets a page
    saying so."""
    curve_page(training_run)  # refuse an id that cannot name a folder before reading anything
    entries = read_entries(store)
    points = _points(store, entries, training_run)
    changes = significant_changes(points)
    view = curve_view(points, training_run, metric, entries, changes)
    urls = {kind: store.path(TRAINING_DIR, training_run, name) for kind, name in CURVE_FILES.items()}
    document = curve_document(points, training_run, metric, changes)
    store.write_text(urls["json"], json.dumps(document, indent=2, allow_nan=False) + "\n")
    store.write_text(urls["markdown"], render_markdown("training_curve.md.j2", view=view))
    plotly = plotly_script(store, urls["html"]) if view.charts else None
    store.write_text(urls["html"], render_html("training_curve.html.j2", view=view, plotly=plotly))
    return urls
