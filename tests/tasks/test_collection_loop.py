"""The collection's event loop stays free for requests: a batch's store reads and writes run in threads,
the progress artifact is created beside the first requests (not before them), and every OpenAI client
shares one TLS context. No model server: rollouts come from test_progress's stand-in."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from core.store import Store
from envs.registry import get_env
from tasks.collection import batch as batch_module
from tasks.collection import progress as progress_module
from tasks.collection.batch import collect_batch_impl
from tasks.collection.plan import Planned
from tasks.collection.schedule import collect_all
from tasks.serving import clients
from tasks.serving.pool import ReplicaPool
from tests.tasks.test_progress import Rollouts, batch, context, until

STORE_WRITE_S = 0.4


async def longest_stall(work: asyncio.Task, tick: float = 0.01) -> float:
    """The longest the event loop went without running a 10 ms ticker while `work` ran."""
    worst, last = 0.0, time.monotonic()
    while not work.done():
        await asyncio.sleep(tick)
        now = time.monotonic()
        worst, last = max(worst, now - last - tick), now
    await work
    return worst


def test_a_batch_writes_its_file_without_stalling_the_requests_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow store (S3, a busy disk) used to block the loop for the whole parquet write at a batch's end,
    and every other batch's requests with it."""
    original = Store.write_bytes
    writes: list[str] = []

    def slow_write(self: Store, url: str, data: bytes) -> None:
        time.sleep(STORE_WRITE_S)  # blocking, as a real store call is
        writes.append(url)
        original(self, url, data)

    monkeypatch.setattr(Store, "write_bytes", slow_write)
    rollouts = Rollouts()
    monkeypatch.setattr(batch_module, "rollout", rollouts)
    env, planned = get_env("gsm8k"), batch(2)

    async def go() -> float:
        work = asyncio.create_task(collect_batch_impl(context(tmp_path), env, planned))
        await until(lambda: len(rollouts.calls) == 4)
        for _ in range(4):
            rollouts.release.release()
        return await longest_stall(work)

    stall = asyncio.run(go())
    assert len(writes) >= 2  # the batch file and its generation record, each STORE_WRITE_S
    assert stall < STORE_WRITE_S / 2, f"the loop stalled {stall:.2f} s"
    finished = [w for w in writes if w.endswith(".parquet") and "/runs/" in w]
    assert len(pq.read_table(finished[0])) == 4


def test_the_first_requests_do_not_wait_for_the_progress_artifact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    created: list[float] = []

    async def slow_artifact(*args: object, **kwargs: object) -> str:
        await asyncio.sleep(0.5)  # an API round trip to a busy server
        created.append(time.monotonic())
        return "00000000-0000-0000-0000-000000000000"

    updates: list[str] = []

    async def update(artifact: object, percent: float, description: str) -> None:
        updates.append(description)

    monkeypatch.setattr(progress_module, "_in_run", lambda: True)
    monkeypatch.setattr(progress_module, "acreate_progress_artifact", slow_artifact)
    monkeypatch.setattr(progress_module, "aupdate_progress_artifact", update)
    rollouts = Rollouts()
    monkeypatch.setattr(batch_module, "rollout", rollouts)
    first_request: list[float] = []
    env = get_env("gsm8k")

    async def go() -> None:
        task = asyncio.create_task(collect_all(context(tmp_path), [Planned(env, batch(1))], collect_batch_impl))
        await until(lambda: len(rollouts.calls) == 2)
        first_request.append(time.monotonic())
        for _ in range(2):
            rollouts.release.release()
        await task

    asyncio.run(go())
    assert first_request[0] < created[0]  # requests went out while the artifact was being created
    assert updates and updates[-1].startswith("collect 2/2 rollouts")  # the final line still reached it


def test_a_failed_artifact_creation_is_a_warning_not_a_failed_collection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def refused(*args: object, **kwargs: object) -> str:
        raise ConnectionError("the API is restarting")

    monkeypatch.setattr(progress_module, "_in_run", lambda: True)
    monkeypatch.setattr(progress_module, "acreate_progress_artifact", refused)
    rollouts = Rollouts()
    monkeypatch.setattr(batch_module, "rollout", rollouts)

    async def go() -> int:
        task = asyncio.create_task(collect_all(context(tmp_path), [Planned(get_env("gsm8k"), batch(1))],
                                               collect_batch_impl))  # fmt: skip
        await until(lambda: len(rollouts.calls) == 2)
        for _ in range(2):
            rollouts.release.release()
        return sum(r.rollouts for r in (await task).results)

    assert asyncio.run(go()) == 2
    assert "could not create the progress artifact: ConnectionError: the API is restarting" in caplog.text


def test_every_client_shares_one_tls_context() -> None:
    """httpx builds (and loads the CA bundle into) a context per client otherwise: tens of ms of CPU each."""
    urls = ("https://a.example/v1", "http://127.0.0.1:9/v1")
    pool = ReplicaPool(urls, "key", 5.0)
    one, other = clients.sync_client(urls[0], "key", 5.0), clients.async_client(urls[1], "key", 5.0)
    contexts = {id(clients.tls_context())}
    for client in (*(r.client for r in pool.replicas), one, other):
        transport = client._client._transport  # httpx's pool holds the context it was given
        contexts.add(id(transport._pool._ssl_context))
    assert len(contexts) == 1
    started = time.process_time()
    for _ in range(20):
        clients.async_client(urls[0], "key", 5.0)
    assert (time.process_time() - started) / 20 < 0.005  # a fresh context costs ~15-35 ms of CPU
    one.close()
    asyncio.run(pool.aclose())


def test_a_collection_that_ends_while_a_report_waits_for_the_artifact_still_finishes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ticker is cancelled when the collection ends; a report of its waiting for the artifact's creation then must
    not cancel that creation, which the final report awaits (a CancelledError ended a collection so, under load)."""
    release = asyncio.Event()
    updates: list[str] = []

    async def slow_artifact(*args: object, **kwargs: object) -> str:
        await release.wait()  # the API answers only after the collection ended
        return "00000000-0000-0000-0000-000000000000"

    async def update(artifact: object, percent: float, description: str) -> None:
        updates.append(description)

    monkeypatch.setattr(progress_module, "_in_run", lambda: True)
    monkeypatch.setattr(progress_module, "acreate_progress_artifact", slow_artifact)
    monkeypatch.setattr(progress_module, "aupdate_progress_artifact", update)
    progress = progress_module.Progress(total=1, interval_s=0.05)

    async def go() -> None:
        async with progress.reporting():
            await asyncio.sleep(0.2)  # the ticker's first report is now waiting for the creation
            progress.add_cached(1)
            asyncio.get_running_loop().call_later(0.1, release.set)  # answered while the body exits

    asyncio.run(asyncio.wait_for(go(), 10))
    assert updates and "finished in" in updates[-1] and "1/1 rollouts" in updates[-1]
