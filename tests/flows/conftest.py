"""The deployed project, once for the e2e lane: the lane's real `prefect server` on loopback, `evalflow
local deploy` (work pools, blocks, `prefect deploy --all` from prefect.yaml), two process workers of the
CPU pool and one of the GPU pool, and a moto S3 server for stores on S3. The deployment tests and the
shard tests share it: deploying and starting workers once saves a deploy and three worker starts."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import EVALFLOW
from tests.conftest import REPO_ROOT, moto_s3, wait_for

BUCKET = "evalflow-shards"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
# process workers look for scheduled runs every second (Prefect's default: 10 s, i.e. 5 s per run waited)
WORKER_ENV = {"PREFECT_WORKER_QUERY_SECONDS": "1"}


class Deployed:
    """The deployed project: the API, the environment of its CLI and workers, the run store."""

    def __init__(self, api: str, home: Path, store: Path) -> None:
        self.api, self.store = api, store
        self.env = {**os.environ, "PREFECT_API_URL": api, "PREFECT_HOME": str(home), "EVALFLOW_STORE_URL": str(store)}
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.deploy_output = ""  # what `evalflow local deploy` printed

    def call(self, fn: Any) -> Any:
        from prefect.client.orchestration import PrefectClient

        async def go() -> Any:
            async with PrefectClient(self.api) as client:
                return await fn(client)

        return asyncio.run(go())

    def ops(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        """`evalflow local ARGS...`, the installed command."""
        return subprocess.run([EVALFLOW, "local", *args], cwd=REPO_ROOT, env=self.env,
                              capture_output=True, text=True, timeout=timeout)  # fmt: skip

    def worker_log(self, name: str) -> Path:
        return self.store.parent / f"worker-{name}.log"

    def start_worker(self, pool: str, name: str) -> subprocess.Popen[bytes]:
        log = self.worker_log(name).open("ab")
        self.workers[name] = subprocess.Popen(
            [sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--type", "process", "--name", name],
            cwd=REPO_ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        return self.workers[name]

    def second_cpu_worker(self) -> None:
        """`cpu-b`, a second worker of the CPU pool on this host (one CPU server slot between the two)."""
        if "cpu-b" not in self.workers:
            self.start_worker("evalflow-cpu", "cpu-b")

    def flow_run_process(self, flow_run_id: Any) -> tuple[str, int] | None:
        """(worker name, pid) of the worker-started process running `flow_run_id` (found by the id in its
        environment), or None while no worker runs it."""
        for name, worker in self.workers.items():
            out = subprocess.run(["pgrep", "-P", str(worker.pid)], capture_output=True, text=True).stdout.split()
            for pid in out:
                try:
                    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                except OSError:
                    continue
                if f"PREFECT__FLOW_RUN_ID={flow_run_id}".encode() in environ:
                    return name, int(pid)
        return None

    def deployment(self, name: str) -> Any:
        return self.call(lambda c: c.read_deployment_by_name(name))

    def params(self, name: str) -> dict[str, Any]:
        return json.loads(json.dumps(self.deployment(name).parameters))

    def flow_run(self, flow_run_id: Any) -> Any:
        return self.call(lambda c: c.read_flow_run(flow_run_id))

    def finished(self, flow_run_id: Any, timeout: float) -> Any:
        def final() -> Any:
            run = self.flow_run(flow_run_id)
            return run if run.state.is_final() else None

        return wait_for(final, timeout, f"flow run {flow_run_id} to finish", interval=1.0)

    def task_runs(self, flow_run_ids: list[Any], name: str) -> list[Any]:
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, TaskRunFilter, TaskRunFilterName

        return self.call(lambda c: c.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=flow_run_ids)),
            task_run_filter=TaskRunFilter(name=TaskRunFilterName(like_=name)),
        ))  # fmt: skip

    def artifacts(self, flow_run_id: Any) -> dict[str, Any]:
        from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

        found = self.call(lambda c: c.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        ))  # fmt: skip
        return {a.key: a for a in found}


@pytest.fixture(scope="session")
def s3_url() -> Iterator[str]:
    with moto_s3(BUCKET) as url:
        yield url


@pytest.fixture(scope="session")
def deployed(
    prefect_server: tuple[str, Path], s3_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployed]:
    """Every deployment of prefect.yaml on the lane's server and a process worker `cpu-a` of the CPU pool (a test
    that needs a second one starts it: `second_cpu_worker`); the `runs` store block is a local folder.

    Workers poll the API every second and the server keeps its state in SQLite: each idle one is a writer that
    can hold up a flow run's state change (a run once waited SQLite's 60 s busy timeout to end Completed)."""
    api, _ = prefect_server
    root = tmp_path_factory.mktemp("deployed")
    project = Deployed(api, root / "home", root / "store")
    project.env.update(CREDENTIALS)
    project.env.update(WORKER_ENV)
    project.env["EVALFLOW_SLOT_LOCKS"] = str(root / "slot-locks")
    out = project.ops("deploy", timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    project.deploy_output = out.stdout
    project.start_worker("evalflow-cpu", "cpu-a")
    yield project
    for proc in project.workers.values():  # the worker and any flow-run process it started
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
