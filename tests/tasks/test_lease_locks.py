"""Batch locks on an S3 store (moto on loopback): leases taken with conditional writes, renewed, taken
over when their holder dies, and the "collected once" promise across processes that share nothing but
the store and a Prefect server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.store import Store
from tasks.collection.lease import LockStoreError, StoreLeaseLockManager, lock_manager
from tests.conftest import REPO_ROOT, moto_s3

BUCKET = "evalflow-locks"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def s3_url() -> Iterator[str]:
    with moto_s3(BUCKET) as url:
        yield url


def options(url: str) -> dict[str, object]:
    return {"client_kwargs": {"endpoint_url": url, "region_name": "us-east-1"}}


@pytest.fixture
def store(s3_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Store:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    return Store(f"s3://{BUCKET}/{tmp_path.name}", options(s3_url))


def test_one_holder_at_a_time_and_release_frees_it(store: Store) -> None:
    a, b = StoreLeaseLockManager(store), StoreLeaseLockManager(store)  # two machines' managers
    assert a.acquire_lock("batch-1", "run-a", acquire_timeout=1)
    assert not b.acquire_lock("batch-1", "run-b", acquire_timeout=1)
    assert b.is_locked("batch-1") and a.is_lock_holder("batch-1", "run-a") and not b.is_lock_holder("batch-1", "run-b")
    assert b.acquire_lock("batch-2", "run-b", acquire_timeout=1)  # other batches are not blocked
    a.release_lock("batch-1", "run-a")
    assert not b.is_locked("batch-1")
    assert b.acquire_lock("batch-1", "run-b", acquire_timeout=1)
    with pytest.raises(ValueError, match="no lock"):
        a.release_lock("batch-1", "run-a")
    b.release_lock("batch-1", "run-b")
    b.release_lock("batch-2", "run-b")  # their renewers stop before the store does


def test_a_renewed_lease_holds_past_its_length_and_a_dead_ones_is_taken_over(store: Store) -> None:
    holder, waiter = StoreLeaseLockManager(store, lease_s=1.5), StoreLeaseLockManager(store, lease_s=1.5)
    assert holder.acquire_lock("k", "h")
    started = time.monotonic()
    assert not waiter.acquire_lock("k", "w", acquire_timeout=4)  # renewed every 0.5 s: never expires
    assert time.monotonic() - started >= 4
    held = holder._held.pop("k")  # the holder dies: nobody renews or releases the lease
    held.stop.set()
    started = time.monotonic()
    assert waiter.acquire_lock("k", "w", acquire_timeout=10)
    assert 1.5 <= time.monotonic() - started < 6  # taken over once the lease expired unrenewed
    waiter.release_lock("k", "w")  # its renewer stops before the store does


def test_a_store_unreachable_for_a_moment_does_not_stop_the_renewals(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """s3fs lets botocore's connection errors through as they are (not OSError): the renewer retries."""
    from botocore.exceptions import EndpointConnectionError

    holder, waiter = StoreLeaseLockManager(store, lease_s=1.5), StoreLeaseLockManager(store, lease_s=1.5)
    assert holder.acquire_lock("k", "h")
    real, failures = holder._put, [0]

    def flaky(*args: object, **kwargs: object) -> object:
        if failures[0] < 2:  # the first two renewals (0.5 s apart) cannot reach the store
            failures[0] += 1
            raise EndpointConnectionError(endpoint_url=store.url)
        return real(*args, **kwargs)

    monkeypatch.setattr(holder, "_put", flaky)
    assert not waiter.acquire_lock("k", "w", acquire_timeout=4)  # still renewed after the outage
    assert failures[0] == 2 and not holder._held["k"].lost
    holder.release_lock("k", "h")


def test_a_store_without_conditional_writes_fails_naming_it(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    manager = StoreLeaseLockManager(store)
    real = manager.fs.call_s3

    def ignoring(method: str, **kwargs: object) -> object:  # a store that drops If-None-Match
        kwargs.pop("IfNoneMatch", None)
        return real(method, **kwargs)

    monkeypatch.setattr(manager.fs, "call_s3", ignoring)
    with pytest.raises(LockStoreError, match=rf"store {store.url} ignores conditional writes"):
        manager.check()
    monkeypatch.undo()
    assert isinstance(lock_manager(Store(f"s3://{BUCKET}/x", store.options)), StoreLeaseLockManager)


RACER = """
import json, sys, time
from prefect import flow, task
from prefect.cache_policies import CachePolicy
from core.store import Store
from tasks.collection.cache import result_storage
from tasks.collection import lease as lease_module
from tasks.collection.lease import StoreLeaseLockManager

who, url, endpoint, lease, hold = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
if len(sys.argv) > 6:  # a process of another machine (its liveness cannot be seen from here)
    me = lease_module._this_process()
    lease_module._this_process = lambda: me.model_copy(update={"host": sys.argv[6]})
store = Store(url, {"client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}})

class Fixed(CachePolicy):
    def compute_key(self, *args, **kwargs):
        return "batch-race"

policy = Fixed().configure(lock_manager=StoreLeaseLockManager(store, lease_s=lease), isolation_level="SERIALIZABLE")

@task(persist_result=True, result_storage=result_storage(store), result_serializer="json", cache_policy=policy)
def collect(who):
    store.write_bytes(store.path("ran", f"{who}-{time.time_ns()}"), b"x")
    print("COLLECTING", flush=True)
    time.sleep(hold)
    return {"by": who}

@flow
def race(who):
    return collect(who)

print("RESULT " + json.dumps(race(who)), flush=True)
"""


def racer(
    who: str, store: Store, s3_url: str, api: str, home: Path, lease: float, hold: float, host: str | None = None
) -> subprocess.Popen[str]:
    """A process sharing only the store and the Prefect API: its own HOME and TMPDIR, so no local file;
    with `host`, it says it runs on that machine."""
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **CREDENTIALS, "PREFECT_API_URL": api, "HOME": str(home), "TMPDIR": str(home / "tmp"),
           "PREFECT_HOME": str(home / ".prefect"), "PYTHONPATH": str(REPO_ROOT)}  # fmt: skip
    args = [sys.executable, "-c", RACER, who, store.url, s3_url, str(lease), str(hold), *([host] if host else [])]
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def result_of(proc: subprocess.Popen[str]) -> dict[str, str]:
    out, _ = proc.communicate(timeout=120)
    line = next((line for line in out.splitlines() if line.startswith("RESULT ")), None)
    assert line is not None, out[-3000:]
    return json.loads(line.removeprefix("RESULT "))


def runs(store: Store) -> list[str]:
    return store.list(store.path("ran"))


def test_two_processes_sharing_only_store_and_api_collect_a_batch_once(
    store: Store, s3_url: str, prefect_server: tuple[str, Path], tmp_path: Path
) -> None:
    api, _ = prefect_server
    procs = [racer(w, store, s3_url, api, tmp_path / w, 60, 8) for w in ("a", "b")]  # bodies would overlap
    results = [result_of(p) for p in procs]
    assert len(runs(store)) == 1  # one body ran; the other waited on the lease and read its result
    assert results[0] == results[1] and results[0]["by"] in ("a", "b")


def test_a_killed_holders_batch_is_taken_over_after_its_lease(
    store: Store, s3_url: str, prefect_server: tuple[str, Path], tmp_path: Path
) -> None:
    api, _ = prefect_server
    first = racer("a", store, s3_url, api, tmp_path / "a", 3, 60, host="node-a")
    assert first.stdout is not None
    for line in first.stdout:
        if "COLLECTING" in line:
            break
    first.send_signal(signal.SIGKILL)  # a lost node: no release, no renewal
    first.wait()
    started = time.monotonic()
    second = racer("b", store, s3_url, api, tmp_path / "b", 3, 0.1)
    assert result_of(second) == {"by": "b"}
    assert len(runs(store)) == 2  # the killed attempt's body, and the one that took over
    assert time.monotonic() - started >= 3  # only after the dead holder's lease ran out


def test_a_killed_holder_on_this_machine_is_taken_over_at_once(
    store: Store, s3_url: str, prefect_server: tuple[str, Path], tmp_path: Path
) -> None:
    """A SIGKILLed flow run whose retry lands on the same host: the holder is seen to be gone, so the
    retry does not wait out its lease (60 s here)."""
    api, _ = prefect_server
    first = racer("a", store, s3_url, api, tmp_path / "a", 60, 60)
    assert first.stdout is not None
    for line in first.stdout:
        if "COLLECTING" in line:
            break
    first.send_signal(signal.SIGKILL)
    first.wait()
    started = time.monotonic()
    second = racer("b", store, s3_url, api, tmp_path / "b", 60, 0.1)
    out, _ = second.communicate(timeout=120)
    assert f"its holder (pid {first.pid} on this host) died" in out, out[-3000:]
    assert '"by": "b"' in out
    assert len(runs(store)) == 2
    assert time.monotonic() - started < 30  # well inside the dead holder's lease
