"""Live progress and kill-safe batches against the real vLLM server: progress lines reach the flow run's
logs at the configured cadence while a slow batch is open, and a batch killed mid-way keeps its snapshot,
so the rerun sends only the rollouts the snapshot did not hold.

The cadence is `collection.progress_interval_s`, set to INTERVAL here so that a batch of several
intervals takes seconds, not minutes; the default's bound (every 10 s, the README's "at least every
15 s") is pinned in tests/tasks/test_progress.py."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from uuid import UUID

import duckdb
import pyarrow.parquet as pq
import pytest
import yaml

from core.config import EvalConfig
from flows.eval import eval_flow
from tasks.serving.server import Endpoint
from tests.conftest import REPO_ROOT
from tests.faultproxy import FaultProxy

pytestmark = pytest.mark.e2e

ROLLOUTS = 8  # one batch: 4 prompts x 2 repeats, one request at a time, ~2 s each: over 4 intervals
INTERVAL = 2.0  # collection.progress_interval_s: progress lines and snapshots


def slow_config(store: Path, base_url: str, model: str) -> dict:
    return {
        "run_name": "progress",
        "model": {"source": model, "served_name": model},
        "server": {"mode": "external", "base_url": base_url},
        "sampling": {"temperature": 1.0, "max_tokens": 192},
        "benchmarks": [{"name": "gsm8k", "limit": ROLLOUTS // 2, "repeats": 2}],
        "collection": {
            "batch_size": ROLLOUTS,
            "concurrency": 1,
            "batches_in_flight": 1,
            "progress_interval_s": INTERVAL,
        },
        "store": {"url": str(store)},
    }


def flow_run_logs(flow_run_id: str) -> list[tuple[float, str]]:
    """(timestamp, message) of the flow run's logs in the session's Prefect API, oldest first."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort

    async def read() -> list[tuple[float, str]]:
        async with get_client() as client:
            logs, offset = [], 0
            while page := await client.read_logs(
                LogFilter(flow_run_id=LogFilterFlowRunId(any_=[UUID(flow_run_id)])),
                offset=offset, limit=200, sort=LogSort.TIMESTAMP_ASC,
            ):  # fmt: skip
                logs += page
                offset += len(page)
            return [(log.timestamp.timestamp(), log.message) for log in logs]

    time.sleep(3)  # logs are sent in batches every 2 s
    return asyncio.run(read())


def test_progress_lines_come_every_interval_while_a_slow_batch_is_open(
    proxy: FaultProxy, endpoint: Endpoint, prefect_home: Path, tmp_path: Path
) -> None:
    data = slow_config(tmp_path / "store", proxy.base_url, endpoint.model)
    result = asyncio.run(eval_flow(EvalConfig.model_validate(data)))
    metrics = json.loads(Path(result.collection.reports["metrics"]).read_text())
    logs = flow_run_logs(metrics["run_info"]["flow_run_id"])
    started = next(t for t, m in logs if m == "stage collect: started")
    ended = next(t for t, m in logs if re.fullmatch(r"stage collect: [\d.]+ s \([\d.]+ s CPU\)", m))
    assert ended - started > 4 * INTERVAL, "the batch was too fast to show a cadence"
    progress = [(t, m) for t, m in logs if m.startswith("collect ") and " rollouts (" in m]
    times = [started, *(t for t, _ in progress)]
    assert max(b - a for a, b in itertools.pairwise(times)) <= 1.5 * INTERVAL, progress
    assert ended - times[-1] <= 1.5 * INTERVAL
    open_batch = [m for _, m in progress if not m.startswith(f"collect {ROLLOUTS}/")]
    assert len(open_batch) >= 2 and len({m.split(" rollouts")[0] for m in open_batch}) >= 2  # counted per rollout
    assert progress[-1][1].startswith(f"collect {ROLLOUTS}/{ROLLOUTS} rollouts (100%; 0 cached, {ROLLOUTS} generated")
    assert "finished in" in progress[-1][1]


def test_a_batch_killed_mid_way_keeps_its_snapshot_and_the_rerun_sends_only_the_rest(
    proxy: FaultProxy, endpoint: Endpoint, prefect_home: Path, tmp_path: Path
) -> None:
    from prefect.settings import PREFECT_API_URL

    store = tmp_path / "store"
    data = slow_config(store, proxy.base_url, endpoint.model)
    config = tmp_path / "eval.yaml"
    config.write_text(yaml.safe_dump(data))
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("evalflow")), "run", "--config", str(config)],
        cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    partial = store / "cache" / "partial"
    deadline = time.monotonic() + 600
    while not (partial.exists() and any(partial.glob("*.parquet"))):
        assert proc.poll() is None, "the flow ended before its first snapshot"
        assert time.monotonic() < deadline
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    (snapshot,) = partial.glob("*.parquet")
    kept = len(pq.read_table(snapshot))
    assert 0 < kept < ROLLOUTS, kept
    assert not list(store.glob("runs/*/rollouts/*/*.parquet"))  # a snapshot is never a finished batch

    before = proxy.counts.forwarded
    result = asyncio.run(eval_flow(EvalConfig.model_validate(data)))
    assert proxy.counts.forwarded - before == (ROLLOUTS - kept) + 1  # the unfinished ones, and the endpoint check
    files = sorted(str(p) for p in Path(result.collection.run_dir).glob("rollouts/*/*.parquet"))
    pairs = duckdb.sql(f"select prompt_id, repeat from read_parquet({files}) order by 1, 2").fetchall()
    assert len(pairs) == ROLLOUTS == len(set(pairs))  # none missing, none twice
    assert not list(partial.glob("*.parquet"))  # removed once the batch finished
