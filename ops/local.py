"""A local Prefect setup through Prefect's own CLI: server, work pools, blocks, deployments, workers, runs.

`evalflow local ...` and `evalflow demo` call these. With PREFECT_API_URL set, that server is used and
none is started; otherwise a server on 127.0.0.1:4200 keeps its database in `.prefect/` in the repo
(gitignored), where the workers' logs and pid files go too. Every Prefect process started here has
analytics off.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID

import httpx

from core.config import REPO_ROOT
from core.prefect_env import PREFECT_ENV
from errors import EvalflowError

if TYPE_CHECKING:
    from prefect.types import DateTime

# the local server's database, the workers' logs and pid files (EVALFLOW_PREFECT_HOME moves them)
HOME = Path(os.environ.get("EVALFLOW_PREFECT_HOME") or REPO_ROOT / ".prefect").resolve()
PORT = int(os.environ.get("EVALFLOW_PREFECT_PORT", "4200"))
POOLS = ("evalflow-cpu", "evalflow-gpu")
DEFAULT_API = f"http://127.0.0.1:{PORT}/api"
SMOKE = "eval/smoke"
WORKER_QUERY_S = "2"  # a local worker's poll for new runs: one light API call, and a run starts within 2 s
WAITING_HINT_S = 60.0  # a run still scheduled this long after it was created: say that it waits for a worker


class OpsError(EvalflowError, RuntimeError):
    """A local operation that cannot go on; the message says what to do."""

    kind = "ops"


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


def prefect_cli(
    *args: str, capture: bool = False, new_session: bool = False, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Prefect's CLI, from the repo root (where prefect.yaml is) with `child_env()` (and `env` over it)."""
    return subprocess.run(
        [sys.executable, "-m", "prefect", "--no-prompt", *args], cwd=REPO_ROOT, env={**child_env(), **(env or {})},
        capture_output=capture, text=True, start_new_session=new_session,
    )  # fmt: skip


def healthy(timeout: float = 2.0) -> bool:
    try:
        return httpx.get(f"{api_url()}/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def server_pid() -> int | None:
    """The pid of the Prefect server started here (`server()`), if it is running."""
    return _pid_alive(HOME / "server.pid")


def _pid_alive(pid_file: Path) -> int | None:
    try:
        pid = int(pid_file.read_text())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def start_server() -> float:
    """`prefect server start` on 127.0.0.1 in the background (unless the one started here still runs),
    without waiting for it; when it was started (monotonic), for `server(started=...)`.

    Not `prefect server start --background`: that leaves the server's stdout/stderr on pipes nobody reads
    once the CLI exits, and the server dies of the broken pipe the first time it logs (here: a scheduler
    traceback soon after the nightly deployment is created). Ours logs to `.prefect/server.log`.
    """
    if "PREFECT_API_URL" in os.environ:
        raise OpsError(f"PREFECT_API_URL={api_url()} does not answer: start that server, or unset the variable")
    if _pid_alive(HOME / "server.pid") is None:
        cmd = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(PORT),
               "--analytics-off"]  # fmt: skip
        _spawn("server", cmd)
    return time.monotonic()


def server(timeout_s: int = 180, started: float | None = None) -> None:
    """Start the server unless one answers (`start_server`), then wait until it does. `started`: a
    `start_server()` already began it (the demo creates the vLLM runtime meanwhile)."""
    if started is None:
        if healthy():
            print(f"Prefect server: {ui_url()} (already running)")
            return
        started = start_server()
    if prefect_cli("server", "status", "--wait", "--timeout", str(timeout_s)).returncode:
        raise OpsError(
            f"the Prefect server did not answer within {timeout_s} s (log: {HOME / 'server.log'}); "
            "`evalflow local stop` stops it"
        )
    print(f"Prefect server: {ui_url()} (started in {time.monotonic() - started:.0f} s, home {HOME})")


async def _existing_pools() -> set[str]:
    from prefect.client.orchestration import PrefectClient

    async with PrefectClient(api_url()) as client:
        return {pool.name for pool in await client.read_work_pools()}


def pools() -> None:
    """The process work pools the deployments name (an existing pool is kept as configured)."""
    existing = asyncio.run(_existing_pools())  # one API call instead of a Prefect CLI process per pool
    for pool in POOLS:
        if pool in existing:
            print(f"work pool {pool}: exists")
            continue
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


def _spawn(name: str, cmd: list[str], env: dict[str, str] | None = None) -> int:
    """Start a long-running process in its own session, output to .prefect/<name>.log."""
    HOME.mkdir(exist_ok=True)
    with (HOME / f"{name}.log").open("ab") as log:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env={**child_env(), **(env or {})}, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    (HOME / f"{name}.pid").write_text(str(proc.pid))
    return proc.pid


def slots(register: bool = True) -> list[dict[str, Any]]:
    """Register this host's server slots (its Prefect limit, so `collection.shards: auto` counts them
    before its first run) and print every host's: slots, busy, free."""
    from tasks.serving.slots import SLOT_PREFIX, ensure_limit, host_slots, limit_name

    async def go() -> list[Any]:
        from prefect.client.orchestration import get_client

        if register:
            mine = host_slots("gpu")  # the host's GPUs, else one CPU slot (EVALFLOW_SLOTS overrides)
            await ensure_limit(limit_name(), len(mine.devices))
            devices = ", ".join(d or "all cores" for d in mine.devices)
            print(f"{limit_name()}: {len(mine.devices)} {mine.kind} slot(s): {devices}")
        async with get_client() as client:
            return await client.read_global_concurrency_limits(limit=200, offset=0)

    from prefect.settings import PREFECT_API_URL, temporary_settings

    # the server Prefect's settings name, else ours: with neither set Prefect would start a temporary one (~10 s)
    # and register the limit there
    with temporary_settings(updates={PREFECT_API_URL: PREFECT_API_URL.value() or api_url()}):
        limits = asyncio.run(go())
    rows = [{"limit": lim.name, "slots": lim.limit, "busy": lim.active_slots,
             "free": max(0, lim.limit - lim.active_slots)}
            for lim in limits if lim.name.startswith(SLOT_PREFIX)]  # fmt: skip
    for row in rows:
        print(f"{row['limit']}: {row['slots']} slots, {row['busy']} busy, {row['free']} free")
    print(f"total: {sum(r['free'] for r in rows)} of {sum(r['slots'] for r in rows)} server slots free")
    return rows


def worker(pool: str = "evalflow-cpu") -> None:
    """`prefect worker start` for `pool` in the background (Prefect has no --background for workers),
    after registering this host's server slots."""
    slots()
    name = f"worker-{pool}"
    pid = _pid_alive(HOME / f"{name}.pid")
    if pid:
        print(f"worker for {pool}: running (pid {pid})")
        return
    # a run is picked up within WORKER_QUERY_S of its creation (Prefect's default: 10 s)
    query = {"PREFECT_WORKER_QUERY_SECONDS": os.environ.get("PREFECT_WORKER_QUERY_SECONDS", WORKER_QUERY_S)}
    pid = _spawn(name, [sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--type", "process"], query)
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


def parameters(params: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` pairs as `prefect deployment run --param` reads them: the value as JSON, else as text."""
    parsed: dict[str, Any] = {}
    for spec in params:
        key, sep, value = spec.partition("=")
        if not sep or not key:
            raise OpsError(f"--param {spec!r}: expected KEY=VALUE")
        try:
            parsed[key] = json.loads(value)
        except ValueError:
            parsed[key] = value
    return parsed


def log_line(log: Any) -> str:
    """`HH:MM:SS LEVEL message`, in local time."""
    return f"{log.timestamp.astimezone():%H:%M:%S} {logging.getLevelName(log.level):<7} {log.message}"


class LogFollower:
    """New log lines of one flow run, oldest first, each once. Logs reach the API in batches, and not always
    in timestamp order, so each read looks back `overlap_s` before the newest line seen and skips known ids."""

    def __init__(self, client: Any, flow_run_id: UUID, overlap_s: float = 60.0, page: int = 200) -> None:
        self.client, self.flow_run_id, self.overlap_s, self.page = client, flow_run_id, overlap_s, page
        self.seen: set[UUID] = set()
        self.newest: datetime | None = None

    async def new_lines(self) -> list[str]:
        from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId, LogFilterTimestamp
        from prefect.client.schemas.sorting import LogSort

        after = self.newest - timedelta(seconds=self.overlap_s) if self.newest else None
        # pydantic validates the datetime into Prefect's DateTime, the only type the filter's signature names
        since = LogFilterTimestamp(after_=cast("DateTime | None", after))
        log_filter = LogFilter(flow_run_id=LogFilterFlowRunId(any_=[self.flow_run_id]), timestamp=since)
        fresh: list[Any] = []
        offset = 0
        while True:
            logs = await self.client.read_logs(
                log_filter=log_filter, limit=self.page, offset=offset, sort=LogSort.TIMESTAMP_ASC
            )
            fresh += [log for log in logs if log.id not in self.seen]
            if len(logs) < self.page:
                break
            offset += self.page
        self.seen.update(log.id for log in fresh)
        if fresh:
            self.newest = max(self.newest or fresh[-1].timestamp, *(log.timestamp for log in fresh))
        return [log_line(log) for log in fresh]


async def follow(
    flow_run_id: UUID,
    poll_s: float = 2.0,
    timeout_s: float | None = None,
    settle_s: float = 5.0,
    out: Callable[[str], None] = print,
    done: Callable[[], bool] = lambda: False,
) -> Any:
    """Print the flow run's logs and state changes as they come until it ends (or `timeout_s` passes);
    return the flow run as last read. After its final state, lines are read for `settle_s` more, unless
    `done()` says the run's own last line was printed already."""
    from prefect.client.orchestration import PrefectClient

    deadline = time.monotonic() + timeout_s if timeout_s is not None else None
    state_name: str | None = None
    waiting: float | None = time.monotonic()  # until the hint that no worker took the run is shown
    async with PrefectClient(api_url()) as client:
        follower = LogFollower(client, flow_run_id)
        while True:
            flow_run = await client.read_flow_run(flow_run_id)
            for line in await follower.new_lines():
                out(line)
            if flow_run.state_name != state_name:
                state_name = flow_run.state_name
                out(f"{datetime.now():%H:%M:%S} state: {state_name}")
            scheduled = flow_run.state is not None and flow_run.state.is_scheduled()
            if scheduled and waiting is not None and time.monotonic() - waiting > WAITING_HINT_S:
                out(f"{datetime.now():%H:%M:%S} no worker took the run yet (`evalflow local worker` starts one)")
                waiting = None
            if flow_run.state is not None and flow_run.state.is_final():
                # the run's last lines reach the API after its final state (sent every 2 s, and at exit)
                settled = time.monotonic() + settle_s
                while time.monotonic() < settled and not done():
                    await asyncio.sleep(poll_s)
                    for line in await follower.new_lines():
                        out(line)
                return flow_run
            if deadline is not None and time.monotonic() > deadline:
                return flow_run
            await asyncio.sleep(poll_s)


async def _create_run(deployment: str, params: dict[str, Any]) -> UUID:
    from prefect.client.orchestration import PrefectClient
    from prefect.deployments import arun_deployment

    async with PrefectClient(api_url()) as client:
        flow_run = await arun_deployment(deployment, client=client, parameters=params, timeout=0, as_subflow=False)
    return flow_run.id


def headline(report: str) -> str | None:
    """The run's headline table from the metrics.json beside its (local) report, if there is one."""
    from tasks.reporting.report import format_terminal_summary

    metrics = Path(report).with_name("metrics.json")
    if not metrics.is_file():
        return None
    data = json.loads(metrics.read_text())
    for extra in ("run_info", "comparison"):
        data.pop(extra, None)
    return format_terminal_summary(data, {})


def run(deployment: str, params: list[str], timeout_s: int = 3600) -> int:
    """Start a run of `deployment` and follow it here: its log lines (`HH:MM:SS LEVEL message`, polled every
    2 s) and state changes until it ends, then its headline table, report and UI URL. Ctrl-C stops
    following, not the run."""
    from prefect.exceptions import ObjectNotFound, PrefectHTTPStatusError

    try:
        flow_run_id = asyncio.run(_create_run(deployment, parameters(params)))
    except ObjectNotFound:
        print(f"deployment {deployment!r} not found on {api_url()} (`evalflow local deploy` creates them)")
        return 1
    except PrefectHTTPStatusError as exc:  # refused: parameters that do not fit the deployment's schema
        print(f"Prefect refused a run of {deployment}: {exc.response.json().get('detail') or exc}")
        return 1
    url = ui_url(f"/runs/flow-run/{flow_run_id}")
    print(f"flow run UUID: {flow_run_id}\nflow run: {url}", flush=True)
    from tasks.reporting.report import FINISHED_MARK

    summarised = False  # whether the run's own last log line (its headline table and report) was shown

    def out(line: str) -> None:
        nonlocal summarised
        summarised = summarised or FINISHED_MARK in line
        print(line, flush=True)

    try:
        final = asyncio.run(follow(flow_run_id, timeout_s=timeout_s, out=out, done=lambda: summarised))
    except KeyboardInterrupt:
        print(f"\nstopped following; the run goes on: {url}\ncancel it with `prefect flow-run cancel {flow_run_id}`")
        return 130
    state = final.state
    if state is None or not state.is_final():
        print(f"still {final.state_name} after {timeout_s} s; it goes on: {url}")
        return 1
    _, report = asyncio.run(_outcome(flow_run_id))
    print(f"state: {final.state_name}" + (f" ({state.message})" if not state.is_completed() else ""))
    table = headline(report) if report and not summarised else None
    if table:
        print(table)
    if report:
        print(f"report: {report}")
    print(f"flow run: {url}")
    print(f"Prefect UI: {ui_url()}  ·  `evalflow local stop` (make stop) stops the server and workers")
    return 0 if state.is_completed() else 1


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
    stop_server()


def stop_server() -> None:
    """Stop the server started here (not the workers)."""
    _stop(HOME / "server.pid")
