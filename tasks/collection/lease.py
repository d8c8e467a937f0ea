"""Batch locks that span machines: leases kept on an S3 store with conditional writes.

A batch task runs under SERIALIZABLE isolation: lock, look the batch up in the cache, collect, write,
unlock. For a local store the lock is a file next to it (tasks/collection/cache.py); nodes that share
only an S3 store need the lock where they all look, so here it is an object on the store:
- taken with `If-None-Match: *` (S3 creates it for exactly one of racing writers);
- renewed by its holder every third of the lease with `If-Match: <its ETag>`;
- taken over by a waiter once the same ETag has stood unrenewed for a whole lease (its holder died:
  SIGKILL, a lost node), again with `If-Match`, so two waiters cannot both take it; the lease is judged
  by the waiter's own clock, never by comparing clocks of two machines;
- taken over at once where the waiter can see that the holder died: a process of the same host, boot
  and PID namespace that no longer exists (a SIGKILLed flow run whose retry lands on the same worker);
- released with a conditional delete.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from pydantic import BaseModel, ConfigDict

from core.logs import get_logger
from core.store import Store
from errors import EvalflowError
from tasks.collection.cache import FileLockManager, lock_directory

LEASE_S = 60.0
POLL_S = 0.5


class LockStoreError(EvalflowError, RuntimeError):
    """The store cannot hold locks (no conditional writes): the message names the store."""

    kind = "store"


def _precondition_failed(exc: BaseException) -> bool:
    """Whether an s3fs error is S3's 412 (or 409 for a conditional write racing another)."""
    if isinstance(exc, FileExistsError):
        return True
    cause: BaseException | None = exc
    while cause is not None:
        code = getattr(cause, "response", {}).get("Error", {}).get("Code")
        if code in ("PreconditionFailed", "ConditionalRequestConflict", "412", "409"):
            return True
        cause = cause.__cause__ or cause.__context__
    return "pre-condition" in str(exc)


def _read_link(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


class LeaseBody(BaseModel):
    """A lease object's content: the holder, its process (enough for a waiter on the same machine to tell
    whether it still lives), and the lease it took. Leases written before the process fields existed lack them."""

    model_config = ConfigDict(extra="forbid")

    holder: str = ""
    host: str | None = None
    boot: str | None = None
    pidns: str | None = None
    pid: int | None = None
    lease_s: float | None = None
    at: float | None = None


def _this_process() -> LeaseBody:
    """This process, as a lease names its holder's."""
    try:
        boot = open("/proc/sys/kernel/random/boot_id").read().strip()  # noqa: SIM115 - one read
    except OSError:
        boot = ""
    return LeaseBody(host=socket.gethostname(), boot=boot, pidns=_read_link("/proc/self/ns/pid"), pid=os.getpid())


def _holder_died(body: LeaseBody) -> bool:
    """Whether the lease's holder is a process of this machine (same host, boot and PID namespace) that is
    gone. Anything else (another machine, an older lease without the fields) is judged by its lease."""
    me = _this_process()
    if not me.boot or not me.pidns or (body.host, body.boot, body.pidns) != (me.host, me.boot, me.pidns):
        return False
    pid = body.pid
    if pid is None or pid == me.pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists, owned by another user
        return False
    return False


class _S3(Protocol):
    """The s3fs calls the leases make (s3fs's `call_s3`, made by fsspec's `sync_wrapper`, reads as returning None)."""

    def call_s3(self, method: str, /, *args: Any, **kwargs: Any) -> dict[str, Any]: ...

    def cat_file(self, path: str) -> bytes: ...


@dataclass
class _Held:
    holder: str
    etag: str
    stop: threading.Event = field(default_factory=threading.Event)
    lost: bool = False


class StoreLeaseLockManager:
    """Prefect's LockManager protocol over lease objects `<store>/cache/locks/<sha>.json`."""

    def __init__(self, store: Store, lease_s: float = LEASE_S) -> None:
        self.store = store
        self.lease_s = lease_s
        fs, root = store.filesystem(store.path("cache", "locks"))
        self.fs = cast(_S3, fs)  # an s3:// store's S3FileSystem (lock_manager)
        self.bucket, _, self.prefix = root.strip("/").partition("/")
        self._held: dict[str, _Held] = {}
        self._seen: dict[str, tuple[str, float]] = {}  # key -> (ETag, when this process first saw it)
        self._mutex = threading.Lock()

    def __deepcopy__(self, memo: dict[int, Any]) -> StoreLeaseLockManager:  # cache_policy.configure deep-copies
        return self

    # -- S3 calls --------------------------------------------------------------------------------
    def _object(self, key: str) -> str:
        return f"{self.prefix}/{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"

    def _put(self, key: str, holder: str, **condition: str) -> str:
        lease = _this_process().model_copy(update={"holder": holder, "lease_s": self.lease_s, "at": time.time()})
        body = lease.model_dump_json().encode()
        return self.fs.call_s3("put_object", Bucket=self.bucket, Key=self._object(key), Body=body, **condition)["ETag"]

    def _etag(self, key: str) -> str | None:
        try:
            return self.fs.call_s3("head_object", Bucket=self.bucket, Key=self._object(key))["ETag"]
        except FileNotFoundError:
            return None

    def _read(self, key: str) -> tuple[str, LeaseBody] | None:
        """The lock's ETag and then its body (which may be newer than the ETag: a write conditional on
        that ETag then fails), or None where there is none."""
        etag = self._etag(key)
        if etag is None:
            return None
        try:
            body = LeaseBody.model_validate_json(self.fs.cat_file(f"{self.bucket}/{self._object(key)}"))
        except FileNotFoundError:
            return None
        except ValueError:  # unreadable (or someone else's object): judged by its lease alone
            body = LeaseBody()
        return etag, body

    # -- taking and keeping a lease ----------------------------------------------------------------
    def _try_acquire(self, key: str, holder: str) -> bool:
        try:
            etag = self._put(key, holder, IfNoneMatch="*")
        except OSError as exc:
            if not _precondition_failed(exc):
                raise
            etag = self._take_over(key, holder)
            if etag is None:
                return False
        held = _Held(holder, etag)
        with self._mutex:
            self._held[key] = held
        threading.Thread(target=self._renew, args=(key, held), daemon=True, name="evalflow-lease").start()
        return True

    def _take_over(self, key: str, holder: str) -> str | None:
        """The lock's ETag if we took over an expired lease (or a dead local holder's), else None."""
        found = self._read(key)
        if found is None:  # released meanwhile: the next try creates it
            return None
        current, body = found
        died = _holder_died(body)
        now = time.monotonic()
        seen, since = self._seen.get(key, (None, now))
        if seen != current and not died:
            self._seen[key] = (current, now)
            return None
        if now - since < self.lease_s and not died:
            return None
        try:
            etag = self._put(key, holder, IfMatch=current)
        except OSError as exc:
            if _precondition_failed(exc):  # another waiter took it, or the holder renewed just now
                return None
            raise
        why = f"its holder (pid {body.pid} on this host) died" if died else "its holder stopped renewing it"
        get_logger().warning("batch lock %s: taken over (%s)", key, why)
        self._seen.pop(key, None)
        return etag

    def _renew(self, key: str, held: _Held) -> None:
        while not held.stop.wait(self.lease_s / 3):
            try:
                held.etag = self._put(key, held.holder, IfMatch=held.etag)
            except Exception as exc:  # the store unreachable for a moment (s3fs lets botocore's
                # connection errors through untranslated): a renewer that died here would let the lease lapse
                if isinstance(exc, OSError) and _precondition_failed(exc):
                    held.lost = True
                    get_logger().error("batch lock %s: lease taken over (this process stalled a whole lease)", key)
                    return
                get_logger().warning(
                    "batch lock %s: renewing the lease failed (%s: %s); retrying", key, type(exc).__name__, exc
                )

    # -- Prefect's LockManager protocol ------------------------------------------------------------
    def acquire_lock(
        self, key: str, holder: str, acquire_timeout: float | None = None, hold_timeout: float | None = None
    ) -> bool:
        deadline = None if acquire_timeout is None else time.monotonic() + acquire_timeout
        while not self._try_acquire(key, holder):
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)
        return True

    async def aacquire_lock(
        self, key: str, holder: str, acquire_timeout: float | None = None, hold_timeout: float | None = None
    ) -> bool:
        deadline = None if acquire_timeout is None else time.monotonic() + acquire_timeout
        while not await asyncio.to_thread(self._try_acquire, key, holder):
            if deadline is not None and time.monotonic() >= deadline:
                return False
            await asyncio.sleep(POLL_S)
        return True

    def release_lock(self, key: str, holder: str) -> None:
        with self._mutex:
            held = self._held.get(key)
            if held is None or held.holder != holder:
                raise ValueError(f"no lock for {key!r} held by {holder!r}")
            del self._held[key]
        held.stop.set()
        if held.lost:
            return
        with contextlib.suppress(FileNotFoundError):
            try:
                self.fs.call_s3("delete_object", Bucket=self.bucket, Key=self._object(key), IfMatch=held.etag)
            except OSError as exc:
                if not _precondition_failed(exc):
                    raise

    def is_locked(self, key: str) -> bool:
        return key in self._held or self._etag(key) is not None

    def is_lock_holder(self, key: str, holder: str) -> bool:
        held = self._held.get(key)
        return held is not None and held.holder == holder and not held.lost

    def wait_for_lock(self, key: str, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.is_locked(key):
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)
        return True

    async def await_for_lock(self, key: str, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while await asyncio.to_thread(self.is_locked, key):
            if deadline is not None and time.monotonic() >= deadline:
                return False
            await asyncio.sleep(POLL_S)
        return True

    def check(self) -> None:
        """Fail in one line, naming the store, where conditional writes are not honoured (a second create
        of the same object must fail)."""
        probe = f"evalflow-lock-probe-{os.getpid()}-{time.monotonic_ns()}"
        etag = self._put(probe, "probe", IfNoneMatch="*")
        try:
            self._put(probe, "probe", IfNoneMatch="*")
        except OSError as exc:
            if _precondition_failed(exc):
                return
            raise
        finally:
            with contextlib.suppress(OSError):
                self.fs.call_s3("delete_object", Bucket=self.bucket, Key=self._object(probe))
        raise LockStoreError(
            f"store {self.store.url} ignores conditional writes (If-None-Match), so batch locks cannot span machines "
            f"there (etag {etag}); use AWS S3 or a store that supports them, or run one worker per store"
        )


def lock_manager(store: Store) -> Any:
    """The batch locks for `store`: files next to a local store, leases on an S3 store (checked here, so a
    store without conditional writes fails before any expensive step). Other remote stores keep locks
    on this machine: two machines may then collect one batch twice (the results are identical)."""
    if store.is_local:
        return FileLockManager(lock_directory(store))
    if not store.url.startswith("s3://"):
        get_logger().warning("store %s: batch locks hold on this machine only (s3:// for all)", store.url)
        return FileLockManager(lock_directory(store))
    manager = StoreLeaseLockManager(store)
    manager.check()
    return manager
