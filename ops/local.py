"""A local Prefect setup for evalflow: server, work pools, blocks, deployments, workers, runs.

    python -m ops.local server            # start a Prefect server on 127.0.0.1 (home: .prefect/) unless one answers
    python -m ops.local deploy            # work pools, blocks (blocks/defaults.yaml), `prefect deploy --all`
    python -m ops.local blocks [--overwrite]  # only the blocks
    python -m ops.local worker [--pool P] # start a process worker in the background
    python -m ops.local run eval/smoke    # `prefect deployment run`, wait, print UI URL, state and report
    python -m ops.local demo              # all of the above for eval/smoke
    python -m ops.local stop              # stop the workers and the server started here

With PREFECT_API_URL set, that server is used and none is started. Long-running processes write
their logs and pid files under `.prefect/` in the repo (gitignored).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]
HOME = REPO_ROOT / ".prefect"
PORT = int(os.environ.get("EVALFLOW_PREFECT_PORT", "4200"))
POOLS = ("evalflow-cpu", "evalflow-gpu")
DEFAULT_API = f"http://127.0.0.1:{PORT}/api"


def api_url() -> str:
    return os.environ.get("PREFECT_API_URL") or DEFAULT_API


def ui_url(path: str = "") -> str:
    return api_url().removesuffix("/api") + path


def child_env() -> dict[str, str]:
    """The environment for Prefect CLI calls, the server and workers: this server, the repo importable."""
    env = {**os.environ, "PREFECT_API_URL": api_url(), "PYTHONPATH": str(REPO_ROOT)}
    if "PREFECT_API_URL" not in os.environ:  # our own server: our own home (database, results, logs)
        env["PREFECT_HOME"] = str(HOME)
    env.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    return env


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


def _spawn(name: str, cmd: list[str]) -> int:
    """Start a long-running process in its own session, output to .prefect/<name>.log."""
    HOME.mkdir(exist_ok=True)
    log = (HOME / f"{name}.log").open("ab")
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=child_env(), stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    (HOME / f"{name}.pid").write_text(str(proc.pid))
    return proc.pid


def server(deadline_s: float = 180.0) -> None:
    if healthy():
        print(f"Prefect server: {ui_url()} (already running)")
        return
    if "PREFECT_API_URL" in os.environ:
        raise SystemExit(f"PREFECT_API_URL={api_url()} does not answer: start that server, or unset the variable")
    pid = _spawn("server", [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                            "--port", str(PORT)])  # fmt: skip
    started = time.monotonic()
    while not healthy():
        if _pid_alive(HOME / "server.pid") is None or time.monotonic() - started > deadline_s:
            tail = (HOME / "server.log").read_text(errors="replace")[-3000:]
            raise SystemExit(f"the Prefect server (pid {pid}) did not become healthy; .prefect/server.log:\n{tail}")
        time.sleep(0.5)
    print(f"Prefect server: {ui_url()} (started in {time.monotonic() - started:.0f} s, pid {pid}, home {HOME})")


async def _ensure_pools() -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists

    async with get_client() as client:
        for pool in POOLS:
            try:
                await client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
                print(f"work pool {pool}: created")
            except ObjectAlreadyExists:
                print(f"work pool {pool}: exists")


def _prefect(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "prefect", *args], cwd=REPO_ROOT, env=child_env(), check=True)


def blocks(overwrite: bool = False) -> None:
    """Register the block types and save the defaults (blocks/defaults.yaml) on this server."""
    os.environ.update({k: v for k, v in child_env().items() if k.startswith("PREFECT_")})
    from blocks.__main__ import save_defaults

    save_defaults(overwrite)


def deploy() -> None:
    os.environ.update({k: v for k, v in child_env().items() if k.startswith("PREFECT_")})
    asyncio.run(_ensure_pools())
    blocks()
    _prefect("--no-prompt", "deploy", "--all")


def worker(pool: str = "evalflow-cpu") -> None:
    name = f"worker-{pool}"
    pid = _pid_alive(HOME / f"{name}.pid")
    if pid:
        print(f"worker for {pool}: running (pid {pid})")
        return
    pid = _spawn(name, [sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--type", "process"])
    print(f"worker for {pool}: started (pid {pid}, log .prefect/{name}.log)")


async def _report_of(flow_run_id: str) -> str | None:
    """The HTML report of a run, from its `*-html` link artifact (stored as markdown `[text](url)`)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async with get_client() as client:
        artifacts = await client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    for artifact in artifacts:
        match = re.search(r"\((\S+\.html)\)", str(artifact.data))
        if (artifact.key or "").endswith("-html") and match:
            return match.group(1).removeprefix("file://")
    return None


async def _wait(flow_run_id: str, timeout_s: float) -> Any:
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        started, last = time.monotonic(), None
        while True:
            run = await client.read_flow_run(flow_run_id)
            if run.state_name != last:
                print(f"  {time.monotonic() - started:6.0f} s  {run.state_name}", flush=True)
                last = run.state_name
            if run.state and run.state.is_final():
                return run
            if time.monotonic() - started > timeout_s:
                raise SystemExit(f"flow run {flow_run_id} is still {run.state_name} after {timeout_s:.0f} s")
            await asyncio.sleep(2)


def run(deployment: str, params: list[str], timeout_s: float = 3600.0) -> int:
    """`prefect deployment run`, then wait for the run and print where everything is."""
    cmd = [
        sys.executable,
        "-m",
        "prefect",
        "deployment",
        "run",
        deployment,
        *(a for p in params for a in ("--param", p)),
    ]
    out = subprocess.run(cmd, cwd=REPO_ROOT, env=child_env(), capture_output=True, text=True)
    print(out.stdout, end="")
    if out.returncode:
        print(out.stderr, file=sys.stderr, end="")
        return out.returncode
    match = re.search(r"UUID:\s*([0-9a-f-]{36})", out.stdout)
    if not match:
        raise SystemExit("could not find the flow run id in `prefect deployment run`'s output")
    flow_run_id = match.group(1)
    os.environ.update({k: v for k, v in child_env().items() if k.startswith("PREFECT_")})
    print(f"flow run: {ui_url(f'/runs/flow-run/{flow_run_id}')}")
    final = asyncio.run(_wait(flow_run_id, timeout_s))
    print(f"state: {final.state_name}" + (f" ({final.state.message})" if not final.state.is_completed() else ""))
    report = asyncio.run(_report_of(flow_run_id))
    if report:
        print(f"report: {report}")
    print(f"Prefect UI: {ui_url()}  ·  `make stop` stops the server and worker")
    return 0 if final.state.is_completed() else 1


def stop() -> None:
    for pid_file in sorted(HOME.glob("*.pid"), key=lambda p: p.name != "server.pid"):  # workers first
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
        pid_file.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.local", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("server")
    sub.add_parser("deploy")
    sub.add_parser("blocks").add_argument("--overwrite", action="store_true", help="replace existing blocks")
    sub.add_parser("worker").add_argument("--pool", default="evalflow-cpu", choices=POOLS)
    run_p = sub.add_parser("run")
    run_p.add_argument("deployment")
    run_p.add_argument("--param", action="append", default=[], help="KEY=VALUE, as `prefect deployment run`")
    sub.add_parser("demo")
    sub.add_parser("stop")
    args = parser.parse_args(argv)
    if args.command == "server":
        server()
    elif args.command == "deploy":
        deploy()
    elif args.command == "blocks":
        blocks(args.overwrite)
    elif args.command == "worker":
        worker(args.pool)
    elif args.command == "run":
        return run(args.deployment, args.param)
    elif args.command == "demo":
        server()
        deploy()
        worker("evalflow-cpu")
        return run("eval/smoke", [])
    elif args.command == "stop":
        stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
