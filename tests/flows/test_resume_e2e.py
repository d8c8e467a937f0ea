"""Crash-safe, cached collection against the real vLLM server: a crash costs the batches in flight,
a rerun collects only what is missing, and transient faults never lose a rollout."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest
import yaml

from core.config import EvalConfig
from core.record import ServerInfo
from flows.eval import eval_flow
from flows.plan import plan_run
from tasks.serving.server import Endpoint, VLLMServer
from tests.conftest import FAST_START, REPO_ROOT, group_alive
from tests.faultproxy import FaultProxy, Faults

pytestmark = pytest.mark.e2e


def config_data(store: Path, base_url: str, model: str, **overrides: object) -> dict:
    data = {
        "run_name": "resume",
        "model": {"source": model, "served_name": model},
        "server": {"mode": "external", "base_url": base_url},
        "sampling": {"temperature": 0.8, "max_tokens": 96},
        "benchmarks": [{"name": "gsm8k", "limit": 8, "repeats": 2}],
        "collection": {"batch_size": 4, "concurrency": 4, "batches_in_flight": 1},
        "store": {"url": str(store)},
    }
    data.update(overrides)
    return data


def run(data: dict) -> dict:
    return asyncio.run(eval_flow(EvalConfig.model_validate(data)))


def cache_records(store: Path) -> list[Path]:
    root = store / "cache" / "batches"
    return [p for p in root.iterdir() if p.is_file()] if root.exists() else []


def pairs(run_dir: str) -> list[tuple[str, int]]:
    files = sorted(str(p) for p in Path(run_dir).glob("rollouts/*/*.parquet"))
    return duckdb.sql(f"select prompt_id, repeat from read_parquet({files}) order by 1, 2").fetchall()


def test_sigkill_then_rerun_collects_only_the_missing_batches(
    proxy: FaultProxy, endpoint: Endpoint, prefect_home: Path, tmp_path: Path
) -> None:
    from prefect.settings import PREFECT_API_URL

    data = config_data(tmp_path / "store", proxy.base_url, endpoint.model)
    data["benchmarks"][0]["limit"] = 8  # 4 batches of 4 rollouts, one at a time
    data["sampling"]["max_tokens"] = 48  # a batch still takes seconds: time to kill between two
    config = tmp_path / "eval.yaml"
    config.write_text(yaml.safe_dump(data))
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value()), "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "run", "--config", str(config)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 600
    while len(cache_records(tmp_path / "store")) < 2:
        assert proc.poll() is None, "the flow ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    persisted = len(cache_records(tmp_path / "store"))
    assert 2 <= persisted < 4, persisted

    before = proxy.counts.forwarded
    result = run(data)
    assert proxy.counts.forwarded - before == (4 - persisted) * 4 + 1  # the lost batches, and the endpoint check
    assert (result.collection.batches_total, result.collection.batches_cached) == (4, persisted)
    got = pairs(result.collection.run_dir)
    assert got == sorted({(f"gsm-{i:04d}", r) for i in range(8) for r in range(2)})  # none missing, none twice


def test_changed_inputs_miss_exactly_the_affected_batches(
    proxy: FaultProxy, endpoint: Endpoint, prefect_home: Path, tmp_path: Path
) -> None:
    rows = [json.loads(line) for line in (REPO_ROOT / "data/gsm8k/test.jsonl").read_text().splitlines()[:8]]
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = config_data(tmp_path / "store", proxy.base_url, endpoint.model)
    data["benchmarks"][0]["dataset"] = str(dataset)
    data["sampling"]["max_tokens"] = 32  # what is cached and what is sent is the point here, not the text

    planned = plan_run(EvalConfig.model_validate(data))  # --dry-run: starts nothing
    assert (planned.rollouts.total, planned.rollouts.cached, planned.rollouts.to_generate) == (16, 0, 16)
    assert proxy.counts.forwarded == 1  # the endpoint check (1 token), nothing collected
    first = run(data)
    assert (first.collection.batches_total, first.collection.batches_cached) == (4, 0)

    start = proxy.counts.forwarded
    again = run(data)  # same inputs, new run: everything reused, nothing sent
    assert (again.collection.batches_total, again.collection.batches_cached) == (4, 4)
    assert proxy.counts.forwarded == start
    assert pairs(again.collection.run_dir) == pairs(first.collection.run_dir)

    # the latest earlier run of the same run name is the default baseline; an explicit one wins
    assert again.comparison.baseline.run_id == first.run_info.run_id
    hotter = run(
        {**data, "sampling": {**data["sampling"], "temperature": 0.9}, "baseline_run_id": first.run_info.run_id}
    )
    assert (hotter.collection.batches_total, hotter.collection.batches_cached) == (4, 0)
    assert hotter.comparison.baseline.run_id == first.run_info.run_id

    rows[5]["question"] = rows[5]["question"].replace("?", " exactly?")
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert plan_run(EvalConfig.model_validate(data)).rollouts.to_generate == 4
    start = proxy.counts.forwarded
    edited = run(data)
    assert (edited.collection.batches_total, edited.collection.batches_cached) == (4, 3)
    assert proxy.counts.forwarded - start == 4 + 1  # one batch (2 prompts x 2 repeats), the endpoint check


def test_transient_faults_lose_no_rollout(endpoint: Endpoint, prefect_home: Path, tmp_path: Path) -> None:
    # a stalled request outlasts the request timeout (a 48-token answer takes about a second here)
    faults = Faults(error_rate=0.10, reset_rate=0.05, stall_rate=0.05, stall_s=20.0, seed=7)
    proxy = FaultProxy(endpoint.base_url.removesuffix("/v1"), faults).start()
    try:
        data = config_data(tmp_path / "store", proxy.base_url, endpoint.model)
        data["collection"] = {**data["collection"], "request_timeout_s": 10.0, "max_request_retries": 6}
        data["sampling"] = {**data["sampling"], "max_tokens": 48}
        result = run(data)
    finally:
        proxy.stop()
    assert proxy.counts.errors > 0 and proxy.counts.resets > 0 and proxy.counts.stalls > 0, proxy.counts
    bench = result.model_dump(mode="json")["benchmarks"]["gsm8k"]
    assert bench["n_rollouts"] == 16
    assert bench["error_count"] == 0
    assert len(pairs(result.collection.run_dir)) == 16


def test_a_managed_server_killed_mid_run_is_restarted_stopped_at_the_end_and_a_cached_rerun_starts_none(
    smollm2, prefect_home: Path, tmp_path: Path
) -> None:
    data = config_data(tmp_path / "store", "http://unused", smollm2.served_name)
    data["model"] = {}
    data["server"] = {"mode": "managed", "extra_args": FAST_START, "max_restarts": 1}
    killed: list[int] = []

    def killer() -> None:  # SIGKILL the whole server group once the first batch is persisted
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline and not killed:
            # this flow's server only (the session's shared server is in the registry too)
            servers = [s for s in VLLMServer._live if tmp_path in s.log_path.parents]
            if servers and servers[0].pid and cache_records(tmp_path / "store"):
                killed.append(servers[0].pid)
                os.killpg(servers[0].pid, signal.SIGKILL)
            time.sleep(0.2)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    result = run(data)
    thread.join(5)
    assert killed, "the server was never killed"
    assert result.collection.server.restarts == 1
    assert result.benchmarks["gsm8k"].n_rollouts == 16
    assert result.benchmarks["gsm8k"].error_count == 0
    # the restarted server is stopped with the run, and it logged
    server = result.collection.server
    assert server.pid and server.pid != killed[0] and not group_alive(server.pid)
    assert server.log and Path(server.log).read_text().strip()

    again = run(data)  # same inputs: straight to analysis, no server started
    assert again.collection.server == ServerInfo()  # no server started
    assert (again.collection.batches_total, again.collection.batches_cached) == (4, 4)
    assert again.benchmarks["gsm8k"] == result.benchmarks["gsm8k"]
    assert Path(again.collection.run_dir) != Path(result.collection.run_dir)
    assert len(list(Path(again.collection.run_dir).glob("rollouts/gsm8k/*.parquet"))) == 4
