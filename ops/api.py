"""A Prefect API for a run in this process: the server PREFECT_API_URL names, else a temporary one
that dies with this process.

Prefect would start the same temporary server (uvicorn with its `create_app`) itself, but as a plain
child: a SIGKILLed run left it running (one was alive 18 minutes later, 209 MB). Ours runs under
tasks/serving/reaper.py, which takes it down when this process goes, however it goes, and with the
analytics settings of core.prefect_env forced, whatever the caller's environment says.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from core.prefect_env import PREFECT_ENV
from tasks.serving import reaper

REAPER = reaper.__file__
STARTUP_TIMEOUT_S = float(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180"))


class ApiError(RuntimeError):
    """The temporary Prefect API did not start; the message holds the end of its log."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ApiError(f"the temporary Prefect API exited ({proc.returncode}): {log.read_text()[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise ApiError(f"the temporary Prefect API did not answer in {STARTUP_TIMEOUT_S:.0f} s: {log.read_text()[-2000:]}")


def _drain_to_api(timeout_s: float = 15.0) -> None:
    """Send the logs and events still queued for the API before it goes (Prefect does this at exit,
    when its own temporary API would still be up)."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (APILogWorker, EventsWorker):
        with contextlib.suppress(Exception):
            worker.drain_all(timeout=timeout_s)


@contextlib.contextmanager
def prefect_api() -> Iterator[str | None]:
    """Yields the temporary API's URL (None when PREFECT_API_URL names a server): flows run inside use it."""
    from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

    if get_current_settings().api.url:
        yield None
        return
    import prefect

    port = _free_port()
    url = f"http://127.0.0.1:{port}/api"
    server = [sys.executable, "-m", "uvicorn", "--app-dir", str(prefect.__module_path__.parent), "--factory",
              "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(port),
              "--log-level", "error", "--lifespan", "on"]  # fmt: skip
    env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1",
           **PREFECT_ENV}  # fmt: skip
    with tempfile.NamedTemporaryFile(prefix="evalflow-prefect-api-", suffix=".log", delete=False) as log:
        proc = subprocess.Popen(
            [sys.executable, REAPER, str(os.getpid()), "--", *server],
            env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    log_path = Path(log.name)
    try:
        _wait_healthy(url, proc, log_path)
        with temporary_settings({PREFECT_API_URL: url}):
            yield url
    finally:
        _drain_to_api()
        proc.terminate()  # the reaper stops the server's group
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log_path.unlink(missing_ok=True)
