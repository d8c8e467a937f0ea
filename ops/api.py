"""A Prefect API for a run in this process: the server PREFECT_API_URL names, else a temporary one
that dies with this process.

Prefect would start the same temporary server (uvicorn with its `create_app`) itself, but as a plain
child: a SIGKILLed run left it running (one was alive 18 minutes later, 209 MB). Ours runs under
tasks/serving/reaper.py, which takes it down when this process goes, however it goes, and with the
analytics settings of core.prefect_env forced, whatever the caller's environment says.

Start-up is most of a cached rerun's time, so the server is started before the caller's own imports
and checks (`started_api`, then `serving` when the flow is about to run), on a database of its own
that is migrated once: Prefect checks its migrations on every start (seconds, even with nothing to
do), so a database that this Prefect version has migrated starts with the check off. It lives under
PREFECT_HOME (a test with its own home gets its own), one file per Prefect version (no downgrade),
and keeps the runs' history as Prefect's own temporary server does. A database URL set in the
environment is used as it is, migrations included.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path

import httpx
from filelock import FileLock

from core.ports import free_port
from core.prefect_env import PREFECT_ENV, SERVER_ENV
from errors import EvalflowError
from tasks.serving import reaper

REAPER = reaper.__file__
STARTUP_TIMEOUT_S = float(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180"))
DRAIN_TIMEOUT_S = 10.0
DATABASE_URL_VARS = ("PREFECT_SERVER_DATABASE_CONNECTION_URL", "PREFECT_API_DATABASE_CONNECTION_URL")


class ApiError(EvalflowError, RuntimeError):
    """The temporary Prefect API did not start; the message holds the end of its log."""

    kind = "ops"


class ApiDatabase:
    """The temporary API's SQLite file and whether it still needs Prefect's migrations.

    The first process to start on a new file migrates it under a file lock and marks it done once
    its server answers; a process that starts meanwhile waits for the lock, then skips the check."""

    def __init__(self, home: Path, version: str) -> None:
        self.directory = home / "evalflow-api"
        self.path = self.directory / f"prefect-{version}.db"
        self.marker = self.path.with_name(self.path.name + ".migrated")
        self._lock: FileLock | None = None

    @property
    def migrated(self) -> bool:
        return self.marker.exists() and self.path.exists()

    def settings(self) -> dict[str, str]:
        """The server's database settings; takes the migration lock when this process migrates."""
        self.directory.mkdir(parents=True, exist_ok=True)
        if not self.migrated:
            lock = FileLock(str(self.path.with_name(self.path.name + ".lock")))
            lock.acquire(timeout=STARTUP_TIMEOUT_S)  # another process migrating: wait, then reuse its work
            if self.migrated:
                lock.release()
            else:
                self._lock = lock
        return {
            "PREFECT_SERVER_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{self.path}",
            "PREFECT_SERVER_DATABASE_MIGRATE_ON_START": "false" if self._lock is None else "true",
        }

    def release(self, served: bool) -> None:
        """After the server answered (`served`: its start-up migrated the file) or failed."""
        if self._lock is None:
            return
        if served:
            self.marker.write_text("migrated by the temporary API's first start\n")
        self._lock.release()
        self._lock = None


class TemporaryApi:
    """A Prefect API server started in the background; `serving` waits for it and points Prefect at it."""

    def __init__(self, database: ApiDatabase | None) -> None:
        self.database = database
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/api"
        spec = find_spec("prefect")
        assert spec is not None and spec.origin is not None  # an installed package (evalflow depends on it)
        prefect_dir = Path(spec.origin).parent
        server = [sys.executable, "-m", "uvicorn", "--app-dir", str(prefect_dir.parent), "--factory",
                  "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(self.port),
                  "--log-level", "error", "--lifespan", "on"]  # fmt: skip
        env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1",
               **SERVER_ENV, **(database.settings() if database else {}), **PREFECT_ENV}  # fmt: skip
        with tempfile.NamedTemporaryFile(prefix="evalflow-prefect-api-", suffix=".log", delete=False) as log:
            self.proc = subprocess.Popen(
                [sys.executable, REAPER, str(os.getpid()), "--", *server],
                env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        self.log = Path(log.name)

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ApiError(f"the temporary Prefect API exited ({self.proc.returncode}): {self._log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            time.sleep(0.05)
        raise ApiError(f"the temporary Prefect API did not answer in {STARTUP_TIMEOUT_S:.0f} s: {self._log_tail()}")

    def _log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:]

    @contextlib.contextmanager
    def serving(self) -> Iterator[str]:
        """Wait until the server answers, then run Prefect inside against it; send what is queued at the end."""
        from prefect.settings import PREFECT_API_URL, temporary_settings

        try:
            self.wait_healthy()
        finally:
            if self.database is not None:
                self.database.release(served=self.proc.poll() is None)
        try:
            with temporary_settings({PREFECT_API_URL: self.url}):
                yield self.url
        finally:
            _drain_to_api()

    def stop(self) -> None:
        if self.database is not None:  # stopped before it answered (the caller's checks failed)
            self.database.release(served=False)
        if self.proc.poll() is None:
            self.proc.terminate()  # the reaper stops the server's group
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.unlink(missing_ok=True)


def _drain_to_api(timeout_s: float = DRAIN_TIMEOUT_S) -> None:
    """Send the logs and events still queued for the API before it goes (Prefect does this at exit,
    when its own temporary API would still be up)."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (APILogWorker, EventsWorker):
        with contextlib.suppress(Exception):
            worker.drain_all(timeout=timeout_s)


def api_database() -> ApiDatabase | None:
    """The temporary API's own database, or None when the environment names one (used as it is)."""
    if any(os.environ.get(name) for name in DATABASE_URL_VARS):
        return None
    return ApiDatabase(Path(os.environ.get("PREFECT_HOME") or "~/.prefect").expanduser(), version("prefect"))


def running_local_server() -> str | None:
    """The API URL of this checkout's own Prefect server (`evalflow local server`) when it is running."""
    from ops import local

    if local.server_pid() is None:
        return None
    with contextlib.suppress(httpx.HTTPError):
        if httpx.get(f"{local.DEFAULT_API}/health", timeout=2).status_code == 200:
            return local.DEFAULT_API
    return None


@contextlib.contextmanager
def started_api() -> Iterator[TemporaryApi | None]:
    """A temporary API starting in the background (None when PREFECT_API_URL names a server), stopped on
    exit; the caller does its own imports and checks meanwhile, then runs its flow in `api.serving()`.

    It starts before Prefect is imported here (seconds): an API URL that only Prefect's settings know
    (a profile, a .env file) is looked up meanwhile, and then the server is stopped unused."""
    if os.environ.get("PREFECT_API_URL"):
        yield None
        return
    if local := running_local_server():  # `make server`/`make demo` left one up: runs show in its UI
        os.environ["PREFECT_API_URL"] = local
        yield None
        return
    api = TemporaryApi(api_database())
    try:
        from prefect.settings import get_current_settings

        configured = bool(get_current_settings().api.url)
        if configured:
            api.stop()
        yield None if configured else api
    finally:
        api.stop()


@contextlib.contextmanager
def prefect_api() -> Iterator[str | None]:
    """Yields the temporary API's URL (None when PREFECT_API_URL names a server): flows run inside use it."""
    with started_api() as api:
        if api is None:
            yield None
            return
        with api.serving() as url:
            yield url
