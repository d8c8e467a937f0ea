"""Run reports: metrics.json, report.md and a self-contained report.html, plus Prefect artifacts.

Everything shown comes from the metrics dict (tasks/analysis.py) and the rollout files, so a report
can be rebuilt from a run's store at any time. Reports go through tasks.store, so they are written
atomically to a local folder or an object store alike. The HTML inlines plotly.js once and needs no
network to open; all model text is escaped, because completions can contain anything.
"""

from __future__ import annotations

import contextlib
import html
import json
import logging
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

from tasks import store
from tasks.analysis import load_rollouts_frame

logger = logging.getLogger(__name__)

REPORT_FILES = {"metrics": "metrics.json", "markdown": "report.md", "html": "report.html"}
DEFAULT_ARTIFACT_KEY = "eval-report"
MAX_PROMPT_ROWS = 50  # per-prompt rows per benchmark in the markdown (all are in metrics.json)
MAX_ROLLOUT_ROWS = 1000  # rollouts per benchmark in the HTML table (all are in the parquet files)
COMPLETION_PREVIEW_CHARS = 200

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


# ---------------------------------------------------------------------------------------------
# Headline


# (key, column label, formatter)
_HEADLINE_COLUMNS: list[tuple[str, str, Callable[[Any], str]]] = [
    ("benchmark", "benchmark", str),
    ("prompts", "prompts", fmt_num),
    ("rollouts", "rollouts", fmt_num),
    ("n", "n", fmt_num),
    ("accuracy", "accuracy", fmt_rate),
    ("pass@1", "pass@1", fmt_rate),
    ("pass@n", "pass@n", fmt_rate),
    ("maj@n", "maj@n", fmt_rate),
    ("strict", "strict", fmt_rate),
    ("flexible", "flexible", fmt_rate),
    ("mean_reward", "mean reward", fmt_num),
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
                "pass@1": bm["pass_at_k"].get("1"),
                "pass@n": bm["pass_at_k"].get(str(n)),
                "maj@n": bm["maj_at_k"].get(str(n)),
                "strict": info.get("strict_correct"),
                "flexible": info.get("flexible_correct"),
                "mean_reward": bm["mean_reward"],
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


# ---------------------------------------------------------------------------------------------
# Per-benchmark tables


def _summary_table(bm: dict[str, Any]) -> Table:
    rep = bm["repeats"]
    return _kv_table(
        [
            ("prompts", fmt_num(bm["n_prompts"])),
            ("rollouts", fmt_num(bm["n_rollouts"])),
            (
                "repeats per prompt",
                f"{rep['min']}–{rep['max']}" if rep["min"] != rep["max"] else str(rep["max"]),
            ),
            ("success rate", f"{fmt_rate(bm['accuracy'])} ({bm['successes']:,}/{bm['n_rollouts']:,})"),
            ("mean reward", fmt_num(bm["mean_reward"])),
            ("parse-error rate", fmt_rate(bm["parse_error_rate"])),
            ("errors", f"{bm['error_count']:,} ({fmt_rate(bm['error_rate'])})"),
        ]
    )


def _k_table(bm: dict[str, Any]) -> Table:
    ks = sorted(bm["pass_at_k"], key=int)
    return Table(
        ["k", "pass@k", "maj@k"],
        [[k, fmt_rate(bm["pass_at_k"][k]), fmt_rate(bm["maj_at_k"].get(k))] for k in ks],
    )


def _reward_table(bm: dict[str, Any]) -> Table:
    r = bm["reward"]
    mode = f"{fmt_num(r.get('mode'))} ({fmt_rate(r.get('mode_share'))} of rollouts)"
    return _kv_table(
        [(key, fmt_num(r[key])) for key in ("min", "max", "mean", "median", "std")] + [("most common", mode)]
    )


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
            [
                str(row["tool_calls"]),
                fmt_num(row["n"]),
                fmt_num(row["mean_reward"]),
                fmt_rate(row["success_rate"]),
            ]
            for row in bm["reward_by_tool_calls"]
        ],
    )
    return [("Tool calls", summary), ("Mean reward by tool-call count", by_count)]


def _count_table(label: str, counts: dict[str, int], total: int) -> Table:
    return Table(
        [label, "count", "share"],
        [[k, fmt_num(v), fmt_rate(v / total if total else None)] for k, v in counts.items()],
    )


def _tokens_table(bm: dict[str, Any]) -> Table:
    t = bm["tokens"]
    return Table(
        ["", "mean", "total"],
        [
            ["prompt", fmt_num(t["prompt_mean"], 1), fmt_num(t["prompt_total"])],
            ["completion", fmt_num(t["completion_mean"], 1), fmt_num(t["completion_total"])],
        ],
    )


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
    """Every per-benchmark table, titled, in report order."""
    sections: list[tuple[str, Table]] = [
        ("Summary", _summary_table(bm)),
        ("pass@k and maj@k", _k_table(bm)),
        ("Reward", _reward_table(bm)),
        *_tool_tables(bm),
    ]
    if bm["info_rates"]:
        sections.append(("Info rates", Table(["key", "rate"], [[k, fmt_rate(v)] for k, v in bm["info_rates"].items()])))
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


def render_markdown(metrics: dict[str, Any], run_info: dict[str, Any]) -> str:
    parts = [f"# {_md_cell(_title(run_info))}", "", "## Headline", "", md_table(headline_table(metrics))]
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
# HTML


_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5rem auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: .5rem 0 1rem; font-size: .9rem; }
th, td { border: 1px solid #ddd; padding: .25rem .5rem; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 1rem; }
.tables { display: flex; flex-wrap: wrap; gap: 0 2rem; align-items: flex-start; }
.rollouts td { max-width: 40rem; }
.ok { color: #1a7f37; } .fail { color: #cf222e; }
pre { background: #f6f8fa; padding: .75rem; overflow-x: auto; }
details summary { cursor: pointer; }
"""


def html_table(table: Table, css_class: str = "") -> str:
    cls = f' class="{css_class}"' if css_class else ""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in table.header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in table.rows)
    note = f"<p><em>{html.escape(table.note)}</em></p>" if table.note else ""
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{note}"


def _html_section(title: str, table: Table, level: int = 3) -> str:
    return f"<div><h{level}>{html.escape(title)}</h{level}>{html_table(table)}</div>"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


def _fig_html(fig: go.Figure, div_id: str, title: str) -> str:
    fig.update_layout(title=title, height=360, margin={"l": 50, "r": 20, "t": 50, "b": 50}, template="plotly_white")
    return fig.to_html(
        full_html=False,
        include_plotlyjs=False,
        div_id=div_id,
        default_height="360px",
        config={"displaylogo": False},
    )


def _effective_rewards(frame: pl.DataFrame) -> pl.DataFrame:
    """The analysis convention: errored rollouts are failures with reward 0."""
    errored = pl.col("error").is_not_null()
    return frame.with_columns(
        pl.when(errored).then(0.0).otherwise(pl.col("reward")).alias("reward"),
        (pl.col("success") & ~errored).alias("success"),
    )


def benchmark_charts(name: str, bm: dict[str, Any], frame: pl.DataFrame) -> list[str]:
    """The benchmark's charts as plotly divs (no plotly.js inside)."""
    slug = _slug(name)
    ks = sorted(bm["pass_at_k"], key=int)
    prompts = sorted(bm["per_prompt"], key=lambda p: (-p["success_rate"], p["prompt_id"]))
    by_tools = bm["reward_by_tool_calls"]

    reward = go.Figure(go.Histogram(x=frame["reward"].to_list(), name="reward"))
    reward.update_layout(xaxis_title="reward", yaxis_title="rollouts")

    curve = go.Figure()
    for key, label in (("pass_at_k", "pass@k"), ("maj_at_k", "maj@k")):
        curve.add_trace(
            go.Scatter(x=[int(k) for k in ks], y=[bm[key].get(k) for k in ks], mode="lines+markers", name=label)
        )
    curve.update_layout(
        xaxis={"title": "k", "type": "log", "tickvals": [int(k) for k in ks]}, yaxis={"range": [0, 1.05]}
    )

    per_prompt = go.Figure(go.Bar(x=[p["prompt_id"] for p in prompts], y=[p["success_rate"] for p in prompts]))
    per_prompt.update_layout(
        xaxis={"title": "prompt", "type": "category"}, yaxis={"title": "success rate", "range": [0, 1.05]}
    )

    tokens = go.Figure()
    for col in ("prompt_tokens", "completion_tokens"):
        tokens.add_trace(go.Histogram(x=frame[col].drop_nulls().to_list(), name=col.split("_")[0], opacity=0.7))
    tokens.update_layout(barmode="overlay", xaxis_title="tokens", yaxis_title="rollouts")

    latency = go.Figure(go.Histogram(x=frame["latency_s"].drop_nulls().to_list(), name="latency"))
    latency.update_layout(xaxis_title="seconds", yaxis_title="rollouts")

    tools = go.Figure(go.Bar(x=[r["tool_calls"] for r in by_tools], y=[r["mean_reward"] for r in by_tools]))
    tools.update_layout(xaxis_title="tool calls", yaxis_title="mean reward")

    figures = [
        (reward, "reward", "Reward distribution"),
        (curve, "pass-maj-at-k", "pass@k and maj@k"),
        (per_prompt, "prompt-success", "Success rate per prompt"),
        (tokens, "tokens", "Tokens per rollout"),
        (latency, "latency", "Latency per rollout (s)"),
        (tools, "reward-by-tool-calls", "Mean reward by tool-call count"),
    ]
    return [_fig_html(fig, f"chart-{slug}-{suffix}", title) for fig, suffix, title in figures]


def _completion_cell(completion: str | None, error: str | None) -> str:
    """First chars of the completion, the whole text in a <details>; escaped."""
    text = completion if completion is not None else (f"error: {error}" if error else "")
    if len(text) <= COMPLETION_PREVIEW_CHARS:
        return f"<pre>{html.escape(text)}</pre>" if text else ""
    preview = html.escape(text[:COMPLETION_PREVIEW_CHARS]) + "…"
    return f"<details><summary>{preview}</summary><pre>{html.escape(text)}</pre></details>"


def rollouts_html(frame: pl.DataFrame, limit: int = MAX_ROLLOUT_ROWS) -> str:
    """A compact table of one benchmark's rollouts (first `limit` by prompt and repeat)."""
    header = ["prompt", "repeat", "reward", "success", "parsed answer", "reference", "finish", "completion"]
    rows = []
    for r in frame.head(limit).iter_rows(named=True):
        mark = '<span class="ok">✓</span>' if r["success"] else '<span class="fail">✗</span>'
        cells = [
            html.escape(str(r["prompt_id"])),
            str(r["repeat"]),
            fmt_num(r["reward"]),
            mark,
            html.escape(_clip(r["parsed_answer"], 80)),
            html.escape(_clip(r["reference"], 80)),
            html.escape(r["finish_reason"] or "–"),
            _completion_cell(r["completion"], r["error"]),
        ]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in header)
    note = f"<p><em>First {limit:,} of {frame.height:,} rollouts; all are in the run's parquet files.</em></p>"
    return (note if frame.height > limit else "") + (
        f'<table class="rollouts"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


def render_html(metrics: dict[str, Any], run_info: dict[str, Any], frame: pl.DataFrame) -> str:
    """The whole self-contained page: plotly.js inlined once in <head>, then tables and chart divs."""
    title = html.escape(_title(run_info))
    body = [f"<h1>{title}</h1>", "<h2>Headline</h2>", html_table(headline_table(metrics))]
    if not metrics.get("benchmarks"):
        body.append("<p><em>No rollouts were found for this run.</em></p>")
    body.append(
        '<div class="tables">' + "".join(_html_section(t, tab, 2) for t, tab in run_tables(run_info)) + "</div>"
    )
    body.append(f"<details><summary>Config</summary><pre>{html.escape(_config_json(run_info))}</pre></details>")
    for name, bm in metrics.get("benchmarks", {}).items():
        rows = _effective_rewards(frame.filter(pl.col("benchmark") == name))
        tables = benchmark_tables(bm, prompt_limit=None)
        body += [
            f'<h2 id="{_slug(name)}">Benchmark: {html.escape(name)}</h2>',
            '<div class="tables">' + "".join(_html_section(t, tab) for t, tab in tables[:-1]) + "</div>",
            '<div class="charts">' + "".join(benchmark_charts(name, bm, rows)) + "</div>",
            f"<details><summary>{html.escape(tables[-1][0])}</summary>{html_table(tables[-1][1])}</details>",
            "<h3>Rollouts</h3>",
            rollouts_html(rows),
        ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title><style>{_CSS}</style>"
        f'<script type="text/javascript">{get_plotlyjs()}</script></head>'
        f"<body>{''.join(body)}</body></html>\n"
    )


# ---------------------------------------------------------------------------------------------
# Writing and publishing


def write_report(
    run_dir: str,
    metrics: dict[str, Any],
    run_info: dict[str, Any],
    files: list[str],
    storage_options: dict[str, Any] | None = None,
) -> dict[str, str]:
    """Write metrics.json, report.md and report.html into run_dir (atomically) and return their URLs."""
    run_info = {**run_info, "config": redact(run_info.get("config") or {})}
    frame = load_rollouts_frame(files, storage_options, _ROLLOUT_COLUMNS)
    urls = {kind: store.join(run_dir, name) for kind, name in REPORT_FILES.items()}
    payload = json.dumps({**metrics, "run_info": run_info}, indent=2, default=str)
    store.write_text(urls["metrics"], payload + "\n", storage_options)
    store.write_text(urls["markdown"], render_markdown(metrics, run_info), storage_options)
    store.write_text(urls["html"], render_html(metrics, run_info, frame), storage_options)
    return urls


def browser_url(url: str) -> str:
    """A link a browser can follow: local paths become file:// URLs, others stay as they are."""
    if "://" in url:
        return url
    return Path(url).resolve().as_uri()


def artifact_key(text: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    return _slug(text) or DEFAULT_ARTIFACT_KEY


def artifact_markdown(urls: dict[str, str], metrics: dict[str, Any], run_info: dict[str, Any]) -> str:
    lines = [
        f"## {_md_cell(_title(run_info))}",
        "",
        md_table(headline_table(metrics)),
        "",
        f"Full report: [{_md_cell(urls['html'])}]({browser_url(urls['html'])})",
        f"metrics: `{urls['metrics']}` · markdown: `{urls['markdown']}`",
    ]
    return "\n".join(lines) + "\n"


def publish_artifacts(
    urls: dict[str, str],
    metrics: dict[str, Any],
    run_info: dict[str, Any],
    key: str = DEFAULT_ARTIFACT_KEY,
) -> None:
    """Attach the headline (markdown) and a link to the HTML report to the current Prefect run."""
    from prefect.artifacts import create_link_artifact, create_markdown_artifact
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
        markdown=artifact_markdown(urls, metrics, run_info), key=key, description=description, _sync=True
    )
    create_link_artifact(
        link=browser_url(urls["html"]),
        link_text="HTML report",
        key=f"{key}-html",
        description=description,
        _sync=True,
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
) -> dict[str, str]:
    """Write the reports and attach them to the flow run as artifacts."""
    urls = write_report(run_dir, metrics, run_info, files, storage_options)
    publish_artifacts(urls, metrics, run_info)
    get_run_logger().info("report written: %s", urls["html"])
    return urls
