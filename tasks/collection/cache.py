"""Where batch results are cached, and how concurrent runs avoid collecting the same batch twice.

Prefect does the bookkeeping: a batch task's cache key is the batch's content key, its result
(a small record pointing at the batch's parquet file) is persisted in the run store, and the task
runs under SERIALIZABLE isolation with the lock manager below, so two runs that race on one batch
collect it once: the second waits for the first's lock and then reads its cached result.

The lock manager uses `filelock` (OS-level locks): a lock held by a process that died is released
by the kernel, so a SIGKILLed run never blocks the next one. Prefect's own FileSystemLockManager
keeps lock files that outlive their holder and races between threads of one process.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout
from prefect.filesystems import LocalFileSystem, RemoteFileSystem, WritableFileSystem
from prefect.results import ResultStore

from core import store

# s3fs/fsspec option names that carry secrets: they stay out of the storage block (which Prefect
# saves in its database); s3fs then takes credentials from the environment or its config.
SECRET_OPTIONS = {"key", "secret", "token", "password", "aws_secret_access_key", "aws_session_token"}


class FileLockManager:
    """Prefect LockManager protocol over `filelock` (released by the OS when the holder dies)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._held: dict[str, tuple[str, FileLock]] = {}

    def __deepcopy__(self, memo: dict[int, Any]) -> FileLockManager:  # cache_policy.configure deep-copies
        return self

    def _lock(self, key: str) -> FileLock:
        self.directory.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha256(key.encode()).hexdigest()[:32]
        return FileLock(str(self.directory / f"{name}.lock"), thread_local=False, is_singleton=False)

    def acquire_lock(
        self, key: str, holder: str, acquire_timeout: float | None = None, hold_timeout: float | None = None
    ) -> bool:
        lock = self._lock(key)
        try:
            lock.acquire(timeout=-1 if acquire_timeout is None else acquire_timeout)
        except Timeout:
            return False
        self._held[key] = (holder, lock)
        return True

    async def aacquire_lock(
        self, key: str, holder: str, acquire_timeout: float | None = None, hold_timeout: float | None = None
    ) -> bool:
        """Poll without blocking the event loop (other batches keep running meanwhile)."""
        lock = self._lock(key)
        deadline = None if acquire_timeout is None else time.monotonic() + acquire_timeout
        while True:
            try:
                lock.acquire(timeout=0)
                self._held[key] = (holder, lock)
                return True
            except Timeout:
                if deadline is not None and time.monotonic() >= deadline:
                    return False
                await asyncio.sleep(0.25)

    def release_lock(self, key: str, holder: str) -> None:
        entry = self._held.get(key)
        if entry is None or entry[0] != holder:
            raise ValueError(f"no lock for {key!r} held by {holder!r}")
        del self._held[key]
        entry[1].release()

    def is_locked(self, key: str) -> bool:
        if key in self._held:
            return True
        lock = self._lock(key)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            return True
        lock.release()
        return False

    def is_lock_holder(self, key: str, holder: str) -> bool:
        entry = self._held.get(key)
        return entry is not None and entry[0] == holder

    def wait_for_lock(self, key: str, timeout: float | None = None) -> bool:
        lock = self._lock(key)
        try:
            lock.acquire(timeout=-1 if timeout is None else timeout)
        except Timeout:
            return False
        lock.release()
        return True

    async def await_for_lock(self, key: str, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.is_locked(key):
            if deadline is not None and time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.25)
        return True


def results_url(store_url: str) -> str:
    return store.join(store_url, "cache", "batches")


def result_storage(
    store_url: str, storage_options: dict[str, Any] | None = None, save: bool = True
) -> WritableFileSystem:
    """The Prefect result storage for batch records, inside the run store (local or remote).

    Saved as a block named after the store URL (Prefect requires task result storage to be saved
    server-side); secrets are left out of it (see SECRET_OPTIONS).
    """
    url = results_url(store_url)
    block: WritableFileSystem
    if store.is_local(url):
        block = LocalFileSystem(basepath=url.removeprefix("file://"))
    else:
        settings = {k: v for k, v in (storage_options or {}).items() if k not in SECRET_OPTIONS}
        block = RemoteFileSystem(basepath=url, settings=settings)
    name = "evalflow-results-" + hashlib.sha256(url.encode()).hexdigest()[:16]
    if save:  # a dry run only reads records, which an unsaved block can do without the Prefect API
        block.save(name, overwrite=True, _sync=True)  # type: ignore[call-arg]
    if isinstance(block, RemoteFileSystem):  # this process's copy writes with the credentials; the saved one has none
        block.settings = dict(storage_options or {})
    return block


def lock_directory(store_url: str) -> Path:
    """Locks live next to a local store (shared by every process using it), else in a local cache."""
    if store.is_local(store_url):
        return Path(store_url.removeprefix("file://")) / "cache" / "locks"
    digest = hashlib.sha256(store_url.encode()).hexdigest()[:16]
    return Path.home() / ".cache" / "evalflow" / "locks" / digest


def lookup(storage: WritableFileSystem, key: str) -> Any | None:
    """The cached result for a key, or None: used to plan a run before any server is started."""
    result_store = ResultStore(result_storage=storage)
    if not result_store.exists(key):
        return None
    try:
        return result_store.read(key).result
    except Exception:  # an unreadable record is a miss: the batch is collected again
        return None
