"""The analysis, report and run index against S3: moto's server mode on loopback, through s3fs.

The same synthetic run is written to a local store and to s3://; everything computed and written
from the S3 copy must equal the local one. Failing stores must say which URL failed and leave no
index behind.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

from core.metrics_doc import RunMetrics
from core.ports import free_port
from core.record import IndexEntry, RunInfo, RunStatus
from core.schema import to_parquet_bytes
from core.store import Store, StoreError
from tasks.analysis.metrics import compute_metrics
from tasks.reporting.index import index_entry, update_index
from tasks.reporting.report import write_report
from tasks.reporting.serve import index_url, make_server
from tests.conftest import moto_s3
from tests.tasks.conftest import serve_in_thread

BUCKET = "evalflow-test"
RUN_ID = "20250101-000000-s3test"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with moto_s3(BUCKET) as url:
        yield url


def analyze(files: list[str], store: Store) -> RunMetrics:
    """The one call into the analysis from these tests."""
    return compute_metrics(files, store)


def s3_options(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"endpoint_url": url, "region_name": "us-east-1"},
        **extra,
    }


@pytest.fixture
def s3_store(s3_endpoint: str) -> str:
    return f"s3://{BUCKET}/store-{uuid.uuid4().hex[:8]}"


def synthetic_batches(make_rollout: Callable[..., dict]) -> dict[str, list[dict[str, Any]]]:
    """gsm8k: 20 prompts x 4 repeats with mixed outcomes and an error; tetris: 10 games x 3 with tool calls."""
    gsm = [
        make_rollout(
            prompt_id=f"gsm-{p:02d}",
            repeat=r,
            success=(p + r) % 3 == 0,
            reward=float((p + r) % 3 == 0),
            parsed_answer=str((p + r) % 5),
            completion_tokens=20 + p * r,
            latency_s=0.5 + p / 10,
            info={"strict_correct": (p + r) % 3 == 0, "flexible_correct": (p + r) % 2 == 0},
            error="ReadTimeout: slow" if (p, r) == (3, 1) else None,
        )
        for p in range(20)
        for r in range(4)
    ]
    tetris = [
        make_rollout(
            benchmark="tetris",
            prompt_id=f"game-{g}",
            repeat=r,
            tool_calls=(g + r) % 11,
            reward=round(-0.1 * ((g + r) % 11) + (10.0 if g == r else 0.0), 1),
            success=g == r,
            parsed_answer="Left || Down",
            reference=None,
            transcript=[
                {"role": "user", "content": "board"},
                {"role": "assistant", "content": "<answer>Left</answer>"},
            ],
        )
        for g in range(10)
        for r in range(3)
    ]
    return {"gsm8k": gsm, "tetris": tetris}


def write_run(store: Store, batches: dict[str, list[dict]]) -> list[str]:
    """The run's rollout files, written through the store like the flow does (one per benchmark)."""
    files = []
    for bench, rows in batches.items():
        url = store.path("runs", RUN_ID, "rollouts", bench, "batch-0000.parquet")
        files.append(store.write_bytes(url, to_parquet_bytes(rows)))
    return files


RUN_INFO = RunInfo(
    run_id=RUN_ID,
    run_name="s3-e2e",
    status=RunStatus(state="complete"),
    deployment="nightly",
    model="tiny",
    model_fingerprint="fp",
    started_at="2025-01-01T00:00:00+00:00",
    finished_at="2025-01-01T01:00:00+00:00",
    config={"store": {"storage_options": {"secret": "testing"}}},
)


def publish(store: Store, files: list[str]) -> tuple[RunMetrics, dict[str, str]]:
    metrics = analyze(files, store)
    urls = write_report(store.path("runs", RUN_ID), metrics, RUN_INFO, files, store)
    urls.update(update_index(store, index_entry(RUN_INFO, metrics, urls, store.url)))
    return metrics, urls


def test_a_run_on_s3_matches_the_same_run_written_locally(
    s3_endpoint: str, s3_store: str, tmp_path: Path, make_rollout
) -> None:
    opts = s3_options(s3_endpoint)
    batches = synthetic_batches(make_rollout)
    local = Store(str(tmp_path / "store"))
    s3 = Store(s3_store, opts)
    local_metrics, local_urls = publish(local, write_run(local, batches))
    s3_metrics, s3_urls = publish(s3, write_run(s3, batches))

    assert s3_metrics == local_metrics
    assert s3_metrics.total_rollouts == 110 and s3_metrics.benchmarks["gsm8k"].error_count == 1
    assert s3_urls["html"] == f"{s3_store}/runs/{RUN_ID}/report.html"
    for kind in ("metrics", "markdown", "html", "index_json", "index_html"):
        remote, local_text = s3.read_text(s3_urls[kind]), Path(local_urls[kind]).read_text()
        assert remote == local_text, f"{kind} differs between s3 and the local store"
    assert "testing" not in s3.read_text(s3_urls["metrics"])  # the secret is redacted
    fs = fsspec.filesystem("s3", **opts)
    root = s3_store[len("s3://") :]
    listed = {p[len(root) + 1 :] for p in fs.find(root)}
    assert {
        "index.json",
        "index.html",
        f"index/entries/{RUN_ID}.json",
        f"runs/{RUN_ID}/metrics.json",
        f"runs/{RUN_ID}/report.md",
        f"runs/{RUN_ID}/report.html",
        f"runs/{RUN_ID}/rollouts/gsm8k/batch-0000.parquet",
    } <= listed
    assert [e["report"] for e in json.loads(s3.read_text(s3_urls["index_json"]))] == [f"runs/{RUN_ID}/report.html"]


def test_concurrent_index_updates_on_s3_all_land(s3_endpoint: str, s3_store: str) -> None:
    """No locks on S3: entries-then-rebuild must still keep every one of 8 simultaneous finishers."""
    s3 = Store(s3_store, s3_options(s3_endpoint))
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def finish(i: int) -> None:
        try:
            barrier.wait()
            entry = IndexEntry(run_id=f"run-{i}", finished_at=f"2025-01-01T00:00:0{i}+00:00", benchmarks=["gsm8k"])
            update_index(s3, entry)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=finish, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    runs = json.loads(s3.read_text(f"{s3_store}/index.json"))
    assert [r["run_id"] for r in runs] == [f"run-{i}" for i in reversed(range(8))]  # all of them, newest first


def test_a_missing_bucket_fails_clearly_and_leaves_no_index(s3_endpoint: str) -> None:
    opts = s3_options(s3_endpoint)
    bad_store = "s3://no-such-bucket-evalflow/store"
    with pytest.raises(StoreError, match=f"{bad_store}/index/entries/r1.json") as info:
        update_index(Store(bad_store, opts), IndexEntry(run_id="r1"))
    assert "bucket does not exist" in str(info.value)
    fs = fsspec.filesystem("s3", **opts)
    assert not fs.exists("no-such-bucket-evalflow/store/index.json")


def test_an_unreachable_store_fails_clearly(s3_endpoint: str, s3_store: str, make_rollout) -> None:
    """Wrong endpoint (a closed port): every step names the URL it could not reach, and nothing is
    written to the real store."""
    opts = s3_options(s3_endpoint)
    s3 = Store(s3_store, opts)
    files = write_run(s3, synthetic_batches(make_rollout))
    closed = free_port()
    bad_options = s3_options(f"http://127.0.0.1:{closed}", retries=1, config_kwargs={"retries": {"max_attempts": 1}})
    bad = Store(s3_store, bad_options)
    with pytest.raises(StoreError, match=r"cannot read rollout files s3://"):
        analyze(files, bad)
    with pytest.raises(StoreError, match=f"{s3_store}/index/entries/{RUN_ID}.json"):
        update_index(bad, IndexEntry(run_id=RUN_ID))
    with pytest.raises(StoreError, match=f"{s3_store}/runs/{RUN_ID}/metrics.json"):
        write_report(f"{s3_store}/runs/{RUN_ID}", analyze(files, s3), RUN_INFO, [], bad)
    fs = fsspec.filesystem("s3", **opts)
    root = s3_store[len("s3://") :]
    assert not fs.exists(f"{root}/index.json") and not fs.exists(f"{root}/index")


def test_serve_reports_from_s3(s3_endpoint: str, s3_store: str, make_rollout) -> None:
    s3 = Store(s3_store, s3_options(s3_endpoint))
    publish(s3, write_run(s3, synthetic_batches(make_rollout)))
    server = make_server(s3, port=0)
    serve_in_thread(server)
    try:
        url = index_url(server)
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/html")
            assert "evalflow runs" in resp.read().decode()
        with urllib.request.urlopen(url.replace("index.html", f"runs/{RUN_ID}/report.html"), timeout=10) as resp:
            assert f"Evaluation report: tiny ({RUN_ID})" in resp.read().decode()
        fs = fsspec.filesystem("s3", **s3_options(s3_endpoint))  # the objects carry their type (S3 website hosting)
        assert fs.info(f"{s3_store}/runs/{RUN_ID}/report.html")["ContentType"] == "text/html"
        assert fs.info(f"{s3_store}/index.json")["ContentType"] == "application/json"
        with urllib.request.urlopen(url.replace("index.html", ""), timeout=10) as resp:  # a folder: its index
            assert "evalflow runs" in resp.read().decode()
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(url.replace("index.html", "nope.html"), timeout=10)
        assert missing.value.code == 404
    finally:
        server.shutdown()
        server.server_close()
