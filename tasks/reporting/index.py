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
from `evalflow reports serve`, and from an S3 static-website browse.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, cast

from filelock import FileLock

from core.record import Comparison, IndexEntry, RunInfo
from core.store import Store, StoreError, join
from core.training_steps import config_key
from tasks.reporting.format import relative_to_store
from tasks.reporting.headline import Metrics, as_run_metrics, headline_rows
from tasks.reporting.index_page import INDEX_HTML, render_index_html

logger = logging.getLogger(__name__)

ENTRIES_DIR = ("index", "entries")
INDEX_JSON = "index.json"
MAX_REBUILDS = 5
LOCK_TIMEOUT_S = 120.0
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")


# ---------------------------------------------------------------------------------------------
# Entries


def index_entry(
    run_info: RunInfo,
    metrics: Metrics,
    report_urls: dict[str, str],
    store_url: str,
    comparison: Comparison | None = None,
) -> IndexEntry:
    """The index's record of one run: identity, timing, headline metrics, report paths and, where it was compared
    with a baseline, that run's id, the regressions flagged and the gate's verdict."""
    run = as_run_metrics(metrics)
    headline = {}
    for row in headline_rows(run):
        name = row.pop("benchmark")
        headline[name] = {k: list(v) if isinstance(v, tuple) else v for k, v in row.items()}
    return IndexEntry(
        run_id=run_info.run_id,
        run_name=run_info.run_name,
        status=run_info.status.state,
        deployment=run_info.deployment,
        flow_run_id=run_info.flow_run_id,
        model=run_info.model,
        model_fingerprint=run_info.model_fingerprint,
        training_run=run_info.training_run,
        step=run_info.step,
        config_key=config_key(run_info.config) if run_info.config else None,
        benchmarks=sorted(run.benchmarks),
        started_at=run_info.started_at,
        finished_at=run_info.finished_at,
        total_rollouts=run.total_rollouts,
        headline=headline,
        report=relative_to_store(report_urls["html"], store_url),
        metrics=relative_to_store(report_urls["metrics"], store_url),
        markdown=relative_to_store(report_urls["markdown"], store_url),
        baseline_run_id=comparison.baseline.run_id if comparison and comparison.baseline else None,
        regressions=list(comparison.regressions) if comparison else [],
        gate_passed=comparison.gate.passed if comparison and comparison.gate else None,
    )


def run_time(entry: IndexEntry) -> datetime:
    """When a run finished (or started), as an aware datetime; naive timestamps are taken as UTC."""
    for stamp in (entry.finished_at, entry.started_at):
        try:
            value = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
        except ValueError:
            continue
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.min.replace(tzinfo=UTC)


def _entries_url(store: Store) -> str:
    return store.path(*ENTRIES_DIR)


def _check_run_id(run_id: Any) -> str:
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        raise ValueError(f"run id {run_id!r} cannot name an index entry (letters, digits, '.', '_', '-')")
    return run_id


def _list_entries(store: Store) -> list[str]:
    """Paths (in the store's filesystem) of every entry file; listings are never served from cache."""
    fs, path = store.filesystem(_entries_url(store))
    fs.invalidate_cache(path)
    try:
        names = fs.ls(path, detail=False)
    except FileNotFoundError:
        return []
    return sorted(p for p in names if p.endswith(".json") and not os.path.basename(p).startswith("."))


def _entry(blob: bytes | str) -> IndexEntry:
    return IndexEntry.model_validate(json.loads(blob))


def read_entries(store: Store) -> list[IndexEntry]:
    """Every run's entry file, newest first (the source of truth that index.json is built from)."""
    fs, _ = store.filesystem(_entries_url(store))
    paths = _list_entries(store)
    # one concurrent fetch on object stores; a list of paths gives path -> content (fsspec is untyped)
    blobs = cast(dict[str, bytes], fs.cat(paths)) if paths else {}
    entries = []
    for path in paths:
        try:
            entries.append(_entry(blobs[path]))
        except (KeyError, ValueError) as exc:
            logger.warning("skipping unreadable index entry %s: %s", path, exc)
    return sort_entries(entries)


def sort_entries(entries: list[IndexEntry]) -> list[IndexEntry]:
    return sorted(entries, key=lambda e: (run_time(e), e.run_id), reverse=True)


# ---------------------------------------------------------------------------------------------
# Updating


@contextlib.contextmanager
def _index_lock(store: Store) -> Iterator[None]:
    """A file lock for local stores (object stores rely on the entries-then-rebuild scheme alone)."""
    if not store.is_local:
        yield
        return
    directory = os.path.join(store.local_path, "index")
    os.makedirs(directory, exist_ok=True)
    with FileLock(os.path.join(directory, ".lock"), timeout=LOCK_TIMEOUT_S):
        yield


def _write_index(store: Store, entries: list[IndexEntry]) -> None:
    """index.json (a plain list of entries, newest first), then index.html; both are rendered before
    either is written, so a rendering failure leaves the previous index whole."""
    page = render_index_html(entries, store)
    text = json.dumps([e.model_dump(mode="json") for e in entries], indent=2) + "\n"
    store.write_text(store.path(INDEX_JSON), text)
    store.write_text(store.path(INDEX_HTML), page)


def rebuild_index(store: Store) -> list[IndexEntry]:
    """Rewrite index.json/index.html from all entry files until a re-listing shows no new entry."""
    entries: list[IndexEntry] = []
    for _ in range(MAX_REBUILDS):
        entries = read_entries(store)
        _write_index(store, entries)
        after = {os.path.basename(p)[: -len(".json")] for p in _list_entries(store)}
        if after == {e.run_id for e in entries}:
            break
        logger.info("run index changed during the rebuild (%d -> %d entries); rebuilding", len(entries), len(after))
    return entries


def update_index(store: Store, entry: IndexEntry) -> dict[str, str]:
    """Add (or replace) one run's entry in the index at the store's root and rebuild index.json and
    index.html; returns their URLs.

    Safe when several runs finish at once (see the module docstring). Raises StoreError, naming the
    URL, when the store cannot be read or written.
    """
    run_id = _check_run_id(entry.run_id)
    entry_url = join(_entries_url(store), f"{run_id}.json")
    try:
        store.write_text(entry_url, entry.model_dump_json(indent=2) + "\n")
    except Exception as exc:
        raise StoreError(
            f"cannot add run {run_id} to the run index: writing {entry_url} failed ({type(exc).__name__}: {exc}); "
            "check the store URL and credentials"
        ) from exc
    try:
        with _index_lock(store):
            rebuild_index(store)
    except Exception as exc:
        raise StoreError(
            f"cannot rebuild the run index at {store.path(INDEX_JSON)} ({type(exc).__name__}: {exc}); "
            f"the run's entry {entry_url} is saved and the next run's update will include it"
        ) from exc
    return {"index_json": store.path(INDEX_JSON), "index_html": store.path(INDEX_HTML)}
