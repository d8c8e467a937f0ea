"""The parent's overhead per shard (bench/scale_out.py --shards): one evaluation run as 1, 2, 4 child
flow runs of a deployment, on a real Prefect server on loopback, with the eval flow served by a Prefect
runner (its flow runs are processes, as on a process worker). Replicas are SIMULATED (sim_replica.py).

Per shard count: the parent's wall time, the span from the first shard's submission to the last one's
end, the parent's own time outside that span (validate, plan, submit, notice the end, re-plan, analysis,
report), and how long shards waited to start after they were submitted (the runner's polling and a
process start: the worker's cost, not the parent's)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from bench.scale_out import REPO, free_port, replicas

SERVE = """
from flows.eval import eval_flow
eval_flow.serve(name="scale-out", limit=32)
"""
POLL_S = "2"  # the runner's polling interval (Prefect's default is 10 s)


@contextlib.contextmanager
def prefect_server() -> Iterator[dict[str, str]]:
    """A `prefect server start` on loopback with its own home; the environment that points at it."""
    home = Path(tempfile.mkdtemp(prefix="prefect-bench-"))
    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    cmd = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    api = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{api}/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("prefect server did not start")
            time.sleep(0.5)
        yield {**env, "PREFECT_API_URL": api, "PREFECT_RUNNER_POLL_FREQUENCY": POLL_S}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


@contextlib.contextmanager
def served(env: dict[str, str]) -> Iterator[None]:
    """The eval flow served as deployment eval/scale-out by a runner process."""
    log = (Path(env["PREFECT_HOME"]) / "runner.log").open("ab")
    proc = subprocess.Popen([sys.executable, "-c", SERVE], cwd=REPO, env={**env, "PYTHONPATH": str(REPO)},
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        yield
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


async def run_parent(parameters: dict[str, Any]) -> dict[str, Any]:
    """Run the sharded evaluation through the deployment; the parent's and the shards' timestamps."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags
    from prefect.deployments import run_deployment
    from prefect.exceptions import ObjectNotFound

    async with get_client() as client:
        deadline = time.monotonic() + 120
        while True:  # the runner registers the deployment when it starts
            try:
                await client.read_deployment_by_name("eval/scale-out")
                break
            except ObjectNotFound:
                if time.monotonic() > deadline:
                    raise RuntimeError("the runner did not serve eval/scale-out within 120 s") from None
                await asyncio.sleep(1)
        parent = await run_deployment("eval/scale-out", parameters=parameters, timeout=3600, poll_interval=1)  # type: ignore[misc]
        assert parent.state is not None and parent.state.is_completed(), parent.state
        children = await client.read_flow_runs(flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=["shard"])))
    mine = [c for c in children if c.created >= parent.created]  # this run's shards (runs go one at a time)
    return {"parent": parent, "children": mine}


def measure_shards(counts: list[int], args: argparse.Namespace, config: Callable[..., dict[str, Any]]) -> None:
    rows = []
    from prefect.settings import PREFECT_API_URL, temporary_settings

    # settings are read once per process: point this one at the bench's server explicitly
    with prefect_server() as env, temporary_settings(updates={PREFECT_API_URL: env["PREFECT_API_URL"]}), served(env):
        for count in counts:
            with replicas(count, args) as urls, tempfile.TemporaryDirectory() as store:
                data = config(urls, args, store, shards=count, shard_deployment="eval/scale-out")
                got = asyncio.run(run_parent({"config": data}))
            parent, children = got["parent"], got["children"]
            if not children:  # one shard: the parent collects itself, as an unsharded run
                continue
            submitted = min(c.created for c in children)
            last = max(c.end_time for c in children)
            wall = (parent.end_time - parent.start_time).total_seconds()
            span = (last - submitted).total_seconds()  # first submission to the last shard's end
            waits = [(c.start_time - c.created).total_seconds() for c in children]
            rows.append((count, len(children), wall, span, wall - span, (wall - span) / count, max(waits)))
    print("\nSIMULATED replicas; shards are real child flow runs (Prefect server + runner on loopback)")
    header = ("shards", "child runs", "parent s", "shards s", "parent own s", "own s/shard", "max start wait s")
    # shards s: from the first submission to the last shard's end (their start wait included); parent own s:
    # the rest of the parent's wall time (validate, plan, submit, notice the end, re-plan, analysis, report)
    print(" ".join(f"{h:>16}" for h in header))
    for row in rows:
        print(" ".join(f"{c:>16}" if isinstance(c, int) else f"{c:>16.1f}" for c in row))
