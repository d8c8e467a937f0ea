"""The run index: entries, index.json/index.html, concurrent updates and failing stores."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from core.record import IndexEntry
from core.store import Store, StoreError
from tasks.analysis.metrics import compute_metrics
from tasks.reporting import index
from tasks.reporting.assets import plotly_bundle
from tasks.reporting.index import index_entry, read_entries, relative_to_store, update_index
from tests.conftest import REPO_ROOT
from tests.tasks.conftest import run_info


def entry_doc(run_id: str, finished: str = "2025-01-01T00:00:00+00:00", **extra: Any) -> dict[str, Any]:
    """An entry file as runs wrote it before entries had a version or a status (every such run completed)."""
    headline = {"gsm8k": {"accuracy": 0.5, "accuracy_ci": [0.4, 0.6], "mean_reward": 0.5, "prompts": 10, "n": 4}}
    return {
        "run_id": run_id,
        "run_name": "nightly",
        "deployment": None,
        "model": "tiny",
        "benchmarks": ["gsm8k"],
        "finished_at": finished,
        "headline": headline,
        "report": f"runs/{run_id}/report.html",
        **extra,
    }


def entry(run_id: str, finished: str = "2025-01-01T00:00:00+00:00", **extra: Any) -> IndexEntry:
    return IndexEntry.model_validate(entry_doc(run_id, finished, **extra))


def read_index_json(store: Store) -> list[dict[str, Any]]:
    return json.loads(store.read_text(store.path("index.json")))


def test_relative_to_store(tmp_path: Path) -> None:
    assert relative_to_store(str(tmp_path / "s/runs/a/report.html"), str(tmp_path / "s")) == "runs/a/report.html"
    assert relative_to_store(str(tmp_path / "s/runs/a/x.html"), f"file://{tmp_path}/s/") == "runs/a/x.html"
    assert relative_to_store("s3://b/p/runs/a/report.html", "s3://b/p") == "runs/a/report.html"
    assert relative_to_store("s3://other/x.html", "s3://b/p") == "s3://other/x.html"


def test_index_entry_from_a_run(make_rollout, write_batch, tmp_path: Path) -> None:
    store_url = str(tmp_path / "store")
    rows = [make_rollout(prompt_id=f"p{i}", success=i < 3) for i in range(4)]
    metrics = compute_metrics([write_batch(rows)], Store(store_url))
    urls = {k: f"{store_url}/runs/r1/{n}" for k, n in (("metrics", "metrics.json"), ("markdown", "report.md"))}
    urls["html"] = f"{store_url}/runs/r1/report.html"
    info = {"run_id": "r1", "run_name": "n", "deployment": "dep", "flow_run_id": "f", "model": "tiny"}
    e = index_entry(
        run_info(**info, model_fingerprint="fp", started_at="s", finished_at="t", status="incomplete"),
        metrics,
        urls,
        store_url,
    )
    assert {k: getattr(e, k) for k in info} == info
    assert e.status == "incomplete" and e.model_fingerprint == "fp" and e.started_at == "s"
    assert e.benchmarks == ["gsm8k"] and e.total_rollouts == 4
    assert e.report == "runs/r1/report.html" and e.metrics == "runs/r1/metrics.json"
    head = e.headline["gsm8k"]
    assert head["accuracy"] == pytest.approx(0.75) and len(head["accuracy_ci"]) == 2
    assert {"pass@1", "pass@n", "maj@n", "mean_reward", "mean_reward_ci"} <= set(head)
    json.dumps(e.model_dump(mode="json"), allow_nan=False)


def test_update_index_adds_replaces_and_orders_newest_first(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    store = Store(url)
    urls = update_index(store, entry("old", "2025-01-01T00:00:00+00:00"))
    assert urls == {"index_json": f"{url}/index.json", "index_html": f"{url}/index.html"}
    update_index(store, entry("new", "2025-02-01T00:00:00+00:00"))
    update_index(store, entry("old", "2025-01-01T00:00:00+00:00", model="replaced"))
    runs = json.loads(Path(urls["index_json"]).read_text())
    assert isinstance(runs, list) and [r["run_id"] for r in runs] == ["new", "old"]
    assert runs[1]["model"] == "replaced"
    assert sorted(os.listdir(tmp_path / "store/index/entries")) == ["new.json", "old.json"]
    assert read_index_json(store) == runs == [e.model_dump(mode="json") for e in read_entries(store)]
    assert [e.status for e in read_entries(store)] == ["complete", "complete"]  # entries written without one
    assert not list((tmp_path / "store").glob(".*.tmp"))


def test_index_html_links_and_trends(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    update_index(store, entry("a1", "2025-01-01T00:00:00+00:00", deployment="nightly"))
    update_index(store, entry("a2", "2025-01-02T00:00:00+00:00", deployment="nightly"))
    update_index(store, entry("b1", "2025-01-03T00:00:00+00:00", run_name="<script>x</script>"))
    page = (tmp_path / "store/index.html").read_text()
    name, bundle = plotly_bundle()
    assert re.findall(r'<script[^>]*src="([^"]+)"', page) == [f"static/{name}"] and "plotly.js v" not in page
    assert (tmp_path / "store/static" / name).read_bytes() == bundle
    assert re.findall(r'href="(runs/[^"]+)"', page).count("runs/a1/report.html") == 2  # run label + report link
    assert re.findall(r'<tr data-run="([^"]+)"', page) == ["b1", "a2", "a1"]  # newest first
    assert page.count('class="plotly-graph-div"') == 2  # deployment: nightly / gsm8k and run name: ... / gsm8k
    assert "<script>x</script>" not in page and "&lt;script&gt;x&lt;/script&gt;" in page


def test_run_ids_must_be_safe_file_names(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="run id"):
        update_index(Store(str(tmp_path)), entry("../escape"))


# ---------------------------------------------------------------------------------------------
# Concurrency


def test_concurrent_updates_from_threads_all_land(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def finish(i: int) -> None:
        try:
            barrier.wait()
            update_index(store, entry(f"run-{i}", f"2025-01-01T00:00:0{i}+00:00"))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=finish, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    runs = json.loads((tmp_path / "store/index.json").read_text())
    assert sorted(r["run_id"] for r in runs) == [f"run-{i}" for i in range(8)]
    assert all(f"runs/run-{i}/report.html" in (tmp_path / "store/index.html").read_text() for i in range(8))


_FINISHER = """
import json, sys, time
from pathlib import Path
from core.store import Store
from tasks.reporting.index import update_index
url, i, start = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
from core.record import IndexEntry
entry = IndexEntry.model_validate_json(sys.argv[4])
while not start.exists():  # all finish at the same moment
    time.sleep(0.01)
update_index(Store(url), entry)
"""


def test_concurrent_updates_from_processes_all_land(tmp_path: Path) -> None:
    """Separate processes (as separate runs are), started first and released together."""
    url = str(tmp_path / "store")
    start = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _FINISHER,
                url,
                str(i),
                str(start),
                entry(f"proc-{i}", f"2025-01-01T00:00:0{i}+00:00").model_dump_json(),
            ],
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(8)
    ]
    time.sleep(5)  # let every process import and reach the start line
    start.touch()
    errors = [p.communicate(timeout=300)[1] for p in procs]  # reads stderr to the end, then waits
    assert [p.returncode for p in procs] == [0] * 8, [err[-2000:] for err in errors]
    runs = json.loads((tmp_path / "store/index.json").read_text())
    assert sorted(r["run_id"] for r in runs) == [f"proc-{i}" for i in range(8)]


def test_rebuild_sees_an_entry_that_lands_during_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The object-store race without locks: another run's entry appears after our listing; the
    re-check after writing notices it and rebuilds, so the final index holds both."""
    store = Store(str(tmp_path / "store"))
    real_write = index._write_index
    calls = []

    def write_then_race(target: Store, entries: list[IndexEntry]) -> None:
        real_write(target, entries)
        calls.append([e.run_id for e in entries])
        if len(calls) == 1:  # a concurrent finisher's entry lands right after our first rebuild (an old one)
            store.write_text(store.path("index", "entries", "late.json"), json.dumps(entry_doc("late")))

    monkeypatch.setattr(index, "_write_index", write_then_race)
    monkeypatch.setattr(index, "_index_lock", lambda _store: __import__("contextlib").nullcontext())
    update_index(store, entry("mine"))
    assert calls == [["mine"], ["mine", "late"]] or calls == [["mine"], ["late", "mine"]]
    assert {r["run_id"] for r in json.loads((tmp_path / "store/index.json").read_text())} == {"mine", "late"}


# ---------------------------------------------------------------------------------------------
# Failing stores


def test_unwritable_store_raises_and_leaves_no_index(tmp_path: Path) -> None:
    blocker = tmp_path / "store"
    blocker.write_text("a file where the store folder should be")
    with pytest.raises(StoreError, match=re.escape(str(blocker / "index" / "entries" / "r1.json"))):
        update_index(Store(str(blocker)), entry("r1"))
    assert blocker.read_text().startswith("a file")


def test_failed_rebuild_keeps_the_previous_complete_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(str(tmp_path / "store"))
    update_index(store, entry("first"))
    before = (tmp_path / "store/index.json").read_text()

    def broken(entries: list[IndexEntry], store: Store) -> str:
        raise RuntimeError("renderer crashed")

    monkeypatch.setattr(index, "render_index_html", broken)
    with pytest.raises(StoreError, match=r"index\.json"):
        update_index(store, entry("second"))
    assert (tmp_path / "store/index.json").read_text() == before  # untouched, still complete
    assert (tmp_path / "store/index/entries/second.json").exists()  # the next rebuild picks it up
    monkeypatch.undo()
    update_index(store, entry("third"))
    ids = {r["run_id"] for r in json.loads((tmp_path / "store/index.json").read_text())}
    assert ids == {"first", "second", "third"}
