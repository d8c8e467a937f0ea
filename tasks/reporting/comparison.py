"""The comparison with a baseline run as a typed document and as the report's first section.

The document is tasks/analysis/compare.py's; the section is its title, verdict line and per-metric delta table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tasks.reporting.format import NONE, fmt_delta, fmt_num, fmt_rate
from tasks.reporting.parts import Table

DELTA_NOTE = (
    "Δ CI: Newcombe score interval for rates; bootstrap CIs combined in quadrature for mean reward. "
    "A regression is a drop whose 95% CI excludes 0."
)


class _Doc(BaseModel):
    model_config = ConfigDict(extra="ignore")


class DeltaRow(_Doc):
    label: str
    kind: Literal["rate", "mean"]
    current: float
    baseline: float
    delta: float
    low: float | None = None
    high: float | None = None
    regression: bool = False
    improvement: bool = False


class RunSummary(_Doc):
    run_id: str | None = None
    model: str | None = None
    report: str | None = None


class Missing(_Doc):
    current_only: list[str] = Field(default_factory=list)
    baseline_only: list[str] = Field(default_factory=list)


class Comparison(_Doc):
    baseline: RunSummary | None = None
    benchmarks: dict[str, dict[str, DeltaRow]] = Field(default_factory=dict)
    regressions: list[str] = Field(default_factory=list)
    improvements: list[str] = Field(default_factory=list)
    missing: Missing = Field(default_factory=Missing)


@dataclass(frozen=True)
class ComparisonView:
    title: str
    summary: str
    regression: bool  # whether the summary reports a regression (shown as a warning)
    baseline_report: str | None  # the baseline's report, relative to the store root, when it has one
    table: Table


def as_comparison(comparison: Comparison | Mapping[str, Any]) -> Comparison:
    return comparison if isinstance(comparison, Comparison) else Comparison.model_validate(dict(comparison))


def _delta_cells(name: str, row: DeltaRow) -> list[str]:
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


def comparison_view(comparison: Comparison | Mapping[str, Any]) -> ComparisonView:
    doc = as_comparison(comparison)
    report = doc.baseline.report if doc.baseline else None
    return ComparisonView(
        title=comparison_title(doc),
        summary=comparison_summary(doc),
        regression=bool(doc.regressions),
        baseline_report=report if report and "://" not in report else None,
        table=comparison_table(doc),
    )
