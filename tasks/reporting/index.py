"""The run index: `<store>/index.json` (every run, newest first) and a browsable `<store>/index.html`.

Runs live under `<store>/runs/<run_id>/`. Each finished run adds itself in two steps:

1. it writes its own entry, `<store>/index/entries/<run_id>.json` (one atomic write/PUT), then
2. it rebuilds index.json and index.html from *all* entry files (list + read), writing each
   atomically, then lists the entries again and rebuilds once more if the set changed meanwhile.

Why: object stores have no locks, but every entry is its own object, so no run can overwrite
another's. Two runs finishing together both write their entries before rebuilding; whichever
index write lands last was built from a listing taken after the other's entry existed (or is
followed by that run's re-check and another rebuild), so the final index.json holds both. On a
local store the rebuild also runs under a `filelock`, so it is strictly serialised; it is the same
code path otherwise. A store that cannot be written fails at step 1 with a StoreError naming the URL,
before anything shared was touched; index.json is only ever replaced by a complete file.

Links in index.html are relative (`runs/<id>/report.html`), so the page works from a local folder,
from `python -m tasks.reporting.serve`, and from an S3 static-website browse.
"""

from __future__ import annotations

import contextlib
import html
import json
import logging
import os
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from filelock import FileLock

from core import store
from tasks.reporting.report import error_bars, fig_html, fmt_ci, fmt_num, fmt_rate, headline_rows, html_page, slug

logger = logging.getLogger(__name__)

ENTRIES_DIR = ("index", "entries")
INDEX_JSON = "index.json"
INDEX_HTML = "index.html"
MAX_REBUILDS = 5
MAX_TREND_CHARTS = 40
LOCK_TIMEOUT_S = 120.0
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")


# ---------------------------------------------------------------------------------------------
# Entries


def relative_to_store(url: str, store_url: str) -> str:
    """`url` relative to the store root ('runs/<id>/report.html'), or unchanged if outside it."""

    def norm(u: str) -> str:
        u = u[len("file://") :] if u.startswith("file://") else u
        return (u if "://" in u else os.path.abspath(u)).rstrip("/")

    root, target = norm(store_url), norm(url)
    if target.startswith(root + "/"):
        return target[len(root) + 1 :].replace(os.sep, "/")
    return url


def index_entry(
    run_info: dict[str, Any], metrics: dict[str, Any], report_urls: dict[str, str], store_url: str
) -> dict[str, Any]:
    """The index's record of one run: identity, timing, headline metrics and report paths."""
    headline = {}
    for row in headline_rows(metrics):
        name = row.pop("benchmark")
        headline[name] = {k: list(v) if isinstance(v, tuple) else v for k, v in row.items()}
    return {
        "run_id": run_info.get("run_id"),
        "run_name": run_info.get("run_name"),
        "deployment": run_info.get("deployment"),
        "flow_run_id": run_info.get("flow_run_id"),
        "model": run_info.get("model"),
        "model_fingerprint": run_info.get("model_fingerprint"),
        "benchmarks": sorted(metrics.get("benchmarks", {})),
        "started_at": run_info.get("started_at"),
        "finished_at": run_info.get("finished_at"),
        "total_rollouts": metrics.get("total_rollouts", 0),
        "headline": headline,
        "report": relative_to_store(report_urls["html"], store_url),
        "metrics": relative_to_store(report_urls["metrics"], store_url),
        "markdown": relative_to_store(report_urls["markdown"], store_url),
    }


def run_time(entry: dict[str, Any]) -> datetime:
    """When a run finished (or started), as an aware datetime; naive timestamps are taken as UTC."""
    for key in ("finished_at", "started_at"):
        try:
            value = datetime.fromisoformat(str(entry.get(key)).replace("Z", "+00:00"))
        except ValueError:
            continue
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.min.replace(tzinfo=UTC)


def _entries_url(store_url: str) -> str:
    return store.join(store_url, *ENTRIES_DIR)


def _check_run_id(run_id: Any) -> str:
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        raise ValueError(f"run id {run_id!r} cannot name an index entry (letters, digits, '.', '_', '-')")
    return run_id


def _list_entries(store_url: str, storage_options: dict[str, Any] | None) -> list[str]:
    """Paths (in the store's filesystem) of every entry file; listings are never served from cache."""
    fs, path = store.filesystem(_entries_url(store_url), storage_options)
    fs.invalidate_cache(path)
    try:
        names = fs.ls(path, detail=False)
    except FileNotFoundError:
        return []
    return sorted(p for p in names if p.endswith(".json") and not os.path.basename(p).startswith("."))


def read_entries(store_url: str, storage_options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every run's entry file, newest first (the source of truth that index.json is built from)."""
    fs, _ = store.filesystem(_entries_url(store_url), storage_options)
    paths = _list_entries(store_url, storage_options)
    blobs = fs.cat(paths) if paths else {}  # one concurrent fetch on object stores
    entries = []
    for path in paths:
        try:
            entries.append(json.loads(blobs[path]))
        except (KeyError, ValueError) as exc:
            logger.warning("skipping unreadable index entry %s: %s", path, exc)
    return sort_entries(entries)


def sort_entries(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(entries, key=lambda e: (run_time(e), str(e.get("run_id"))), reverse=True)


def read_index(store_url: str, storage_options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """index.json's entries, newest first; built from the entry files when there is no index.json yet."""
    url = store.join(store_url, INDEX_JSON)
    try:
        data = json.loads(store.read_text(url, storage_options))
    except FileNotFoundError:
        return read_entries(store_url, storage_options)
    return sort_entries(data if isinstance(data, list) else data.get("runs", []))


# ---------------------------------------------------------------------------------------------
# Updating


@contextlib.contextmanager
def _index_lock(store_url: str) -> Iterator[None]:
    """A file lock for local stores (object stores rely on the entries-then-rebuild scheme alone)."""
    if not store.is_local(store_url):
        yield
        return
    root = store_url[len("file://") :] if store_url.startswith("file://") else store_url
    directory = os.path.join(root, "index")
    os.makedirs(directory, exist_ok=True)
    with FileLock(os.path.join(directory, ".lock"), timeout=LOCK_TIMEOUT_S):
        yield


def _write_index(store_url: str, entries: list[dict[str, Any]], storage_options: dict[str, Any] | None) -> None:
    """index.json (a plain list of entries, newest first), then index.html; both are rendered before
    either is written, so a rendering failure leaves the previous index whole."""
    page = render_index_html(entries)
    text = json.dumps(entries, indent=2, default=str) + "\n"
    store.write_text(store.join(store_url, INDEX_JSON), text, storage_options)
    store.write_text(store.join(store_url, INDEX_HTML), page, storage_options)


def rebuild_index(store_url: str, storage_options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Rewrite index.json/index.html from all entry files until a re-listing shows no new entry."""
    entries: list[dict[str, Any]] = []
    for _ in range(MAX_REBUILDS):
        entries = read_entries(store_url, storage_options)
        _write_index(store_url, entries, storage_options)
        after = {os.path.basename(p)[: -len(".json")] for p in _list_entries(store_url, storage_options)}
        if after == {e.get("run_id") for e in entries}:
            break
        logger.info("run index changed during the rebuild (%d -> %d entries); rebuilding", len(entries), len(after))
    return entries


def update_index(
    store_url: str, entry: dict[str, Any], storage_options: dict[str, Any] | None = None
) -> dict[str, str]:
    """Add (or replace) one run's entry and rebuild index.json/index.html; returns their URLs.

    Safe when several runs finish at once (see the module docstring). Raises StoreError, naming the
    URL, when the store cannot be read or written.
    """
    run_id = _check_run_id(entry.get("run_id"))
    entry_url = store.join(_entries_url(store_url), f"{run_id}.json")
    try:
        store.write_text(entry_url, json.dumps(entry, indent=2, default=str) + "\n", storage_options)
    except Exception as exc:
        raise store.StoreError(
            f"cannot add run {run_id} to the run index: writing {entry_url} failed ({type(exc).__name__}: {exc}); "
            "check the store URL and credentials"
        ) from exc
    try:
        with _index_lock(store_url):
            rebuild_index(store_url, storage_options)
    except Exception as exc:
        raise store.StoreError(
            f"cannot rebuild the run index at {store.join(store_url, INDEX_JSON)} ({type(exc).__name__}: {exc}); "
            f"the run's entry {entry_url} is saved and the next run's update will include it"
        ) from exc
    return {"index_json": store.join(store_url, INDEX_JSON), "index_html": store.join(store_url, INDEX_HTML)}


# ---------------------------------------------------------------------------------------------
# index.html


_INDEX_JS = """
var filter = document.getElementById('run-filter');
if (filter) filter.addEventListener('input', function () {
  var text = filter.value.trim().toLowerCase(), shown = 0, rows = document.querySelectorAll('#runs tbody tr');
  rows.forEach(function (tr) {
    var ok = !text || tr.textContent.toLowerCase().indexOf(text) >= 0;
    tr.hidden = !ok;
    if (ok) shown++;
  });
  document.getElementById('run-count').textContent = shown + ' of ' + rows.length + ' rows shown';
});
"""


def group_of(entry: dict[str, Any]) -> str:
    """What a run is compared with over time: its deployment, else its run name."""
    if entry.get("deployment"):
        return f"deployment: {entry['deployment']}"
    if entry.get("run_name"):
        return f"run name: {entry['run_name']}"
    return "(no deployment or run name)"


def _href(report: str) -> str:
    """Reports inside the store are relative links; a report elsewhere on this disk gets a file:// URI."""
    if report and "://" not in report and os.path.isabs(report):
        return Path(report).as_uri()
    return report


def _runs_table(entries: list[dict[str, Any]]) -> str:
    header = [
        "finished", "run", "group", "model", "benchmark", "prompts × n", "accuracy", "95% CI",
        "pass@1", "pass@n", "maj@n", "mean reward", "95% CI", "report",
    ]  # fmt: skip
    rows = []
    for entry in entries:
        finished = str(entry.get("finished_at") or "–")[:19].replace("T", " ")
        report = _href(entry.get("report") or "")
        link = f'<a href="{html.escape(report)}">report</a>' if report else "–"
        label = entry.get("run_name") or entry.get("run_id") or "?"
        run_id = str(entry.get("run_id"))
        run = f'<a href="{html.escape(report)}">{html.escape(str(label))}</a>'
        if label != run_id:
            run += f"<br><small>{html.escape(run_id)}</small>"
        benches = entry.get("headline") or {"–": {}}
        for name, h in benches.items():
            ci = h.get("accuracy_ci") or (None, None)
            rci = h.get("mean_reward_ci") or (None, None)
            cells = [
                html.escape(finished),
                run,
                html.escape(group_of(entry)),
                html.escape(str(entry.get("model") or "–")),
                html.escape(name),
                f"{fmt_num(h.get('prompts'))} × {fmt_num(h.get('n'))}" if h else "–",
                fmt_rate(h.get("accuracy")),
                fmt_ci(*ci),
                fmt_rate(h.get("pass@1")),
                fmt_rate(h.get("pass@n")),
                fmt_rate(h.get("maj@n")),
                fmt_num(h.get("mean_reward")),
                fmt_ci(*rci, rate=False),
                link,
            ]
            rows.append(
                f'<tr data-run="{html.escape(str(entry.get("run_id")))}">'
                + "".join(f"<td>{c}</td>" for c in cells)
                + "</tr>"
            )
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    return f'<table id="runs"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def trend_charts(entries: list[dict[str, Any]], limit: int = MAX_TREND_CHARTS) -> list[str]:
    """Accuracy (with its CI) and mean reward over time, one chart per (group, benchmark)."""
    series: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for entry in sorted(entries, key=run_time):
        for name, h in (entry.get("headline") or {}).items():
            series.setdefault((group_of(entry), name), []).append({"entry": entry, **h})
    latest = sorted(series, key=lambda key: run_time(series[key][-1]["entry"]), reverse=True)[:limit]
    charts = []
    for group, bench in latest:
        points = series[(group, bench)]
        when = [str(p["entry"].get("finished_at") or p["entry"].get("started_at")) for p in points]
        labels = [f"{p['entry'].get('run_id')} · {p['entry'].get('model')}" for p in points]
        acc = [p.get("accuracy") for p in points]
        cis = [p.get("accuracy_ci") or (None, None) for p in points]
        rewards = [p.get("mean_reward") for p in points]
        fig = go.Figure()
        fig.add_trace(
            go.Scatter(
                x=when,
                y=acc,
                text=labels,
                mode="lines+markers",
                name="accuracy",
                error_y=error_bars(acc, cis),
                hovertemplate="%{text}<br>accuracy %{y:.2%}<extra></extra>",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=when,
                y=rewards,
                text=labels,
                mode="lines+markers",
                name="mean reward",
                yaxis="y2",
                line={"dash": "dot"},
                hovertemplate="%{text}<br>mean reward %{y:.3f}<extra></extra>",
            )
        )
        fig.update_layout(
            xaxis={"title": "finished", "type": "date"},
            yaxis={"title": "accuracy", "tickformat": ".0%", "rangemode": "tozero"},
            yaxis2={"title": "mean reward", "overlaying": "y", "side": "right"},
            legend={"orientation": "h", "y": -0.25},
        )
        charts.append(fig_html(fig, f"trend-{slug(group)}-{slug(bench)}", f"{bench} — {group}"))
    return charts


def render_index_html(entries: list[dict[str, Any]]) -> str:
    """The store's front page: every run (newest first, linked to its report) and trend charts."""
    runs = len(entries)
    body = [
        "<h1>evalflow runs</h1>",
        f"<p>{runs:,} run{'s' if runs != 1 else ''}; newest first. Each run's report, metrics and rollouts "
        "live under <code>runs/&lt;run id&gt;/</code>.</p>",
    ]
    charts = trend_charts(entries)
    if charts:
        body += ["<h2>Trends</h2>", '<div class="charts">' + "".join(charts) + "</div>"]
    body += [
        "<h2>Runs</h2>",
        '<div class="filters"><label>filter <input type="search" id="run-filter" placeholder="model, run, benchmark…">'
        '</label><span id="run-count" class="muted"></span></div>',
        _runs_table(entries),
    ]
    return html_page("evalflow runs", "".join(body), _INDEX_JS)
