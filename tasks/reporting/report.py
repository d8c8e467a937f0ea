"""Run reports: metrics.json, report.md and a self-contained report.html, plus Prefect artifacts.

Everything shown comes from the metrics dict (tasks/analysis/metrics.py), an optional baseline comparison
(tasks/analysis/compare.py) and the rollout files, so a report can be rebuilt from a run's store at any time.
metrics.json holds the metrics dict plus ``run_info`` (config redacted) and, when there was a
baseline, ``comparison``; the comparison is also shown first in report.md and report.html.
Reports go through core.store, so they are written atomically to a local folder or an object store
alike. The HTML inlines plotly.js once and needs no network to open (file:// works); all model text
is escaped, because completions can contain anything.

Size: charts are drawn from the histograms in the metrics (never from per-rollout arrays), and the
rollout browser holds at most ``MAX_ROLLOUT_ROWS`` rollouts per benchmark (the first by prompt id and
repeat), each transcript clipped to ``MAX_TRANSCRIPT_CHARS`` and all of them to
``MAX_BROWSER_BYTES`` per benchmark; a note on the page says when rows were left out (the parquet
files hold every rollout). So a 1,000,000-rollout run still gives a page of a few tens of MB at most.
"""

from __future__ import annotations

import contextlib
import functools
import html
import itertools
import json
import logging
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import polars as pl
from plotly.offline import get_plotlyjs
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from core import store
from tasks.analysis.metrics import load_rollouts_frame

logger = logging.getLogger(__name__)

REPORT_FILES = {"metrics": "metrics.json", "markdown": "report.md", "html": "report.html"}
DEFAULT_ARTIFACT_KEY = "eval-report"
COMPARISON_ARTIFACT_KEY = "eval-comparison"
MAX_PROMPT_ROWS = 50  # per-prompt rows per benchmark in the markdown (all are in metrics.json)
MAX_PROMPT_ROWS_HTML = 500  # ... and in the HTML
MAX_PROMPT_BARS = 100  # more prompts than this: a histogram of per-prompt success rates instead of bars
MAX_PROMPT_IDS = 50  # never/always-succeeding prompt ids listed in the report (all are in metrics.json)
MAX_ROLLOUT_ROWS = 2000  # rollouts per benchmark in the HTML browser (all are in the parquet files)
MAX_TRANSCRIPT_CHARS = 20_000  # per rollout in the browser
MAX_BROWSER_BYTES = 8_000_000  # transcript data per benchmark in the browser
REWARD_VALUE_BARS = 60  # up to this many distinct reward values: one bar per value, else the histogram

_ROLLOUT_COLUMNS = [
    "benchmark",
    "prompt_id",
    "repeat",
    "reward",
    "success",
    "error",
    "parsed_answer",
    "reference",
    "finish_reason",
    "completion",
    "messages",
    "transcript",
    "info",
    "prompt_tokens",
    "completion_tokens",
    "latency_s",
    "tool_calls",
]

# Config keys whose values must never reach a report (store credentials, API keys).
# `key`/`token` alone are s3fs's names for the access key id and session token.
_SECRET_KEY = re.compile(
    r"^(key|token)$|secret|passw|credential|api_?key|access_?key|session_?token|auth|bearer|private", re.I
)


# ---------------------------------------------------------------------------------------------
# Formatting


def fmt_rate(value: float | None) -> str:
    return "–" if value is None else f"{value:.2%}"


def fmt_num(value: float | int | None, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.{digits}f}"


def fmt_ci(low: float | None, high: float | None, rate: bool = True) -> str:
    if low is None or high is None:
        return "–"
    if rate:
        return f"{low * 100:.1f}–{high * 100:.1f}%"
    return f"{low:.3f} – {high:.3f}"


def fmt_delta(value: float | None, rate: bool) -> str:
    if value is None:
        return "–"
    return f"{value * 100:+.2f} pp" if rate else f"{value:+.3f}"


@dataclass
class Table:
    """A renderer-agnostic table: both the markdown and the HTML report draw from these."""

    header: list[str]
    rows: list[list[str]]
    note: str = ""


def _kv_table(pairs: Iterable[tuple[str, str]]) -> Table:
    return Table(["", "value"], [[k, v] for k, v in pairs])


def redact(value: Any) -> Any:
    """Copy of a config with secret-looking keys masked, so reports can be shared safely."""
    if isinstance(value, dict):
        return {k: "***" if _SECRET_KEY.search(str(k)) and v else redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def _ci(bm: dict[str, Any], *path: str) -> tuple[float | None, float | None]:
    node: Any = bm.get("ci", {})
    for part in path:
        node = node.get(part, {}) if isinstance(node, dict) else {}
    return (node.get("low"), node.get("high")) if isinstance(node, dict) else (None, None)


def uses_tools(bm: dict[str, Any]) -> bool:
    """Whether any rollout of the benchmark made a tool call (tool sections are hidden otherwise)."""
    return bool(bm.get("tool_calls", {}).get("max"))


# ---------------------------------------------------------------------------------------------
# Headline


# (key, column label, formatter)
_HEADLINE_COLUMNS: list[tuple[str, str, Callable[[Any], str]]] = [
    ("benchmark", "benchmark", str),
    ("prompts", "prompts", fmt_num),
    ("rollouts", "rollouts", fmt_num),
    ("n", "n", fmt_num),
    ("accuracy", "accuracy", fmt_rate),
    ("accuracy_ci", "accuracy 95% CI", lambda ci: fmt_ci(*ci)),
    ("pass@1", "pass@1", fmt_rate),
    ("pass@n", "pass@n", fmt_rate),
    ("maj@n", "maj@n", fmt_rate),
    ("strict", "strict", fmt_rate),
    ("flexible", "flexible", fmt_rate),
    ("mean_reward", "mean reward", fmt_num),
    ("mean_reward_ci", "mean reward 95% CI", lambda ci: fmt_ci(*ci, rate=False)),
    ("parse_error_rate", "parse errors", fmt_rate),
    ("error_rate", "errors", fmt_rate),
]
_OPTIONAL_HEADLINE = ("strict", "flexible")


def headline_rows(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """One row of raw headline values per benchmark (n = the most repeats any prompt has)."""
    rows = []
    for name, bm in metrics.get("benchmarks", {}).items():
        n = bm["repeats"]["max"]
        info = bm.get("info_rates", {})
        rows.append(
            {
                "benchmark": name,
                "prompts": bm["n_prompts"],
                "rollouts": bm["n_rollouts"],
                "n": n,
                "accuracy": bm["accuracy"],
                "accuracy_ci": _ci(bm, "accuracy"),
                "pass@1": bm["pass_at_k"].get("1"),
                "pass@n": bm["pass_at_k"].get(str(n)),
                "maj@n": bm["maj_at_k"].get(str(n)),
                "strict": info.get("strict_correct"),
                "flexible": info.get("flexible_correct"),
                "mean_reward": bm["mean_reward"],
                "mean_reward_ci": _ci(bm, "mean_reward"),
                "parse_error_rate": bm["parse_error_rate"],
                "error_rate": bm["error_rate"],
            }
        )
    return rows


def headline_table(metrics: dict[str, Any]) -> Table:
    """Headline rows formatted; strict/flexible columns appear only when some benchmark has them."""
    rows = headline_rows(metrics)
    columns = [c for c in _HEADLINE_COLUMNS if c[0] not in _OPTIONAL_HEADLINE or any(r[c[0]] is not None for r in rows)]
    return Table([label for _, label, _ in columns], [[f(r[k]) for k, _, f in columns] for r in rows])


def headline_records(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """Headline rows as flat JSON-able records (CIs split into low/high), for the table artifact."""
    out = []
    for row in headline_rows(metrics):
        record: dict[str, Any] = {}
        for key, value in row.items():
            if key.endswith("_ci"):
                base = key[: -len("_ci")]
                record[f"{base}_ci_low"], record[f"{base}_ci_high"] = (
                    None if v is None else round(v, 6) for v in value
                )
            else:
                record[key] = round(value, 6) if isinstance(value, float) else value
        out.append(record)
    return out


# ---------------------------------------------------------------------------------------------
# Comparison with a baseline


def comparison_table(comparison: dict[str, Any]) -> Table:
    rows = []
    for name, metrics in comparison.get("benchmarks", {}).items():
        for row in metrics.values():
            rate = row["kind"] == "rate"
            fmt = fmt_rate if rate else fmt_num
            verdict = "regression ▼" if row["regression"] else "improvement ▲" if row["improvement"] else "–"
            rows.append(
                [
                    name,
                    row["label"],
                    fmt(row["baseline"]),
                    fmt(row["current"]),
                    fmt_delta(row["delta"], rate),
                    "–" if row["low"] is None else f"{fmt_delta(row['low'], rate)} … {fmt_delta(row['high'], rate)}",
                    verdict,
                ]
            )
    missing = comparison.get("missing", {})
    notes = []
    if missing.get("current_only"):
        notes.append(f"not in the baseline: {', '.join(missing['current_only'])}")
    if missing.get("baseline_only"):
        notes.append(f"only in the baseline: {', '.join(missing['baseline_only'])}")
    notes.append(
        "Δ CI: Newcombe score interval for rates; bootstrap CIs combined in quadrature for mean reward. "
        "A regression is a drop whose 95% CI excludes 0."
    )
    return Table(["benchmark", "metric", "baseline", "current", "Δ", "Δ 95% CI", "verdict"], rows, "; ".join(notes))


def comparison_title(comparison: dict[str, Any]) -> str:
    base = comparison.get("baseline") or {}
    label = base.get("run_id") or "?"
    if base.get("model"):
        label += f" ({base['model']})"
    return f"Comparison with baseline {label}"


def comparison_summary(comparison: dict[str, Any]) -> str:
    regressions = comparison.get("regressions", [])
    if regressions:
        return f"{len(regressions)} regression(s): {', '.join(regressions)}"
    improvements = comparison.get("improvements", [])
    return "No regressions" + (f"; improvements: {', '.join(improvements)}" if improvements else "")


def comparison_markdown(comparison: dict[str, Any]) -> str:
    """The comparison as a markdown section (also the `eval-comparison` artifact)."""
    return "\n".join(
        [
            f"## {_md_cell(comparison_title(comparison))}",
            "",
            f"**{_md_cell(comparison_summary(comparison))}**",
            "",
            md_table(comparison_table(comparison)),
        ]
    )


# ---------------------------------------------------------------------------------------------
# Per-benchmark tables


def _summary_table(bm: dict[str, Any]) -> Table:
    rep = bm["repeats"]
    outcomes = bm.get("prompt_outcomes", {})
    pairs = [
        ("prompts", fmt_num(bm["n_prompts"])),
        ("rollouts", fmt_num(bm["n_rollouts"])),
        ("repeats per prompt", f"{rep['min']}–{rep['max']}" if rep["min"] != rep["max"] else str(rep["max"])),
        ("success rate", f"{fmt_rate(bm['accuracy'])} ({bm['successes']:,}/{bm['n_rollouts']:,})"),
        ("success rate 95% CI", fmt_ci(*_ci(bm, "accuracy"))),
        ("mean reward", fmt_num(bm["mean_reward"])),
        ("mean reward 95% CI (bootstrap over prompts)", fmt_ci(*_ci(bm, "mean_reward"), rate=False)),
        ("parse-error rate", f"{fmt_rate(bm['parse_error_rate'])} (CI {fmt_ci(*_ci(bm, 'parse_error_rate'))})"),
        ("errors", f"{bm['error_count']:,} ({fmt_rate(bm['error_rate'])}, CI {fmt_ci(*_ci(bm, 'error_rate'))})"),
    ]
    if outcomes:
        pairs += [
            ("prompts never solved", fmt_num(outcomes["never_succeed"]["count"])),
            ("prompts always solved", fmt_num(outcomes["always_succeed"]["count"])),
        ]
    return _kv_table(pairs)


def _k_table(bm: dict[str, Any]) -> Table:
    ks = sorted(bm["pass_at_k"], key=int)
    return Table(
        ["k", "pass@k", "pass@k 95% CI", "maj@k", "maj@k 95% CI"],
        [
            [
                k,
                fmt_rate(bm["pass_at_k"][k]),
                fmt_ci(*_ci(bm, "pass_at_k", k)),
                fmt_rate(bm["maj_at_k"].get(k)),
                fmt_ci(*_ci(bm, "maj_at_k", k)),
            ]
            for k in ks
        ],
    )


def _reward_table(bm: dict[str, Any]) -> Table:
    r = bm["reward"]
    mode = f"{fmt_num(r.get('mode'))} ({fmt_rate(r.get('mode_share'))} of rollouts)"
    pairs = [(key, fmt_num(r[key])) for key in ("min", "max", "mean", "median", "std")] + [("most common", mode)]
    values = bm.get("reward_values")
    if values:
        pairs.append(("distinct values", fmt_num(values["distinct"])))
    return _kv_table(pairs)


def _reward_values_table(bm: dict[str, Any], limit: int = 20) -> Table | None:
    values = bm.get("reward_values")
    if not values or not values["values"]:
        return None
    top = sorted(values["values"], key=lambda v: (-v[1], v[0]))[:limit]
    total = bm["n_rollouts"]
    shown = len(top) < values["distinct"]
    note = f"{len(top)} most common of {values['distinct']:,} distinct values" if shown else ""
    return Table(
        ["reward", "rollouts", "share"], [[fmt_num(v, 3), fmt_num(c), fmt_rate(c / total)] for v, c in top], note
    )


def _outcomes_table(bm: dict[str, Any]) -> Table | None:
    outcomes = bm.get("prompt_outcomes")
    if not outcomes:
        return None
    rows = []
    for key, label in (("never_succeed", "never succeed"), ("always_succeed", "always succeed")):
        ids = outcomes[key]["ids"]
        listed = ", ".join(ids[:MAX_PROMPT_IDS]) + (
            f", … (+{len(ids) - MAX_PROMPT_IDS:,})" if len(ids) > MAX_PROMPT_IDS else ""
        )
        rows.append([label, fmt_num(outcomes[key]["count"]), listed or "–"])
    rows.append(["some succeed", fmt_num(outcomes["mixed"]["count"]), ""])
    return Table(["prompts that…", "count", "prompt ids"], rows)


def _tool_tables(bm: dict[str, Any]) -> list[tuple[str, Table]]:
    t = bm["tool_calls"]
    summary = _kv_table(
        [
            ("mean per rollout", fmt_num(t["mean"], 2)),
            ("min–max", f"{fmt_num(t['min'])}–{fmt_num(t['max'])}"),
            ("total", fmt_num(t["total"])),
            ("Pearson r (tool calls, reward)", fmt_num(t["reward_corr"])),
        ]
    )
    by_count = Table(
        ["tool calls", "rollouts", "mean reward", "success rate"],
        [
            [str(row["tool_calls"]), fmt_num(row["n"]), fmt_num(row["mean_reward"]), fmt_rate(row["success_rate"])]
            for row in bm["reward_by_tool_calls"]
        ],
    )
    return [("Tool calls", summary), ("Mean reward by tool-call count", by_count)]


def _count_table(label: str, counts: dict[str, int], total: int) -> Table:
    return Table(
        [label, "count", "share"],
        [[k, fmt_num(v), fmt_rate(v / total if total else None)] for k, v in counts.items()],
    )


def _quantile(bm: dict[str, Any], name: str, key: str) -> float | None:
    dist = (bm.get("distributions") or {}).get(name)
    return dist["quantiles"][key] if dist else None


def _tokens_table(bm: dict[str, Any]) -> Table:
    t = bm["tokens"]
    rows = []
    for label, name in (("prompt", "prompt_tokens"), ("completion", "completion_tokens")):
        rows.append(
            [
                label,
                fmt_num(t[f"{label}_mean"], 1),
                fmt_num(t[f"{label}_total"]),
                *(fmt_num(_quantile(bm, name, q), 0) for q in ("min", "p50", "p95", "max")),
            ]
        )
    return Table(["", "mean", "total", "min", "p50", "p95", "max"], rows)


def _latency_table(bm: dict[str, Any]) -> Table:
    lat = bm["latency_s"]
    keys = ("p50", "p90", "p99", "mean", "max")
    return Table(list(keys), [[fmt_num(lat[k], 2) for k in keys]])


def worst_prompts(bm: dict[str, Any]) -> list[dict[str, Any]]:
    """Per-prompt rows, most failing first (lowest success rate, then lowest mean reward)."""
    return sorted(bm["per_prompt"], key=lambda p: (p["success_rate"], p["mean_reward"], p["prompt_id"]))


def _prompt_table(bm: dict[str, Any], limit: int | None) -> Table:
    prompts = worst_prompts(bm)
    shown = prompts if limit is None else prompts[:limit]
    note = f"{len(shown)} of {len(prompts)} prompts shown, worst first" if len(shown) < len(prompts) else ""
    return Table(
        ["prompt", "n", "successes", "success rate", "mean reward", "reference", "top answer"],
        [
            [
                p["prompt_id"],
                str(p["n"]),
                str(p["successes"]),
                fmt_rate(p["success_rate"]),
                fmt_num(p["mean_reward"]),
                _clip(p["reference"], 60),
                _clip(p["top_answer"], 60),
            ]
            for p in shown
        ],
        note,
    )


def benchmark_tables(bm: dict[str, Any], prompt_limit: int | None = MAX_PROMPT_ROWS) -> list[tuple[str, Table]]:
    """Every per-benchmark table, titled, in report order (the per-prompt table last)."""
    sections: list[tuple[str, Table]] = [
        ("Summary", _summary_table(bm)),
        ("pass@k and maj@k", _k_table(bm)),
        ("Reward", _reward_table(bm)),
    ]
    values = _reward_values_table(bm)
    if values:
        sections.append(("Reward values", values))
    outcomes = _outcomes_table(bm)
    if outcomes:
        sections.append(("Prompt outcomes", outcomes))
    if uses_tools(bm):
        sections += _tool_tables(bm)
    if bm["info_rates"]:
        rows = [[k, fmt_rate(v), fmt_ci(*_ci(bm, "info_rates", k))] for k, v in bm["info_rates"].items()]
        sections.append(("Info rates", Table(["key", "rate", "95% CI"], rows)))
    for key, counts in bm.get("info_outcomes", {}).items():  # sandbox outcomes, Tetris end reasons
        title = "Sandbox outcomes" if key == "outcome" else f"Outcomes ({key})"
        sections.append((title, _count_table(key, counts, bm["n_rollouts"])))
    sections.append(("Finish reasons", _count_table("finish reason", bm["finish_reasons"], bm["n_rollouts"])))
    if bm["errors"]:
        sections.append(("Errors", _count_table("error", bm["errors"], bm["n_rollouts"])))
    sections += [
        ("Tokens", _tokens_table(bm)),
        ("Latency (s)", _latency_table(bm)),
        ("Per prompt (worst first)", _prompt_table(bm, prompt_limit)),
    ]
    return sections


# ---------------------------------------------------------------------------------------------
# Run info


def timings_of(run_info: dict[str, Any]) -> dict[str, float]:
    """Stage timings in seconds (accepts `timings` or `stage_timings`)."""
    return run_info.get("timings") or run_info.get("stage_timings") or {}


def _as_datetime(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def fmt_duration(seconds: float) -> str:
    minutes, sec = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m {sec:02d}s" if hours else f"{minutes}m {sec:02d}s"


def run_tables(run_info: dict[str, Any]) -> list[tuple[str, Table]]:
    """The run's identity (scalars, plus the wall-clock duration) and its stage timings."""
    skip = {"config", "timings", "stage_timings"}
    scalars = [(k, "–" if v is None else str(v)) for k, v in run_info.items() if k not in skip]
    start, end = _as_datetime(run_info.get("started_at")), _as_datetime(run_info.get("finished_at"))
    if start and end:
        with contextlib.suppress(TypeError):  # naive vs aware timestamps: leave the duration out
            scalars.append(("duration", fmt_duration((end - start).total_seconds())))
    tables = [("Run", _kv_table(scalars))]
    timings = timings_of(run_info)
    if timings:
        rows = [[stage, fmt_num(float(sec), 1)] for stage, sec in timings.items()]
        rows.append(["total", fmt_num(sum(float(sec) for sec in timings.values()), 1)])
        tables.append(("Stage timings", Table(["stage", "seconds"], rows)))
    return tables


def _config_json(run_info: dict[str, Any]) -> str:
    return json.dumps(redact(run_info.get("config") or {}), indent=2, sort_keys=True, default=str)


# ---------------------------------------------------------------------------------------------
# Markdown


def _clip(text: str | None, limit: int) -> str:
    if text is None:
        return "–"
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _md_cell(text: str) -> str:
    """Escape for a markdown table cell (Prefect renders HTML in markdown, so escape that too)."""
    return html.escape(" ".join(text.split()), quote=False).replace("|", "\\|")


def md_table(table: Table) -> str:
    lines = [
        "| " + " | ".join(_md_cell(h) for h in table.header) + " |",
        "|" + "|".join("---" for _ in table.header) + "|",
    ]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in table.rows]
    if table.note:
        lines += ["", f"_{_md_cell(table.note)}_"]
    return "\n".join(lines)


def _title(run_info: dict[str, Any]) -> str:
    return f"Evaluation report: {run_info.get('model', '?')} ({run_info.get('run_id', '?')})"


def render_markdown(metrics: dict[str, Any], run_info: dict[str, Any], comparison: dict[str, Any] | None = None) -> str:
    parts = [f"# {_md_cell(_title(run_info))}"]
    if comparison:
        parts += ["", comparison_markdown(comparison)]
    parts += ["", "## Headline", "", md_table(headline_table(metrics))]
    if not metrics.get("benchmarks"):
        parts += ["", "_No rollouts were found for this run._"]
    for title, table in run_tables(run_info):
        parts += ["", f"## {title}", "", md_table(table)]
    parts += ["", "## Config", "", "```json", _config_json(run_info), "```"]
    for name, bm in metrics.get("benchmarks", {}).items():
        parts += ["", f"## Benchmark: {_md_cell(name)}"]
        for title, table in benchmark_tables(bm):
            parts += ["", f"### {title}", "", md_table(table)]
    return "\n".join(parts) + "\n"


# ---------------------------------------------------------------------------------------------
# HTML: page frame and charts (shared with the run index, tasks/reporting/index.py)


CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5rem auto; max-width: 1200px; color: #222; padding: 0 1rem; }
table { border-collapse: collapse; margin: .5rem 0 1rem; font-size: .9rem; }
th, td { border: 1px solid #ddd; padding: .25rem .5rem; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
tr[hidden] { display: none; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 1rem; }
.tables { display: flex; flex-wrap: wrap; gap: 0 2rem; align-items: flex-start; }
.ok { color: #1a7f37; } .fail { color: #cf222e; } .err { color: #9a6700; }
.regression { color: #cf222e; font-weight: 600; } .improvement { color: #1a7f37; font-weight: 600; }
pre { background: #f6f8fa; padding: .75rem; overflow-x: auto; white-space: pre-wrap; word-break: break-word; }
details summary { cursor: pointer; }
.filters { display: flex; flex-wrap: wrap; gap: .5rem 1rem; align-items: center; margin: .5rem 0; }
.filters input[type=number] { width: 6rem; }
.scroll { max-height: 32rem; overflow-y: auto; border: 1px solid #eee; }
.rollouts tbody tr { cursor: pointer; } .rollouts tbody tr:hover { background: #f0f6ff; }
.rollouts tbody tr.selected { background: #dbeafe; }
.transcript { border: 1px solid #bbb; padding: .5rem 1rem; margin: .5rem 0 1rem; background: #fff; }
.transcript h4 { margin: .25rem 0; display: flex; justify-content: space-between; }
.muted { color: #666; }
"""


def html_table(table: Table, css_class: str = "") -> str:
    cls = f' class="{css_class}"' if css_class else ""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in table.header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in table.rows)
    note = f"<p><em>{html.escape(table.note)}</em></p>" if table.note else ""
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{note}"


def _html_section(title: str, table: Table, level: int = 3) -> str:
    return f"<div><h{level}>{html.escape(title)}</h{level}>{html_table(table)}</div>"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


# A small white template: plotly's built-in "plotly_white" is deep-copied into every figure (~0.1 s each).
_GRID = "#EBF0F8"
_COLORWAY = ["#636efa", "#EF553B", "#00cc96", "#ab63fa", "#FFA15A", "#19d3f3", "#FF6692", "#B6E880", "#FF97FF"]


@functools.cache
def _template() -> go.layout.Template:
    axis = {"gridcolor": _GRID, "zerolinecolor": _GRID, "linecolor": _GRID, "automargin": True}
    return go.layout.Template(
        layout={
            "paper_bgcolor": "white",
            "plot_bgcolor": "white",
            "font": {"color": "#2a3f5f"},
            "colorway": _COLORWAY,
            "xaxis": axis,
            "yaxis": axis,
        }
    )


def fig_html(fig: go.Figure, div_id: str, title: str, height: int = 360) -> str:
    """A plotly chart as a div + script (plotly.js itself is inlined once per page by html_page)."""
    fig.update_layout(title=title, height=height, margin={"l": 55, "r": 20, "t": 50, "b": 50}, template=_template())
    return fig.to_html(
        full_html=False,
        include_plotlyjs=False,
        div_id=div_id,
        default_height=f"{height}px",
        config={"displaylogo": False, "responsive": True},
    )


def html_page(title: str, body: str, script: str = "") -> str:
    """A whole self-contained page: plotly.js inlined once in <head>, then the body and `script`."""
    tail = f"<script>{script}</script>" if script else ""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{CSS}</style>"
        f'<script type="text/javascript">{get_plotlyjs()}</script></head>'
        f"<body>{body}{tail}</body></html>\n"
    )


def json_script(data: Any, css_class: str) -> str:
    """Data for the page's scripts: JSON in a non-executed <script>, with <, > and & escaped."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f'<script type="application/json" class="{css_class}">{text}</script>'


def error_bars(values: list[float | None], cis: list[tuple[float | None, float | None]]) -> dict[str, Any]:
    plus = [None if v is None or hi is None else hi - v for v, (_, hi) in zip(values, cis, strict=True)]
    minus = [None if v is None or lo is None else v - lo for v, (lo, _) in zip(values, cis, strict=True)]
    return {"type": "data", "array": plus, "arrayminus": minus, "visible": True}


def headline_charts(metrics: dict[str, Any]) -> list[str]:
    """Rates per benchmark with 95% CIs, and mean reward with its bootstrap CI."""
    rows = headline_rows(metrics)
    if not rows:
        return []
    names = [r["benchmark"] for r in rows]
    benches = metrics["benchmarks"]
    rates = go.Figure()
    for key, label in (("accuracy", "accuracy"), ("pass@1", "pass@1"), ("pass@n", "pass@n"), ("maj@n", "maj@n")):
        values, cis = [], []
        for r in rows:
            bm, n = benches[r["benchmark"]], str(r["n"])
            values.append(r[key])
            cis.append(
                _ci(bm, "accuracy")
                if key == "accuracy"
                else _ci(bm, "pass_at_k", "1")
                if key == "pass@1"
                else _ci(bm, "pass_at_k" if key == "pass@n" else "maj_at_k", n)
            )
        rates.add_trace(go.Bar(x=names, y=values, name=label, error_y=error_bars(values, cis)))
    rates.update_layout(barmode="group", yaxis={"title": "rate", "range": [0, 1.05], "tickformat": ".0%"})
    rewards = [r["mean_reward"] for r in rows]
    reward = go.Figure(
        go.Bar(x=names, y=rewards, name="mean reward", error_y=error_bars(rewards, [r["mean_reward_ci"] for r in rows]))
    )
    reward.update_layout(yaxis_title="mean reward")
    return [
        fig_html(rates, "chart-headline-rates", "Headline rates (95% CI)"),
        fig_html(reward, "chart-headline-reward", "Mean reward (95% bootstrap CI over prompts)"),
    ]


def _histogram_figure(dist: dict[str, Any] | None, name: str, opacity: float = 1.0) -> go.Bar | None:
    """A histogram precomputed in SQL (edges + counts) as a bar trace."""
    if not dist:
        return None
    edges, counts = dist["histogram"]["edges"], dist["histogram"]["counts"]
    centers = [(a + b) / 2 for a, b in itertools.pairwise(edges)]
    widths = [b - a for a, b in itertools.pairwise(edges)]
    return go.Bar(x=centers, y=counts, width=widths, name=name, opacity=opacity)


def benchmark_charts(name: str, bm: dict[str, Any]) -> list[str]:
    """The benchmark's charts as plotly divs, all drawn from the metrics dict."""
    key = slug(name)
    ks = sorted(bm["pass_at_k"], key=int)
    dists = bm.get("distributions") or {}
    figures: list[tuple[go.Figure, str, str]] = []

    curve = go.Figure()
    for metric, label in (("pass_at_k", "pass@k"), ("maj_at_k", "maj@k")):
        values = [bm[metric].get(k) for k in ks]
        curve.add_trace(
            go.Scatter(
                x=[int(k) for k in ks],
                y=values,
                mode="lines+markers",
                name=label,
                error_y=error_bars(values, [_ci(bm, metric, k) for k in ks]),
            )
        )
    curve.update_layout(
        xaxis={"title": "k", "type": "log", "tickvals": [int(k) for k in ks]},
        yaxis={"range": [0, 1.05], "tickformat": ".0%"},
    )
    figures.append((curve, "pass-maj-at-k", "pass@k and maj@k (95% CI)"))

    values = bm.get("reward_values") or {"values": [], "truncated": True}
    if values["values"] and not values["truncated"] and len(values["values"]) <= REWARD_VALUE_BARS:
        reward = go.Figure(go.Bar(x=[v for v, _ in values["values"]], y=[c for _, c in values["values"]]))
    else:
        reward = go.Figure([t for t in [_histogram_figure(dists.get("reward"), "reward")] if t])
    reward.update_layout(xaxis_title="reward", yaxis_title="rollouts", bargap=0.05)
    figures.append((reward, "reward", "Reward distribution"))

    prompts = sorted(bm["per_prompt"], key=lambda p: (-p["success_rate"], p["prompt_id"]))
    if len(prompts) <= MAX_PROMPT_BARS:
        per_prompt = go.Figure(go.Bar(x=[p["prompt_id"] for p in prompts], y=[p["success_rate"] for p in prompts]))
        per_prompt.update_layout(
            xaxis={"title": "prompt", "type": "category"}, yaxis={"title": "success rate", "range": [0, 1.05]}
        )
        figures.append((per_prompt, "prompt-success", "Success rate per prompt"))
    else:
        per_prompt = go.Figure(
            go.Histogram(x=[p["success_rate"] for p in prompts], xbins={"start": 0, "end": 1.0001, "size": 0.05})
        )
        per_prompt.update_layout(xaxis={"title": "success rate", "range": [0, 1.0001]}, yaxis_title="prompts")
        figures.append((per_prompt, "prompt-success", f"Per-prompt success rates ({len(prompts):,} prompts)"))

    tokens = go.Figure()
    for col, label in (("prompt_tokens", "prompt"), ("completion_tokens", "completion")):
        trace = _histogram_figure(dists.get(col), label, opacity=0.7)
        if trace:
            tokens.add_trace(trace)
    tokens.update_layout(barmode="overlay", xaxis_title="tokens", yaxis_title="rollouts")
    figures.append((tokens, "tokens", "Tokens per rollout"))

    latency = go.Figure([t for t in [_histogram_figure(dists.get("latency_s"), "latency")] if t])
    latency.update_layout(xaxis_title="seconds", yaxis_title="rollouts", bargap=0.05)
    figures.append((latency, "latency", "Latency per rollout (s)"))

    if uses_tools(bm):
        by_tools = bm["reward_by_tool_calls"]
        tools = go.Figure(
            go.Bar(
                x=[r["tool_calls"] for r in by_tools],
                y=[r["mean_reward"] for r in by_tools],
                customdata=[r["n"] for r in by_tools],
                hovertemplate="%{x} tool calls: mean reward %{y:.3f} (%{customdata} rollouts)<extra></extra>",
            )
        )
        tools.update_layout(xaxis_title="tool calls", yaxis_title="mean reward")
        figures.append((tools, "reward-by-tool-calls", "Mean reward by tool-call count"))
    return [fig_html(fig, f"chart-{key}-{suffix}", title) for fig, suffix, title in figures]


# ---------------------------------------------------------------------------------------------
# HTML: the rollout browser


_BROWSER_JS = """
document.querySelectorAll('.browser').forEach(function (box) {
  var rows = Array.prototype.slice.call(box.querySelectorAll('tbody tr'));
  var q = box.querySelector('.f-prompt'), lo = box.querySelector('.f-min'), hi = box.querySelector('.f-max');
  var oc = box.querySelector('.f-outcome'), count = box.querySelector('.f-count');
  var panel = box.querySelector('.transcript'), data = null;
  function apply() {
    var text = q.value.trim().toLowerCase(), want = oc.value, shown = 0;
    var min = lo.value === '' ? -Infinity : parseFloat(lo.value);
    var max = hi.value === '' ? Infinity : parseFloat(hi.value);
    rows.forEach(function (tr) {
      var r = parseFloat(tr.getAttribute('data-reward'));
      var ok = (!text || tr.getAttribute('data-prompt').toLowerCase().indexOf(text) >= 0) &&
               r >= min && r <= max && (!want || tr.getAttribute('data-outcome') === want);
      tr.hidden = !ok;
      if (ok) shown++;
    });
    count.textContent = shown + ' of ' + rows.length + ' rollouts shown';
  }
  [q, lo, hi].forEach(function (el) { el.addEventListener('input', apply); });
  oc.addEventListener('change', apply);
  box.querySelector('tbody').addEventListener('click', function (ev) {
    var tr = ev.target.closest('tr');
    if (!tr) return;
    if (data === null) data = JSON.parse(box.querySelector('script.rollout-data').textContent);
    var d = data[parseInt(tr.getAttribute('data-i'), 10)] || {};
    rows.forEach(function (r) { r.classList.remove('selected'); });
    tr.classList.add('selected');
    panel.querySelector('.t-title').textContent = 'prompt ' + tr.getAttribute('data-prompt') +
      ' · repeat ' + tr.getAttribute('data-repeat') + ' · ' + tr.getAttribute('data-outcome') +
      ' · reward ' + tr.getAttribute('data-reward');
    var text = d.completion === null || d.completion === undefined ? '(no completion)' : d.completion;
    if (d.error) text = 'error: ' + d.error + '\\n\\n' + text;
    panel.querySelector('.t-text').textContent = d.omitted ? '(not embedded: ' + d.omitted + ')' : text;
    var rest = {};
    Object.keys(d).forEach(function (k) { if (k !== 'completion' && k !== 'error') rest[k] = d[k]; });
    panel.querySelector('.t-json').textContent = JSON.stringify(rest, null, 2);
    panel.hidden = false;
    panel.scrollIntoView({block: 'nearest'});
  });
  panel.querySelector('.t-close').addEventListener('click', function () { panel.hidden = true; });
  apply();
});
"""


def _outcome(row: dict[str, Any]) -> str:
    if row["error"] is not None:
        return "error"
    return "success" if row["success"] else "failure"


def _parse_json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str))


def _detail(row: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """What the transcript panel shows for one rollout, and its JSON size: the conversation (the whole
    transcript when the env recorded one, else the messages sent), the completion, error and env
    info; long texts are clipped to MAX_TRANSCRIPT_CHARS in all."""
    detail: dict[str, Any] = {
        "completion": row["completion"],
        "error": row["error"],
        "parsed_answer": row["parsed_answer"],
        "reference": row["reference"],
        "finish_reason": row["finish_reason"],
    }
    key = "transcript" if row["transcript"] is not None else "messages"
    detail[key] = _parse_json(row[key])
    detail["info"] = _parse_json(row["info"])
    size = _size(detail)
    if size <= MAX_TRANSCRIPT_CHARS:
        return detail, size
    share = MAX_TRANSCRIPT_CHARS // 3
    for name in (key, "info"):
        text = detail[name] if isinstance(detail[name], str) else json.dumps(detail[name], ensure_ascii=False, indent=1)
        if len(text) > share:
            detail[name] = text[:share] + f"\n… clipped ({len(text):,} characters in the parquet file)"
    for name in ("completion", "error"):
        if detail[name] and len(detail[name]) > share:
            detail[name] = detail[name][:share] + f"\n… clipped ({len(detail[name]):,} characters)"
    return detail, _size(detail)


def rollouts_html(name: str, bm: dict[str, Any], frame: pl.DataFrame) -> str:
    """The rollout browser of one benchmark: filters, a table, and a transcript panel (inline JS)."""
    tools = uses_tools(bm)
    header = ["prompt", "repeat", "outcome", "reward", "parsed answer", "reference", "finish", "tokens", "latency (s)"]
    if tools:
        header.insert(7, "tool calls")
    marks = {
        "success": '<span class="ok">✓ success</span>',
        "failure": '<span class="fail">✗ failure</span>',
        "error": '<span class="err">⚠ error</span>',
    }
    rows, details, budget, omitted = [], [], MAX_BROWSER_BYTES, 0
    for i, r in enumerate(frame.iter_rows(named=True)):
        outcome = _outcome(r)
        reward = 0.0 if outcome == "error" else float(r["reward"])
        cells = [
            html.escape(str(r["prompt_id"])),
            str(r["repeat"]),
            marks[outcome],
            fmt_num(reward),
            html.escape(_clip(r["parsed_answer"], 60)),
            html.escape(_clip(r["reference"], 60)),
            html.escape(r["finish_reason"] or "–"),
            fmt_num(r["completion_tokens"]),
            fmt_num(r["latency_s"], 2),
        ]
        if tools:
            cells.insert(7, str(r["tool_calls"]))
        attrs = (
            f'data-i="{i}" data-prompt="{html.escape(str(r["prompt_id"]))}" data-repeat="{r["repeat"]}" '
            f'data-reward="{reward!r}" data-outcome="{outcome}"'
        )
        rows.append(f"<tr {attrs}>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        detail, size = _detail(r)
        if size > budget:
            detail, omitted = {"omitted": "the page's transcript budget is spent; see the parquet files"}, omitted + 1
        else:
            budget -= size
        details.append(detail)
    notes = []
    if bm["n_rollouts"] > frame.height:
        notes.append(
            f"First {frame.height:,} of {bm['n_rollouts']:,} rollouts (by prompt id and repeat); "
            "all are in the run's parquet files."
        )
    if omitted:
        notes.append(f"{omitted:,} transcripts are not embedded (page size budget).")
    note = "".join(f"<p><em>{html.escape(n)}</em></p>" for n in notes)
    key = slug(name)
    head = "".join(f"<th>{h}</th>" for h in header)
    filters = (
        '<div class="filters">'
        f'<label>prompt id <input type="search" class="f-prompt" id="f-prompt-{key}" placeholder="contains…"></label>'
        f'<label>reward ≥ <input type="number" step="any" class="f-min" id="f-min-{key}"></label>'
        f'<label>reward ≤ <input type="number" step="any" class="f-max" id="f-max-{key}"></label>'
        f'<label>outcome <select class="f-outcome" id="f-outcome-{key}"><option value="">all</option>'
        '<option value="success">success</option><option value="failure">failure</option>'
        '<option value="error">error</option></select></label>'
        '<span class="f-count muted"></span></div>'
    )
    panel = (
        '<div class="transcript" hidden><h4><span class="t-title"></span>'
        '<button type="button" class="t-close">close</button></h4>'
        '<div class="muted">completion</div><pre class="t-text"></pre>'
        '<div class="muted">transcript, info (JSON)</div><pre class="t-json"></pre></div>'
    )
    table = (
        f'<div class="scroll"><table class="rollouts"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )
    return (
        f'<div class="browser" id="browser-{key}">{note}{filters}{panel}{table}'
        f"{json_script(details, 'rollout-data')}</div>"
    )


def render_html(
    metrics: dict[str, Any],
    run_info: dict[str, Any],
    frame: pl.DataFrame,
    comparison: dict[str, Any] | None = None,
) -> str:
    """The whole self-contained report page; `frame` holds the rollouts for the browser."""
    title = _title(run_info)
    body = [f"<h1>{html.escape(title)}</h1>"]
    if comparison:
        flag = "regression" if comparison.get("regressions") else "improvement"
        body += [
            f'<h2 id="comparison">{html.escape(comparison_title(comparison))}</h2>',
            f'<p class="{flag}">{html.escape(comparison_summary(comparison))}</p>',
        ]
        report = (comparison.get("baseline") or {}).get("report")
        if report and "://" not in report:
            body.append(f'<p><a href="../../{html.escape(report)}">baseline report</a></p>')
        body.append(html_table(comparison_table(comparison), "comparison"))
    body += ["<h2>Headline</h2>", html_table(headline_table(metrics))]
    if not metrics.get("benchmarks"):
        body.append("<p><em>No rollouts were found for this run.</em></p>")
    body.append('<div class="charts">' + "".join(headline_charts(metrics)) + "</div>")
    body.append(
        '<div class="tables">' + "".join(_html_section(t, tab, 2) for t, tab in run_tables(run_info)) + "</div>"
    )
    body.append(f"<details><summary>Config</summary><pre>{html.escape(_config_json(run_info))}</pre></details>")
    for name, bm in metrics.get("benchmarks", {}).items():
        rows = frame.filter(pl.col("benchmark") == name)
        tables = benchmark_tables(bm, prompt_limit=MAX_PROMPT_ROWS_HTML)
        body += [
            f'<h2 id="{slug(name)}">Benchmark: {html.escape(name)}</h2>',
            '<div class="tables">' + "".join(_html_section(t, tab) for t, tab in tables[:-1]) + "</div>",
            '<div class="charts">' + "".join(benchmark_charts(name, bm)) + "</div>",
            f"<details><summary>{html.escape(tables[-1][0])}</summary>{html_table(tables[-1][1])}</details>",
            "<h3>Rollouts</h3>",
            rollouts_html(name, bm, rows),
        ]
    return html_page(title, "".join(body), _BROWSER_JS)


# ---------------------------------------------------------------------------------------------
# Writing and publishing


def write_report(
    run_dir: str,
    metrics: dict[str, Any],
    run_info: dict[str, Any],
    files: list[str],
    storage_options: dict[str, Any] | None = None,
    comparison: dict[str, Any] | None = None,
) -> dict[str, str]:
    """Write metrics.json, report.md and report.html into run_dir (atomically) and return their URLs."""
    run_info = {**run_info, "config": redact(run_info.get("config") or {})}
    frame = load_rollouts_frame(
        files,
        storage_options,
        _ROLLOUT_COLUMNS,
        per_benchmark_limit=MAX_ROLLOUT_ROWS,
        dedupe=metrics.get("duplicate_rollouts", 1) != 0,  # computed from the same files: no window needed
    )
    urls = {kind: store.join(run_dir, name) for kind, name in REPORT_FILES.items()}
    payload = {**metrics, "run_info": run_info}
    if comparison:
        payload["comparison"] = comparison
    store.write_text(urls["metrics"], json.dumps(payload, indent=2, default=str) + "\n", storage_options)
    store.write_text(urls["markdown"], render_markdown(metrics, run_info, comparison), storage_options)
    store.write_text(urls["html"], render_html(metrics, run_info, frame, comparison), storage_options)
    return urls


def browser_url(url: str) -> str:
    """A link a browser can follow: local paths become file:// URLs, others stay as they are."""
    if "://" in url:
        return url
    return Path(url).resolve().as_uri()


def artifact_key(text: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    return slug(text) or DEFAULT_ARTIFACT_KEY


def artifact_markdown(
    urls: dict[str, str], metrics: dict[str, Any], run_info: dict[str, Any], comparison: dict[str, Any] | None = None
) -> str:
    lines = [f"## {_md_cell(_title(run_info))}", ""]
    if comparison:
        lines += [f"**{_md_cell(comparison_summary(comparison))}** (vs {_md_cell(comparison_title(comparison))})", ""]
    lines += [
        md_table(headline_table(metrics)),
        "",
        f"Full report: [{_md_cell(urls['html'])}]({browser_url(urls['html'])})",
    ]
    if urls.get("index_html"):
        lines.append(f"All runs: [{_md_cell(urls['index_html'])}]({browser_url(urls['index_html'])})")
    lines.append(f"metrics: `{urls['metrics']}` · markdown: `{urls['markdown']}`")
    return "\n".join(lines) + "\n"


def _json_safe(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def publish_artifacts(
    urls: dict[str, str],
    metrics: dict[str, Any],
    run_info: dict[str, Any],
    key: str = DEFAULT_ARTIFACT_KEY,
    comparison: dict[str, Any] | None = None,
) -> None:
    """Attach the report to the current Prefect run: the headline (markdown and table), links to the
    HTML report and the run index, and the baseline comparison (key `eval-comparison`) if any."""
    from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
    from prefect.context import get_run_context
    from prefect.exceptions import MissingContextError

    try:
        get_run_context()
    except MissingContextError:
        logger.debug("not inside a Prefect run; skipping report artifacts")
        return
    key = artifact_key(key)
    description = f"evalflow run {run_info.get('run_id', '?')}: {run_info.get('model', '?')}"
    # _sync=True: these dispatch to coroutines inside async flows, which would never be awaited here.
    create_markdown_artifact(
        markdown=artifact_markdown(urls, metrics, run_info, comparison), key=key, description=description, _sync=True
    )
    records = [{k: _json_safe(v) for k, v in r.items()} for r in headline_records(metrics)]
    if records:
        create_table_artifact(table=records, key=f"{key}-metrics", description=description, _sync=True)
    create_link_artifact(
        link=browser_url(urls["html"]), link_text="HTML report", key=f"{key}-html", description=description, _sync=True
    )
    if urls.get("index_html"):
        create_link_artifact(
            link=browser_url(urls["index_html"]),
            link_text="All runs (index)",
            key=f"{key}-index",
            description=description,
            _sync=True,
        )
    if comparison:
        comparison_key = COMPARISON_ARTIFACT_KEY if key == DEFAULT_ARTIFACT_KEY else f"{key}-comparison"
        create_markdown_artifact(
            markdown=comparison_markdown(comparison), key=comparison_key, description=description, _sync=True
        )


def format_terminal_summary(metrics: dict[str, Any], urls: dict[str, str]) -> str:
    """A plain-text headline table and the report locations, for the end of a CLI run."""
    table = headline_table(metrics)
    grid = [table.header, *table.rows]
    widths = [max(len(row[i]) for row in grid) for i in range(len(table.header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in grid]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if not metrics.get("benchmarks"):
        lines.append("(no rollouts)")
    lines.append(f"total rollouts: {metrics.get('total_rollouts', 0):,}")
    lines += [f"{kind}: {url}" for kind, url in urls.items()]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Prefect task wrapper


@task(name="write-report", cache_policy=NO_CACHE)
def report_task(
    run_dir: str,
    metrics: dict[str, Any],
    run_info: dict[str, Any],
    files: list[str],
    storage_options: dict[str, Any] | None = None,
    comparison: dict[str, Any] | None = None,
    store_url: str | None = None,
) -> dict[str, str]:
    """Write the reports, add the run to the store's index (when `store_url` is given) and attach
    everything to the flow run as artifacts. Returns the URLs (index_json/index_html included)."""
    from tasks.reporting.index import index_entry, update_index

    urls = write_report(run_dir, metrics, run_info, files, storage_options, comparison)
    if store_url is not None:
        urls.update(update_index(store_url, index_entry(run_info, metrics, urls, store_url), storage_options))
    publish_artifacts(urls, metrics, run_info, comparison=comparison)
    get_run_logger().info("report written: %s", urls["html"])
    return urls
