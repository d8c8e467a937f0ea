"""A local Prefect setup through Prefect's own CLI: server, work pools, blocks, deployments, workers, runs.

`evalflow local ...` and `evalflow demo` call these. With PREFECT_API_URL set, that server is used and
none is started; otherwise a server on 127.0.0.1:4200 keeps its database in `.prefect/` in the repo
(gitignored), where the workers' logs and pid files go too. Every Prefect process started here has
analytics off.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx

from core.config import REPO_ROOT
from core.prefect_env import PREFECT_ENV

HOME = REPO_ROOT / ".prefect"
PORT = int(os.environ.get("EVALFLOW_PREFECT_PORT", "4200"))
POOLS = ("evalflow-cpu", "evalflow-gpu")
DEFAULT_API = f"http://127.0.0.1:{PORT}/api"
SMOKE = "eval/smoke"


class OpsError(RuntimeError):
    """A local operation that cannot go on; the message says what to do."""


def api_url() -> str:
    return os.environ.get("PREFECT_API_URL") or DEFAULT_API


def ui_url(path: str = "") -> str:
    return api_url().removesuffix("/api") + path


def child_env() -> dict[str, str]:
    """The environment of every Prefect process started here: this server, our home, no analytics."""
    env = {**os.environ, "PREFECT_API_URL": api_url(), **PREFECT_ENV}
    if "PREFECT_API_URL" not in os.environ:  # our own server: our own home (database, results, logs)
        env["PREFECT_HOME"] = str(HOME)
    return env


def prefect_cli(*args: str, capture: bool = False, new_session: bool = False) -> subprocess.CompletedProcess[str]:
    """Prefect's CLI, from the repo root (where prefect.yaml is) with `child_env()`."""
    return subprocess.run(
        [sys.executable, "-m", "prefect", "--no-prompt", *args], cwd=REPO_ROOT, env=child_env(),
        capture_output=capture, text=True, start_new_session=new_session,
    )  # fmt: skip


def healthy(timeout: float = 2.0) -> bool:
    try:
        return httpx.get(f"{api_url()}/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def _pid_alive(pid_file: Path) -> int | None:
    try:
        pid = int(pid_file.read_text())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def server(timeout_s: int = 180) -> None:
    """`prefect server start` on 127.0.0.1 in the background unless a server answers, then wait until it does.

    Not `prefect server start --background`: that leaves the server's stdout/stderr on pipes nobody reads
    once the CLI exits, and the server dies of the broken pipe the first time it logs (here: a scheduler
    traceback soon after the nightly deployment is created). Ours logs to `.prefect/server.log`.
    """
    if healthy():
        print(f"Prefect server: {ui_url()} (already running)")
        return
    if "PREFECT_API_URL" in os.environ:
        raise OpsError(f"PREFECT_API_URL={api_url()} does not answer: start that server, or unset the variable")
    started = time.monotonic()
    if _pid_alive(HOME / "server.pid") is None:
        cmd = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(PORT),
               "--analytics-off"]  # fmt: skip
        _spawn("server", cmd)
    if prefect_cli("server", "status", "--wait", "--timeout", str(timeout_s)).returncode:
        raise OpsError(
            f"the Prefect server did not answer within {timeout_s} s (log: {HOME / 'server.log'}); "
            "`evalflow local stop` stops it"
        )
    print(f"Prefect server: {ui_url()} (started in {time.monotonic() - started:.0f} s, home {HOME})")


def pools() -> None:
    """The process work pools the deployments name (an existing pool is kept as configured)."""
    for pool in POOLS:
        out = prefect_cli("work-pool", "create", pool, "--type", "process", capture=True)
        text = " ".join((out.stdout + out.stderr).split())  # Rich wraps lines at the terminal width
        if out.returncode and "already exists" not in text:
            raise OpsError(f"`prefect work-pool create {pool}` failed: {text}")
        print(f"work pool {pool}: {'exists' if out.returncode else 'created'}")


def blocks(overwrite: bool = False) -> list[str]:
    """Register the block types and save the defaults (blocks/defaults.yaml) on this server."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from blocks.defaults import save_defaults

    with temporary_settings(updates={PREFECT_API_URL: api_url()}):
        return save_defaults(overwrite)


def deploy() -> None:
    """Work pools, blocks, then every deployment in prefect.yaml (`prefect deploy --all`)."""
    pools()
    blocks()
    if prefect_cli("deploy", "--all").returncode:
        raise OpsError("`prefect deploy --all` failed (see above)")


def _spawn(name: str, cmd: list[str]) -> int:
    """Start a long-running process in its own session, output to .prefect/<name>.log."""
    HOME.mkdir(exist_ok=True)
    with (HOME / f"{name}.log").open("ab") as log:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=child_env(), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    (HOME / f"{name}.pid").write_text(str(proc.pid))
    return proc.pid


def worker(pool: str = "evalflow-cpu") -> None:
    """`prefect worker start` for `pool` in the background (Prefect has no --background for workers)."""
    name = f"worker-{pool}"
    pid = _pid_alive(HOME / f"{name}.pid")
    if pid:
        print(f"worker for {pool}: running (pid {pid})")
        return
    pid = _spawn(name, [sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--type", "process"])
    print(f"worker for {pool}: started (pid {pid}, log {HOME / name}.log)")


async def _outcome(flow_run_id: UUID) -> tuple[Any, str | None]:
    """The flow run as it ended, and its HTML report from the `*-html` link artifact (`[text](url)`)."""
    from prefect.client.orchestration import PrefectClient
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async with PrefectClient(api_url()) as client:
        flow_run = await client.read_flow_run(flow_run_id)
        artifacts = await client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    for artifact in artifacts:
        match = re.search(r"\((\S+\.html)\)", str(artifact.data))
        if (artifact.key or "").endswith("-html") and match:
            return flow_run, match.group(1).removeprefix("file://")
    return flow_run, None


def run(deployment: str, params: list[str], timeout_s: int = 3600) -> int:
    """`prefect deployment run --watch` (its logs stream here), then the UI URL, final state and report."""
    cmd = [sys.executable, "-m", "prefect", "--no-prompt", "deployment", "run", deployment, "--watch",
           "--watch-timeout", str(timeout_s), *(arg for param in params for arg in ("--param", param))]  # fmt: skip
    # Rich wraps at 80 columns when its output is a pipe (ours, read here): keep the terminal's width
    env = {**child_env(), "COLUMNS": str(shutil.get_terminal_size().columns)}
    flow_run_id: UUID | None = None
    with subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            print(line, end="", flush=True)
            if flow_run_id is None and (match := re.search(r"UUID:\s*([0-9a-f-]{36})", line)):
                flow_run_id = UUID(match.group(1))
                print(f"flow run: {ui_url(f'/runs/flow-run/{flow_run_id}')}", flush=True)
    if flow_run_id is None:  # refused before a run was created (unknown deployment, invalid parameters)
        return proc.returncode or 1
    final, report = asyncio.run(_outcome(flow_run_id))
    state = final.state
    print(f"state: {final.state_name}" + (f" ({state.message})" if state and not state.is_completed() else ""))
    if report:
        print(f"report: {report}")
    print(f"Prefect UI: {ui_url()}  ·  `evalflow local stop` (make stop) stops the server and workers")
    return 0 if state and state.is_completed() else 1


def _stop(pid_file: Path) -> None:
    """Stop the session a pid file names (SIGTERM, then SIGKILL after 10 s) and remove the file."""
    pid = _pid_alive(pid_file)
    if pid:
        os.killpg(pid, signal.SIGTERM)
        for _ in range(100):
            if _pid_alive(pid_file) is None:
                break
            time.sleep(0.1)
        else:
            os.killpg(pid, signal.SIGKILL)
        print(f"{pid_file.stem}: stopped (pid {pid})")
    pid_file.unlink(missing_ok=True)


def stop() -> None:
    """Stop the workers started here, then the server started here."""
    for pid_file in sorted(HOME.glob("worker-*.pid")):
        _stop(pid_file)
    _stop(HOME / "server.pid")


def demo() -> int:
    """Everything for the smoke deployment: server, work pools, blocks, deployments, a CPU worker, a run."""
    server()
    deploy()
    worker("evalflow-cpu")
    return run(SMOKE, [])
