"""Fixtures for tests of tasks/: synthetic rollout batches, a local store, their metrics, a report server thread,
and typed run documents (core.record) built from just the fields a test is about."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from core.record import Provenance, RunInfo
from core.schema import to_parquet_bytes
from core.store import Store
from envs.base import MetricSpec
from tasks.analysis.metrics import compute_metrics


def rollout(**overrides: Any) -> dict[str, Any]:
    """A complete, successful rollout record; tests override only what they are about."""
    row: dict[str, Any] = {
        "run_id": "run-test",
        "benchmark": "gsm8k",
        "env_version": "1",
        "batch_key": "batch-0",
        "prompt_id": "p0",
        "repeat": 0,
        "seed": 1,
        "model": "tiny",
        "model_fingerprint": "fp0",
        "sampling": {"temperature": 0.7},
        "messages": [{"role": "user", "content": "1+1?"}],
        "completion": "The answer is 2.\n#### 2",
        "transcript": None,
        "finish_reason": "stop",
        "prompt_tokens": 10,
        "completion_tokens": 20,
        "turns": 1,
        "tool_calls": 0,
        "latency_s": 1.0,
        "reward": 1.0,
        "success": True,
        "parsed_answer": "2",
        "reference": "2",
        "error": None,
        "info": {},
        "created_at": datetime(2025, 1, 1, tzinfo=UTC),
    }
    row.update(overrides)
    return row


def run_info(**fields: Any) -> RunInfo:
    """A run's info with the fields a test is about (nested documents as dicts, validated as metrics.json
    is); the rest as a plain complete run's: run_id "r1", model "tiny", status complete. A status may be
    given as its state alone."""
    data: dict[str, Any] = {"run_id": "r1", "model": "tiny", "status": {"state": "complete"}, **fields}
    if isinstance(data["status"], str):
        data["status"] = {"state": data["status"]}
    return RunInfo.model_validate(data)


def benchmark_provenance(benchmark: str, env: str | None = None, **fields: Any) -> dict[str, Any]:
    """A benchmark's provenance record (tasks.collection.provenance) with placeholder hashes."""
    return {
        "benchmark": benchmark,
        "env": env or benchmark,
        "env_version": "1",
        "rows": 1,
        "dataset_hash": "0" * 64,
        "prompt_template_hash": "0" * 16,
        **fields,
    }


def provenance(*benchmarks: dict[str, Any], **fields: Any) -> Provenance:
    """A run's provenance holding `benchmarks` (records, see benchmark_provenance); the rest placeholders."""
    data: dict[str, Any] = {"evalflow": {}, "python": "3.11", "hardware": {}, "benchmarks": list(benchmarks)}
    return Provenance.model_validate({**data, **fields})


def serve_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    """Serve in a daemon thread (`evalflow reports serve` serves on its main thread until Ctrl-C); the test
    stops it with `server.shutdown()` and `server.server_close()`."""
    thread = threading.Thread(target=server.serve_forever, name="serve-reports", daemon=True)
    thread.start()
    return thread


@pytest.fixture
def make_rollout() -> Callable[..., dict[str, Any]]:
    return rollout


@pytest.fixture
def write_batch(tmp_path: Path) -> Callable[..., str]:
    """Write rows as one parquet batch file under tmp_path and return its path."""
    counter = iter(range(10_000))

    def write(rows: list[dict[str, Any]], name: str | None = None) -> str:
        path = tmp_path / "batches" / (name or f"batch-{next(counter)}.parquet")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(to_parquet_bytes(rows))
        return str(path)

    return write


@pytest.fixture
def local_store(tmp_path: Path) -> Store:
    """A run store in tmp_path (analysis reads local batch files through any store)."""
    return Store(str(tmp_path / "store"))


@pytest.fixture
def metrics_of(write_batch: Callable[..., str], local_store: Store) -> Callable[..., dict[str, Any]]:
    """The metrics of rows written as one batch file, as metrics.json holds them (always JSON, no NaN)."""

    def run(rows: list[dict[str, Any]], specs: Mapping[str, Sequence[MetricSpec]] | None = None) -> dict[str, Any]:
        metrics = compute_metrics([write_batch(rows)], local_store, specs).model_dump(mode="json")
        json.dumps(metrics, allow_nan=False)
        return metrics

    return run
