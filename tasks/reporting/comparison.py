"""The comparison with a baseline run as the report's first section.

The document is core.record.Comparison (tasks/analysis/compare.py computes it); the section is its title,
verdict line, the gate's verdict, the per-metric delta table (each row's method and the smallest change it could
have detected) and, per benchmark, the prompts that flipped, linked into both runs' rollout browsers.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from urllib.parse import urlencode

from core.record import Comparison, ComparisonRow, FlippedPrompt, Pairing, RunSummary
from tasks.analysis.gate import describe
from tasks.reporting.format import NONE, fmt_delta, fmt_num, fmt_rate
from tasks.reporting.parts import Table

DELTA_NOTE = (
    "Δ of accuracy, pass@k and the environment's rates over the prompts both runs asked, paired by prompt where "
    "they share them (paired-clustered: per-prompt differences, SE clustered by prompt; paired-mcnemar-exact: one "
    "sample per prompt, McNemar's exact test decides); clustered-prompts or Newcombe's interval for runs that "
    "share none and for maj@k; bootstrap CIs combined for mean reward. A regression is a drop whose 95% CI "
    "excludes 0. Detectable: the smallest change this pair of runs would flag with 80% power, so a smaller one "
    "reads as 'not measured', not as 'no change'."
)
BROWSER_FILE = "rollouts.html"


@dataclass(frozen=True)
class FlipRow:
    benchmark: str
    direction: str  # "right → wrong" | "wrong → right"
    prompt_id: str
    baseline: str  # pass@1 over the prompt's repeats, formatted
    current: str
    current_href: str  # into this run's rollout browser
    baseline_href: str | None  # into the baseline's, when its report lives in the same store


@dataclass(frozen=True)
class FlipSummary:
    benchmark: str
    line: str  # "3 right → wrong, 1 wrong → right of 200 shared prompts (...)"


@dataclass(frozen=True)
class ComparisonView:
    title: str
    summary: str
    regression: bool  # whether the summary reports a regression (shown as a warning)
    baseline_report: str | None  # the baseline's report, relative to the store root, when it has one
    table: Table
    gate: str | None = None  # the gate's verdict in one line
    gate_failed: bool = False
    flip_summaries: list[FlipSummary] = field(default_factory=list)
    flips: list[FlipRow] = field(default_factory=list)


def _delta_cells(name: str, row: ComparisonRow) -> list[str]:
    rate = row.kind == "rate"
    fmt = fmt_rate if rate else fmt_num
    verdict = "regression ▼" if row.regression else "improvement ▲" if row.improvement else NONE
    interval = NONE if row.low is None else f"{fmt_delta(row.low, rate)} … {fmt_delta(row.high, rate)}"
    detectable = NONE if row.detectable is None else "±" + fmt_delta(row.detectable, rate).lstrip("+")
    return [
        name, row.label, fmt(row.baseline), fmt(row.current), fmt_delta(row.delta, rate), interval, detectable,
        row.method, verdict,
    ]  # fmt: skip


def comparison_table(comparison: Comparison) -> Table:
    rows = [_delta_cells(name, row) for name, metrics in comparison.benchmarks.items() for row in metrics.values()]
    notes = []
    if comparison.missing.current_only:
        notes.append(f"not in the baseline: {', '.join(comparison.missing.current_only)}")
    if comparison.missing.baseline_only:
        notes.append(f"only in the baseline: {', '.join(comparison.missing.baseline_only)}")
    notes.append(DELTA_NOTE)
    header = ["benchmark", "metric", "baseline", "current", "Δ", "Δ 95% CI", "detectable", "method", "verdict"]
    return Table(header, rows, "; ".join(notes))


def _flip_line(p: Pairing) -> str:
    line = f"{p.lost_count} right → wrong, {p.gained_count} wrong → right of {p.shared} shared prompts"
    extra = []
    if p.only_current or p.only_baseline:
        extra.append(f"{p.only_current} only in this run, {p.only_baseline} only in the baseline: not paired")
    if p.changed:
        extra.append(f"{p.changed} with the same id but another prompt: not paired")
    if len(p.lost) < p.lost_count or len(p.gained) < p.gained_count:
        extra.append(f"the {len(p.lost) + len(p.gained)} largest changes listed")
    return line + (f" ({'; '.join(extra)})" if extra else "") + " (by majority of repeats; a tie counts as wrong)"


def browser_link(browser: str, benchmark: str, prompt_id: str) -> str:
    """A link into a rollout browser showing one prompt's rollouts (browser.js reads `b` and `p` from the hash)."""
    return f"{browser}#{urlencode({'b': benchmark, 'p': prompt_id})}"


def _flip_rows(doc: Comparison, baseline_browser: str | None) -> list[FlipRow]:
    out: list[FlipRow] = []
    for name, pairing in doc.pairing.items():
        lists: list[tuple[str, list[FlippedPrompt]]] = [
            ("right → wrong", pairing.lost),
            ("wrong → right", pairing.gained),
        ]
        for direction, flipped in lists:
            for f in flipped:
                out.append(
                    FlipRow(
                        benchmark=name,
                        direction=direction,
                        prompt_id=f.prompt_id,
                        baseline=fmt_rate(f.baseline),
                        current=fmt_rate(f.current),
                        current_href=browser_link(BROWSER_FILE, name, f.prompt_id),
                        baseline_href=browser_link(baseline_browser, name, f.prompt_id) if baseline_browser else None,
                    )
                )
    return out


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
    """The section; links are relative to a report at `runs/<run id>/report.html` in the store."""
    report = doc.baseline.report if doc.baseline else None
    in_store = report if report and "://" not in report and not report.startswith("/") else None
    baseline_browser = posixpath.join("../..", posixpath.dirname(in_store), BROWSER_FILE) if in_store else None
    return ComparisonView(
        title=comparison_title(doc),
        summary=comparison_summary(doc),
        regression=bool(doc.regressions),
        baseline_report=in_store,
        table=comparison_table(doc),
        gate=describe(doc.gate) if doc.gate else None,
        gate_failed=doc.gate is not None and not doc.gate.passed,
        flip_summaries=[FlipSummary(name, _flip_line(p)) for name, p in doc.pairing.items()],
        flips=_flip_rows(doc, baseline_browser),
    )
