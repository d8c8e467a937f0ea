"""The headline: one row of key metrics per benchmark, for the report, run index, artifacts and terminal.

A row holds accuracy with its 95% CI clustered by prompt and lm-eval's standard error, pass@k, maj@k
(only when some benchmark's environment declares majority votes meaningful), mean reward with its CI,
and the environment metrics declared `headline=True`.

Every reporting entry point takes the metrics as `core.metrics_doc.RunMetrics`; `as_run_metrics` is the one
place where a metrics dict (metrics.json, an older analysis) becomes one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from core import metrics_doc
from core.metrics_doc import BenchmarkMetrics, EnvMetric, Interval, RunMetrics
from tasks.reporting.format import fmt_ci, fmt_num, fmt_rate
from tasks.reporting.parts import Section, Table

Metrics = metrics_doc.RunMetrics | Mapping[str, Any]

# (row key, column label, formatter); environment headline metrics go after ENV_COLUMNS_AFTER.
_COLUMNS: list[tuple[str, str, Callable[[Any], str]]] = [
    ("benchmark", "benchmark", str),
    ("prompts", "prompts", fmt_num),
    ("rollouts", "rollouts", fmt_num),
    ("n", "n", fmt_num),
    ("accuracy", "accuracy", fmt_rate),
    ("accuracy_ci", "accuracy 95% CI", lambda ci: fmt_ci(*ci)),  # clustered by prompt: CI_NOTE
    ("stderr", "stderr", lambda se: fmt_num(se, 4)),
    ("pass@1", "pass@1", fmt_rate),
    ("pass@n", "pass@n", fmt_rate),
    ("maj@n", "maj@n", fmt_rate),
    ("mean_reward", "mean reward", fmt_num),
    ("mean_reward_ci", "mean reward 95% CI", lambda ci: fmt_ci(*ci, rate=False)),
    ("parse_error_rate", "parse errors", fmt_rate),
    ("error_rate", "errors", fmt_rate),
]
ENV_COLUMNS_AFTER = "maj@n"
CI_NOTE = "Confidence intervals are clustered by prompt: the repeats of one prompt are not independent draws."
_CORE_KEYS = {key for key, _, _ in _COLUMNS}


def as_run_metrics(metrics: Metrics) -> RunMetrics:
    """The metrics as `core.metrics_doc.RunMetrics`, whatever form they came in."""
    if isinstance(metrics, RunMetrics):
        return metrics
    return RunMetrics.model_validate(metrics.model_dump() if isinstance(metrics, BaseModel) else dict(metrics))


def has_majority_votes(metrics: RunMetrics) -> bool:
    """Whether any benchmark has maj@k (its environment declares majority votes meaningful)."""
    return any(bm.maj_at_k for bm in metrics.benchmarks.values())


def bounds(interval: Interval | None) -> tuple[float | None, float | None]:
    return (None, None) if interval is None else (interval.low, interval.high)


def uses_tools(bm: BenchmarkMetrics) -> bool:
    """Whether any rollout of the benchmark made a tool call (tool sections are hidden otherwise)."""
    return bool(bm.tool_calls.max)


def format_env_value(metric: EnvMetric) -> str:
    return fmt_rate(metric.value) if metric.kind in ("rate", "items") else fmt_num(metric.value)


def _is_headline(metric: EnvMetric) -> bool:
    # a key that names a core column would overwrite it: such a metric stays in the env metrics table
    return metric.headline and metric.kind != "counts" and metric.key not in _CORE_KEYS


def headline_env_metrics(metrics: RunMetrics) -> list[EnvMetric]:
    """One declaration per headline environment metric key, in order of first appearance."""
    seen: dict[str, EnvMetric] = {}
    for bm in metrics.benchmarks.values():
        for metric in filter(_is_headline, bm.env_metrics):
            seen.setdefault(metric.key, metric)
    return list(seen.values())


def _columns(metrics: RunMetrics) -> list[tuple[str, str, Callable[[Any], str]]]:
    """The headline columns; an environment metric's column appears only when some benchmark declares it."""
    extra = [
        (m.key, m.label, fmt_rate if m.kind in ("rate", "items") else fmt_num) for m in headline_env_metrics(metrics)
    ]
    at = next(i for i, (key, _, _) in enumerate(_COLUMNS) if key == ENV_COLUMNS_AFTER) + 1
    columns = [*_COLUMNS[:at], *extra, *_COLUMNS[at:]]
    return columns if has_majority_votes(metrics) else [c for c in columns if c[0] != "maj@n"]


HeadlineValue = str | int | float | tuple[float | None, float | None] | None
"""A headline cell's raw value: the benchmark's name, a count, a rate or number, or a CI's (low, high)."""
HeadlineRow = dict[str, HeadlineValue]  # keyed like the columns; environment metrics by their own key
HeadlineRecord = dict[str, str | int | float | None]  # a row with each CI split into _ci_low/_ci_high


def headline_rows(metrics: Metrics) -> list[HeadlineRow]:
    """One row of raw headline values per benchmark (n = the most repeats any prompt has), keyed like
    the columns; environment metrics by their key."""
    run = as_run_metrics(metrics)
    keys = [key for key, _, _ in _columns(run)]
    rows = []
    for name, bm in run.benchmarks.items():
        n = bm.repeats["max"]
        values: HeadlineRow = {
            "benchmark": name,
            "prompts": bm.n_prompts,
            "rollouts": bm.n_rollouts,
            "n": n,
            "accuracy": bm.accuracy,
            "accuracy_ci": bounds(bm.ci.accuracy),
            "stderr": bm.accuracy_stderr,
            "pass@1": bm.pass_at_k.get("1"),
            "pass@n": bm.pass_at_k.get(str(n)),
            "maj@n": bm.maj_at_k.get(str(n)),
            "mean_reward": bm.mean_reward,
            "mean_reward_ci": bounds(bm.ci.mean_reward),
            "parse_error_rate": bm.parse_error_rate,
            "error_rate": bm.error_rate,
        }
        for metric in filter(_is_headline, bm.env_metrics):
            values[metric.key] = metric.value
        rows.append({key: values.get(key) for key in keys})
    return rows


def headline_table(metrics: Metrics) -> Table:
    """The columns every benchmark has, one row per benchmark; the environments' own headline metrics are
    `benchmark_metrics_section`'s rows, so the table keeps its width however many environments a run has (their
    union as columns made 18-22 columns, 1,700-2,400 px wide)."""
    run = as_run_metrics(metrics)
    columns = [c for c in _columns(run) if c[0] in _CORE_KEYS]
    rows = [[f(r[k]) for k, _, f in columns] for r in headline_rows(run)]
    return Table([label for _, label, _ in columns], rows, note=CI_NOTE if rows else "")


BENCHMARK_METRICS_TITLE = "Benchmark metrics"


def benchmark_metrics_section(metrics: Metrics) -> Section | None:
    """Each benchmark's own headline metrics (its environment's declarations), one row per metric; None
    when no benchmark declares any."""
    run = as_run_metrics(metrics)
    rows = [
        [name, metric.label, format_env_value(metric)]
        for name, bm in run.benchmarks.items()
        for metric in filter(_is_headline, bm.env_metrics)
    ]
    return Section(BENCHMARK_METRICS_TITLE, Table(["benchmark", "metric", "value"], rows)) if rows else None


def headline_records(metrics: Metrics) -> list[HeadlineRecord]:
    """Headline rows as flat JSON-able records (CIs split into low/high), for the table artifact."""
    out = []
    for row in headline_rows(metrics):
        record: HeadlineRecord = {}
        for key, value in row.items():
            if isinstance(value, tuple):  # a CI column, `<base>_ci`
                base = key[: -len("_ci")]
                record[f"{base}_ci_low"], record[f"{base}_ci_high"] = (
                    None if v is None else round(v, 6) for v in value
                )
            else:
                record[key] = round(value, 6) if isinstance(value, float) else value
        out.append(record)
    return out


class StoredHeadline(BaseModel):
    """One benchmark's headline row as the run index stores it (index_entry), read back for the index
    and sweep pages; rows of older runs may lack any value."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    prompts: int | None = None
    n: int | None = None
    accuracy: float | None = None
    accuracy_ci: tuple[float | None, float | None] = (None, None)
    stderr: float | None = None
    pass_at_1: float | None = Field(default=None, alias="pass@1")
    pass_at_n: float | None = Field(default=None, alias="pass@n")
    maj_at_n: float | None = Field(default=None, alias="maj@n")
    mean_reward: float | None = None
    mean_reward_ci: tuple[float | None, float | None] = (None, None)

    @field_validator("accuracy_ci", "mean_reward_ci", mode="before")
    @classmethod
    def _no_interval(cls, value: Any) -> Any:
        return value or (None, None)
