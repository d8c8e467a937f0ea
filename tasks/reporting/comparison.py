"""The comparison with a baseline run as the report's first section.

The document is core.record.Comparison (tasks/analysis/compare.py computes it); the section is its title,
verdict line and per-metric delta table.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.record import Comparison, ComparisonRow, RunSummary
from tasks.reporting.format import NONE, fmt_delta, fmt_num, fmt_rate
from tasks.reporting.parts import Table

DELTA_NOTE = (
    "Δ CI: Newcombe score interval for rates; bootstrap CIs combined in quadrature for mean reward. "
    "A regression is a drop whose 95% CI excludes 0."
)


@dataclass(frozen=True)
class ComparisonView:
    title: str
    summary: str
    regression: bool  # whether the summary reports a regression (shown as a warning)
    baseline_report: str | None  # the baseline's report, relative to the store root, when it has one
    table: Table


def _delta_cells(name: str, row: ComparisonRow) -> list[str]:
    rate = row.kind == "rate"
    fmt = fmt_rate if rate else fmt_num
    verdict = "regression ▼" if row.regression else "improvement ▲" if row.improvement else NONE
    interval = NONE if row.low is None else f"{fmt_delta(row.low, rate)} … {fmt_delta(row.high, rate)}"
    return [name, row.label, fmt(row.baseline), fmt(row.current), fmt_delta(row.delta, rate), interval, verdict]


def comparison_table(comparison: Comparison) -> Table:
    rows = [_delta_cells(name, row) for name, metrics in comparison.benchmarks.items() for row in metrics.values()]
    notes = []
    if comparison.missing.current_only:
        notes.append(f"not in the baseline: {', '.join(comparison.missing.current_only)}")
    if comparison.missing.baseline_only:
        notes.append(f"only in the baseline: {', '.join(comparison.missing.baseline_only)}")
    notes.append(DELTA_NOTE)
    return Table(["benchmark", "metric", "baseline", "current", "Δ", "Δ 95% CI", "verdict"], rows, "; ".join(notes))


def comparison_title(comparison: Comparison) -> str:
    base = comparison.baseline or RunSummary()
    label = base.run_id or "?"
    if base.model:
        label += f" ({base.model})"
    return f"Comparison with baseline {label}"


def comparison_summary(comparison: Comparison) -> str:
    if comparison.regressions:
        return f"{len(comparison.regressions)} regression(s): {', '.join(comparison.regressions)}"
    improvements = comparison.improvements
    return "No regressions" + (f"; improvements: {', '.join(improvements)}" if improvements else "")


def comparison_view(doc: Comparison) -> ComparisonView:
    report = doc.baseline.report if doc.baseline else None
    return ComparisonView(
        title=comparison_title(doc),
        summary=comparison_summary(doc),
        regression=bool(doc.regressions),
        baseline_report=report if report and "://" not in report else None,
        table=comparison_table(doc),
    )
