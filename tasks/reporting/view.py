"""The run report's view model: everything report.md and report.html show, built once.

It is built from the typed metrics, run_info, the baseline comparison and the rollouts, so both formats
carry the same numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import polars as pl

from core import secrets
from core.metrics_doc import RunMetrics
from core.record import Comparison, RunInfo
from envs.registry import find_env
from tasks.reporting.browser import BrowserView, browser_view
from tasks.reporting.charts import benchmark_charts, headline_charts
from tasks.reporting.comparison import ComparisonView, comparison_view
from tasks.reporting.format import slug
from tasks.reporting.headline import benchmark_metrics_section, headline_table
from tasks.reporting.judge import judge_sections
from tasks.reporting.lm_eval import TITLE as LM_EVAL_TITLE
from tasks.reporting.lm_eval import benchmark_envs, lm_eval_table
from tasks.reporting.parts import Chart, Section, Table
from tasks.reporting.reference import reference_section
from tasks.reporting.tables import benchmark_sections, prompt_table, run_sections

MAX_PROMPT_ROWS = 50  # per-prompt rows per benchmark in the markdown (all are in metrics.json)
MAX_PROMPT_ROWS_HTML = 500  # ... and in the HTML
PROMPTS_TITLE = "Per prompt (worst first)"


@dataclass(frozen=True)
class BenchmarkView:
    name: str
    anchor: str
    sections: list[Section]
    prompts: Section  # worst first, up to MAX_PROMPT_ROWS_HTML (the HTML shows it folded)
    prompts_short: Section  # the same, up to MAX_PROMPT_ROWS (markdown)
    charts: list[Chart]  # HTML only
    browser: BrowserView | None  # HTML only; None when the rollouts were not loaded


@dataclass(frozen=True)
class ReportView:
    title: str
    status: str | None  # why the run is not complete (failed / rollouts missing); None when it is
    comparison: ComparisonView | None
    headline: Table
    benchmark_metrics: Section | None  # each benchmark's own headline metrics, one row per metric
    lm_eval: Section | None  # the scores under lm-eval's metric names, for benchmarks that declare them
    judge: list[Section]  # the judge's answers, calibration and pairwise comparison (runs with a judge)
    headline_charts: list[Chart]
    empty: bool  # no rollouts at all
    run: list[Section]
    config_json: str  # redacted
    benchmarks: list[BenchmarkView]
    note: str | None = None  # what the run left out on purpose (prompts over the context, skipped)

    @property
    def has_charts(self) -> bool:
        return bool(self.headline_charts) or any(b.charts for b in self.benchmarks)


def report_title(run_info: RunInfo) -> str:
    return f"Evaluation report: {run_info.model} ({run_info.run_id})"


def status_banner(run_info: RunInfo) -> str | None:
    """The line at the top of a report whose run did not collect everything it planned."""
    status = run_info.status
    if status.state == "complete":
        return None
    if status.state == "failed":
        return f"FAILED: {status.reason}. These numbers are not a result; this run is never a baseline."
    return f"INCOMPLETE: {status.reason}. Metrics cover the collected rollouts only; never a baseline."


def skipped_note(run_info: RunInfo) -> str | None:
    """The line under the title of a run that skipped prompts over the context (on_long_prompt: skip)."""
    parts = [
        f"{name} {info.skipped} of {info.prompts} prompts (over {info.limit} tokens; the longest {info.longest})"
        for name, info in run_info.long_prompts.items()
        if info.skipped
    ]
    if not parts:
        return None
    return "Skipped, as benchmarks.N.on_long_prompt: skip asks: " + "; ".join(parts) + ". Metrics cover the rest."


def config_json(run_info: RunInfo) -> str:
    return json.dumps(secrets.redact(run_info.config), indent=2, sort_keys=True, default=str)


def lm_eval_section(metrics: RunMetrics, run_info: RunInfo) -> Section | None:
    table = lm_eval_table(metrics, run_info)
    return Section(LM_EVAL_TITLE, table) if table else None


def report_view(
    metrics: RunMetrics,
    run_info: RunInfo,
    comparison: Comparison | None = None,
    rollouts: pl.DataFrame | None = None,
) -> ReportView:
    """The report of one run; `rollouts` (browser rows, see browser.load_rollouts) fills the browsers."""
    benchmarks = []
    envs = {key: record.env_ref or record.env for key, record in benchmark_envs(run_info).items()}
    for name, bm in metrics.benchmarks.items():
        sections = benchmark_sections(bm)
        env = find_env(envs.get(name) or name)
        if env is not None and env.reference_profile is not None:  # the published run, after the summary
            sections.insert(1, reference_section(bm, env.reference_profile))
        benchmarks.append(
            BenchmarkView(
                name=name,
                anchor=slug(name),
                sections=sections,
                prompts=Section(PROMPTS_TITLE, prompt_table(bm, MAX_PROMPT_ROWS_HTML)),
                prompts_short=Section(PROMPTS_TITLE, prompt_table(bm, MAX_PROMPT_ROWS)),
                charts=benchmark_charts(name, bm),
                browser=None if rollouts is None else browser_view(name, bm, rollouts),
            )
        )
    return ReportView(
        title=report_title(run_info),
        status=status_banner(run_info),
        comparison=comparison_view(comparison) if comparison else None,
        headline=headline_table(metrics),
        benchmark_metrics=benchmark_metrics_section(metrics),
        lm_eval=lm_eval_section(metrics, run_info),
        judge=judge_sections(run_info.judge),
        headline_charts=headline_charts(metrics),
        empty=not metrics.benchmarks,
        run=run_sections(run_info),
        config_json=config_json(run_info),
        benchmarks=benchmarks,
        note=skipped_note(run_info),
    )
