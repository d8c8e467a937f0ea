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

from core.store import Store
from tasks.prefect_sync import sync_call

# A cache record that exists but cannot be read (an older format, a corrupt file): the batch is
# collected again with refresh_cache, so the unreadable record is replaced.
STALE = object()


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


def result_storage(store: Store, save: bool = True) -> WritableFileSystem:
    """The Prefect result storage for batch records, inside the run store (local or remote).

    Saved as a block named after the store URL (Prefect requires task result storage to be saved
    server-side) with the store's public options only: the saved block holds no secret, and a
    process that loads it takes credentials from its environment. This process's copy writes with
    the store's credentials.
    """
    url = store.path("cache", "batches")
    block: WritableFileSystem
    if store.is_local:
        block = LocalFileSystem(basepath=url.removeprefix("file://"))
    else:
        block = RemoteFileSystem(basepath=url, settings=store.options)
    name = "evalflow-results-" + hashlib.sha256(url.encode()).hexdigest()[:16]
    if save:  # a dry run only reads records, which an unsaved block can do without the Prefect API
        sync_call(block.save, name, overwrite=True)
    if isinstance(block, RemoteFileSystem):
        block.settings = store.fsspec_options(url)
    return block


def lock_directory(store: Store) -> Path:
    """Locks live next to a local store (shared by every process using it), else in a local cache."""
    if store.is_local:
        return Path(store.local_path) / "cache" / "locks"
    digest = hashlib.sha256(store.url.encode()).hexdigest()[:16]
    return Path.home() / ".cache" / "evalflow" / "locks" / digest


def lookup(storage: WritableFileSystem, key: str) -> Any:
    """The cached result for a key, None when there is none, or STALE when it cannot be read: used to
    plan a run before any server is started."""
    result_store = ResultStore(result_storage=storage)
    if not result_store.exists(key):
        return None
    try:
        return result_store.read(key).result
    except Exception:  # e.g. a pickled record of a class that has moved since
        return STALE
