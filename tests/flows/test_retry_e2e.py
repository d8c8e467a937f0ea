"""A UI-style retry of a crashed deployment run, through the Prefect API of a real `prefect server`:
the same flow run id runs again and collects only the batches the crash lost."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tasks.server import Endpoint, free_port
from tests.conftest import REPO_ROOT
from tests.faultproxy import FaultProxy
from tests.flows.test_resume_e2e import cache_records, config_data, pairs

pytestmark = pytest.mark.e2e


def wait_for(predicate, timeout: float, what: str, interval: float = 0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `prefect server start` on loopback with its own home and database."""
    home = tmp_path_factory.mktemp("prefect-server-home")
    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    log = (home / "server.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    api = f"http://127.0.0.1:{port}/api"

    def healthy() -> bool:
        assert proc.poll() is None, (home / "server.log").read_text()[-2000:]
        try:
            return httpx.get(f"{api}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(healthy, 180, "prefect server")
    yield api
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(30)


async def _api(api: str, call):
    from prefect.client.orchestration import PrefectClient

    async with PrefectClient(api) as client:
        return await call(client)


def test_retry_of_a_crashed_deployment_run_collects_only_lost_batches(
    prefect_server: str, endpoint: Endpoint, tmp_path: Path
) -> None:
    from prefect.states import Crashed, Scheduled

    proxy = FaultProxy(endpoint.base_url.removesuffix("/v1")).start()
    env = {**os.environ, "PREFECT_API_URL": prefect_server, "PYTHONPATH": str(REPO_ROOT)}
    serve = subprocess.Popen(
        [sys.executable, "-c", "from flows.eval import eval_flow; eval_flow.serve(name='retry-test', limit=1)"],
        cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        store = tmp_path / "store"
        data = config_data(store, proxy.base_url, endpoint.model)
        data["benchmarks"][0]["limit"] = 12  # 6 batches of 4 rollouts

        async def start(client):
            deployment = await client.read_deployment_by_name("eval/retry-test")
            return await client.create_flow_run_from_deployment(deployment.id, parameters={"config": data})

        def deployed() -> bool:
            try:
                return bool(asyncio.run(_api(prefect_server, lambda c: c.read_deployment_by_name("eval/retry-test"))))
            except Exception:
                return False

        wait_for(deployed, 120, "the served deployment")
        flow_run = asyncio.run(_api(prefect_server, start))

        # kill the flow run's process (the runner's child) once two batches are persisted
        def two_batches_persisted() -> bool:
            if len(cache_records(store)) >= 2:
                return True
            state = asyncio.run(_api(prefect_server, lambda c: c.read_flow_run(flow_run.id))).state
            assert not state.is_final(), f"the run ended before it could be killed: {state}"
            return False

        wait_for(two_batches_persisted, 600, "two persisted batches", interval=0.5)
        children = subprocess.run(["pgrep", "-P", str(serve.pid)], capture_output=True, text=True).stdout.split()
        assert children, "no flow-run process under the runner"
        for pid in children:
            os.kill(int(pid), signal.SIGKILL)
        time.sleep(1)
        persisted = len(cache_records(store))
        assert 2 <= persisted < 6

        async def crash_then_retry(client):
            run = await client.read_flow_run(flow_run.id)
            if not run.state.is_crashed():
                await client.set_flow_run_state(flow_run.id, Crashed(message="killed by the test"), force=True)
            # what the UI's Retry button does: the same flow run, scheduled again
            await client.set_flow_run_state(flow_run.id, Scheduled(name="AwaitingRetry"), force=True)

        before = proxy.counts.forwarded
        asyncio.run(_api(prefect_server, crash_then_retry))

        def finished():
            run = asyncio.run(_api(prefect_server, lambda c: c.read_flow_run(flow_run.id)))
            return run if run.state.is_final() else None

        final = wait_for(finished, 600, "the retried run to finish", interval=1.0)
        assert final.state.is_completed(), final.state
        assert final.run_count >= 2  # the same flow run id ran again
        assert proxy.counts.forwarded - before == (6 - persisted) * 4
        run_dirs = [d for d in (store / "runs").iterdir() if (d / "metrics.json").exists()]
        assert len(run_dirs) == 1
        assert pairs(str(run_dirs[0])) == sorted({(f"gsm-{i:04d}", r) for i in range(12) for r in range(2)})
    finally:
        os.killpg(serve.pid, signal.SIGKILL)
        serve.wait()
        proxy.stop()
