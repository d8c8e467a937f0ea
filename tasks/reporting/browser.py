"""The rollout browser: a page of sampled rollouts (`rollouts.html` beside report.html) and the report's link to it.

The page holds a stratified sample (tasks/reporting/browser_sample.py: up to `MAX_SAMPLE` rollouts per
benchmark over all its prompts, errors and extreme rewards first) as JSON in a non-executed script tag;
static/browser.js filters, sorts, searches and shows a transcript as a chat, all in the page. Texts are
stored once however many rollouts share them (a system prompt, a question asked 100 times), each clipped
to `MAX_TEXT_CHARS`, and each benchmark's rows stop at `MAX_BENCHMARK_BYTES`, so the page stays a few
MB at most whatever the run's size (the parquet files hold every rollout in full).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

import polars as pl

from core.metrics_doc import BenchmarkMetrics, RunMetrics
from core.store import Store, join
from tasks.reporting.browser_sample import sample_rollouts
from tasks.reporting.format import slug
from tasks.reporting.render import render_html

BROWSER_FILE = "rollouts.html"  # beside report.html, linked from it
MAX_SAMPLE = 1500  # rollouts per benchmark on the page
MAX_TEXT_CHARS = 4000  # per message text (and per info dump)
MAX_BENCHMARK_BYTES = 3_000_000  # JSON of one benchmark's rows and new texts; later rows are left out

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
    "reasoning",
    "ended_in_reasoning",
    "reasoning_tokens",
    "messages",
    "transcript",
    "info",
    "completion_tokens",
    "turns",
    "latency_s",
    "tool_calls",
]


def load_rollouts(files: list[str], store: Store, dedupe: bool) -> pl.DataFrame:
    """The browser's sample of a run's rollouts (see browser_sample), in priority order per benchmark."""
    return sample_rollouts(files, store, COLUMNS, MAX_SAMPLE, dedupe=dedupe)


@dataclass(frozen=True)
class BrowserView:
    """The report's link to one benchmark's rollouts on the browser page."""

    key: str
    href: str  # relative to report.html
    sampled: int
    rollouts: int
    prompts_sampled: int
    prompts: int


def browser_view(name: str, bm: BenchmarkMetrics, frame: pl.DataFrame) -> BrowserView:
    """The link card of benchmark `name` in the report, from the sample (`load_rollouts`)."""
    rows = frame.filter(pl.col("benchmark") == name)
    return BrowserView(
        key=slug(name),
        href=f"{BROWSER_FILE}#b={slug(name)}",
        sampled=rows.height,
        rollouts=bm.n_rollouts,
        prompts_sampled=rows["prompt_id"].n_unique(),
        prompts=bm.n_prompts,
    )


class _Texts:
    """Every distinct text of the page once; rows refer to texts by index."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.index: dict[str, int] = {}

    def add(self, text: str | None) -> int | None:
        if text is None:
            return None
        if len(text) > MAX_TEXT_CHARS:
            text = text[:MAX_TEXT_CHARS] + f"\n… clipped ({len(text):,} characters; the parquet files hold all)"
        found = self.index.get(text)
        if found is None:
            found = self.index[text] = len(self.items)
            self.items.append(text)
        return found


def _text(content: Any) -> str | None:
    """A message's content as text: strings as they are, OpenAI content parts joined, anything else as JSON."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        return "\n".join(str(p.get("text", json.dumps(p, ensure_ascii=False))) for p in content)
    return json.dumps(content, ensure_ascii=False)


class BrowserCall(TypedDict):
    """A tool call as static/browser.js shows it (`args`: the index of its arguments' text once added)."""

    id: str | None
    name: str
    args: Any


class BrowserTurn(TypedDict, total=False):
    """One turn of a conversation: `role`, `x` (the index of its text), `k` (its reasoning's, shown folded above
    it), tool `calls`, the answered call `id`."""

    role: str
    x: int | None
    k: int | None
    calls: list[BrowserCall]
    id: str


class BrowserRow(TypedDict):
    """One sampled rollout, keyed as static/browser.js reads it (short keys keep the page small): b benchmark
    index, p prompt id, r repeat, o outcome (correct, wrong, truncated while reasoning, error), w reward, t
    completion tokens, k reasoning tokens, n turns, c tool calls, a parsed
    answer, ref reference, f finish reason, l latency, e error text, m turns, i info text, fb Tetris' final
    board text."""

    b: int
    p: str
    r: int
    o: str
    w: float
    t: int | None
    k: int | None
    n: int
    c: int
    a: str | None
    ref: str | None
    f: str | None
    l: float | None  # noqa: E741 - the page's key
    e: int | None
    m: list[BrowserTurn]
    i: int | None
    fb: NotRequired[int | None]  # only where the rollout's info has a final board


class BrowserBenchmark(TypedDict):
    name: str
    key: str
    rollouts: int
    notes: list[str]


class BrowserData(TypedDict):
    """What the page embeds for static/browser.js: benchmark keys, rows, and the texts rows point into."""

    benchmarks: list[str]
    rows: list[BrowserRow]
    texts: list[str]


def _call(call: Any) -> BrowserCall:
    fn = call.get("function") if isinstance(call, dict) else None
    fn = fn if isinstance(fn, dict) else {}
    args = fn.get("arguments")
    return {
        "id": call.get("id") if isinstance(call, dict) else None,
        "name": str(fn.get("name") or "?"),
        "args": args if isinstance(args, str) or args is None else json.dumps(args, ensure_ascii=False),
    }


def _turn(message: Any, texts: _Texts) -> BrowserTurn:
    if not isinstance(message, dict):
        return {"role": "?", "x": texts.add(_text(message))}
    turn: BrowserTurn = {"role": str(message.get("role") or "?"), "x": texts.add(_text(message.get("content")))}
    if message.get("tool_calls"):
        turn["calls"] = [_call(c) for c in message["tool_calls"]]
        for call in turn["calls"]:
            call["args"] = texts.add(call["args"])
    if message.get("tool_call_id"):
        turn["id"] = str(message["tool_call_id"])
    if isinstance(message.get("reasoning"), str):
        turn["k"] = texts.add(message["reasoning"])
    return turn


def _loads(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _turns(row: dict[str, Any], texts: _Texts) -> list[BrowserTurn]:
    """The conversation as turns: the whole transcript when there is one, else the messages sent plus the
    completion; a plain-completion prompt (a JSON string) is one `prompt` turn and the completion a
    `completion` turn."""
    transcript, messages = _loads(row["transcript"]), _loads(row["messages"])
    if isinstance(transcript, list):
        return [_turn(m, texts) for m in transcript]
    if isinstance(messages, list):
        turns: list[BrowserTurn] = [_turn(m, texts) for m in messages]
        role = "assistant"
    else:
        turns = [] if messages is None else [{"role": "prompt", "x": texts.add(_text(messages))}]
        role = "completion"
    if row["completion"] is not None:
        turn: BrowserTurn = {"role": role, "x": texts.add(row["completion"])}
        if row.get("reasoning") is not None:
            turn["k"] = texts.add(row["reasoning"])
        turns.append(turn)
    return turns


def _outcome(row: dict[str, Any]) -> str:
    if row["error"] is not None:
        return "error"
    if row.get("ended_in_reasoning"):
        return "truncated"
    return "correct" if row["success"] else "wrong"


def _row(row: dict[str, Any], bench: int, texts: _Texts) -> BrowserRow:
    outcome = _outcome(row)
    info = _loads(row["info"])
    out: BrowserRow = {
        "b": bench,
        "p": str(row["prompt_id"]),
        "r": row["repeat"],
        "o": outcome,
        "w": 0.0 if outcome == "error" else row["reward"],  # as the analysis counts it
        "t": row["completion_tokens"],
        "k": row.get("reasoning_tokens"),
        "n": row["turns"],
        "c": row["tool_calls"],
        "a": row["parsed_answer"],
        "ref": row["reference"],
        "f": row["finish_reason"],
        "l": None if row["latency_s"] is None else round(row["latency_s"], 3),
        "e": texts.add(row["error"]),
        "m": _turns(row, texts),
        "i": texts.add(json.dumps(info, ensure_ascii=False, indent=1) if info else None),
    }
    if isinstance(info, dict) and isinstance(info.get("final_board"), str):
        out["fb"] = texts.add(info["final_board"])
    return out


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":")))


@dataclass(frozen=True)
class BrowserPage:
    title: str
    report_href: str
    benchmarks: list[BrowserBenchmark]  # in the report's order
    data: BrowserData = field(repr=False)


def browser_page(title: str, run: RunMetrics, frame: pl.DataFrame) -> BrowserPage:
    """The page's view: every benchmark's sampled rows, in priority order until its byte budget is spent."""
    texts, rows, benchmarks = _Texts(), list[BrowserRow](), list[BrowserBenchmark]()
    for b, (name, bm) in enumerate(run.benchmarks.items()):
        budget, kept, left_out, prompts = MAX_BENCHMARK_BYTES, 0, 0, set()
        for r in frame.filter(pl.col("benchmark") == name).iter_rows(named=True):
            if budget <= 0:
                left_out += 1
                continue
            before = len(texts.items)
            row = _row(r, b, texts)
            budget -= _size(row) + sum(len(t) + 3 for t in texts.items[before:])
            rows.append(row)
            kept += 1
            prompts.add(row["p"])
        notes = [
            f"{kept:,} of {bm.n_rollouts:,} rollouts, {len(prompts):,} of {bm.n_prompts:,} prompts "
            "(a deterministic sample: errors and the highest and lowest rewards first, then rounds over all "
            "prompts); every rollout is in the run's parquet files."
        ]
        if left_out:
            notes.append(f"{left_out:,} more sampled rollouts left out: the page's size budget is spent.")
        benchmarks.append({"name": name, "key": slug(name), "rollouts": kept, "notes": notes})
    data: BrowserData = {"benchmarks": [b["key"] for b in benchmarks], "rows": rows, "texts": texts.items}
    return BrowserPage(title=f"Rollouts: {title}", report_href="report.html", benchmarks=benchmarks, data=data)


def render_browser(title: str, run: RunMetrics, frame: pl.DataFrame) -> str:
    """The browser page's HTML (self-contained: data, CSS and JS inline; no plotly, no network)."""
    return render_html("browser_page.html.j2", view=browser_page(title, run, frame))


def write_browser(run_dir: str, title: str, run: RunMetrics, frame: pl.DataFrame, store: Store) -> str:
    """Write `rollouts.html` into run_dir (atomically, through the store) and return its URL."""
    url = join(run_dir, BROWSER_FILE)
    store.write_text(url, render_browser(title, run, frame))
    return url
