"""The rollout browser's data: the rollouts a report embeds, their table rows and transcript JSON.

The browser holds at most `MAX_ROLLOUT_ROWS` rollouts per benchmark (the first by prompt id and
repeat), each transcript clipped to `MAX_TRANSCRIPT_CHARS` and all of them to `MAX_BROWSER_BYTES` per
benchmark; a note says when rows were left out (the parquet files hold every rollout). So a
1,000,000-rollout run still gives a page of a few tens of MB at most.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from core.schema import BenchmarkMetrics
from core.store import Store
from tasks.analysis.frame import load_rollouts_frame
from tasks.reporting.format import clip, fmt_num, slug
from tasks.reporting.headline import uses_tools

MAX_ROLLOUT_ROWS = 2000  # rollouts per benchmark in the HTML browser (all are in the parquet files)
MAX_TRANSCRIPT_CHARS = 20_000  # per rollout in the browser
MAX_BROWSER_BYTES = 8_000_000  # transcript data per benchmark in the browser

COLUMNS = [
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


@dataclass(frozen=True)
class BrowserRow:
    index: int
    prompt_id: str
    repeat: int
    result: str  # success | failure | error
    reward: str  # exact value (repr), for the reward filters
    reward_text: str
    parsed_answer: str
    reference: str
    finish_reason: str
    tool_calls: int
    tokens: str
    latency: str


@dataclass(frozen=True)
class BrowserView:
    key: str  # the benchmark's slug: element ids
    tools: bool  # whether the tool-calls column is shown
    rows: list[BrowserRow]
    details: list[dict[str, Any]]  # the transcript panel's data, one per row
    notes: list[str] = field(default_factory=list)


def load_rollouts(files: list[str], store: Store, dedupe: bool) -> pl.DataFrame:
    """The rollouts every benchmark's browser shows (the first MAX_ROLLOUT_ROWS of each)."""
    return load_rollouts_frame(files, store, COLUMNS, per_benchmark_limit=MAX_ROLLOUT_ROWS, dedupe=dedupe)


def _result(row: dict[str, Any]) -> str:
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


def browser_view(name: str, bm: BenchmarkMetrics, frame: pl.DataFrame) -> BrowserView:
    """The browser of one benchmark from its rows of `frame` (already capped and ordered)."""
    rows, details, budget, omitted = [], [], MAX_BROWSER_BYTES, 0
    for i, r in enumerate(frame.filter(pl.col("benchmark") == name).iter_rows(named=True)):
        result = _result(r)
        reward = 0.0 if result == "error" else float(r["reward"])
        rows.append(
            BrowserRow(
                index=i,
                prompt_id=str(r["prompt_id"]),
                repeat=r["repeat"],
                result=result,
                reward=repr(reward),
                reward_text=fmt_num(reward),
                parsed_answer=clip(r["parsed_answer"], 60),
                reference=clip(r["reference"], 60),
                finish_reason=r["finish_reason"] or "–",
                tool_calls=r["tool_calls"],
                tokens=fmt_num(r["completion_tokens"]),
                latency=fmt_num(r["latency_s"], 2),
            )
        )
        detail, size = _detail(r)
        if size > budget:
            detail, omitted = {"omitted": "the page's transcript budget is spent; see the parquet files"}, omitted + 1
        else:
            budget -= size
        details.append(detail)
    notes = []
    if bm.n_rollouts > len(rows):
        notes.append(
            f"First {len(rows):,} of {bm.n_rollouts:,} rollouts (by prompt id and repeat); "
            "all are in the run's parquet files."
        )
    if omitted:
        notes.append(f"{omitted:,} transcripts are not embedded (page size budget).")
    return BrowserView(key=slug(name), tools=uses_tools(bm), rows=rows, details=details, notes=notes)
