"""How `collect_all` opens batches: enough to fill the request limit (growing with it), earliest first."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core.config import CollectionConfig, SamplingConfig
from core.store import Store
from envs.registry import get_env
from tasks.collection.concurrency import request_priority
from tasks.collection.plan import Batch, BatchResult, Planned, batch_url
from tasks.collection.rollout import CollectContext
from tasks.collection.schedule import collect_all
from tasks.serving.server import Endpoint


class Recorder:
    """Stands in for the Prefect batch task: each rollout is two turns, each taking a request slot at its
    batch's priority (a later turn re-queues, and must not wait behind later batches' first turns)."""

    def __init__(self, ctx: CollectContext, grow_after: int | None = None) -> None:
        self.ctx, self.grow_after = ctx, grow_after
        self.open = self.peak_open = self.requests = 0
        self.priorities: set[tuple[int, int]] = set()  # (batch index, priority its requests carried)

    async def __call__(self, ctx: CollectContext, env: Any, batch: Batch) -> dict[str, Any]:
        self.open += 1
        self.peak_open = max(self.peak_open, self.open)

        async def request() -> None:
            for _turn in range(2):
                self.priorities.add((batch.index, request_priority.get()))
                async with ctx.requests().slot(request_priority.get()):
                    self.requests += 1
                    if self.requests == self.grow_after:
                        ctx.requests().resize(ctx.requests().limit * 4)
                    await asyncio.sleep(0.005)

        await asyncio.gather(*(request() for _ in range(batch.size)))
        self.open -= 1
        return BatchResult(batch_url(ctx.run_dir, batch), batch.size, 0, 0, 0.0).as_record()


def run(tmp_path: Any, batches: int, concurrency: int, grow_after: int | None = None) -> Recorder:
    collection = CollectionConfig(batch_size=4, concurrency=concurrency)
    ctx = CollectContext(
        "run",
        str(tmp_path),
        Endpoint("http://127.0.0.1:9/v1", "m"),
        "fp",
        SamplingConfig(),
        collection,
        Store(str(tmp_path)),
    )
    env = get_env("gsm8k")
    work = [Planned(env, Batch("gsm8k", i, f"k{i}", tuple({"i": n} for n in range(4)), (0,))) for i in range(batches)]
    recorder = Recorder(ctx, grow_after)
    results = asyncio.run(collect_all(ctx, work, recorder)).results
    assert [r.rollouts for r in results] == [4] * batches
    return recorder


def test_open_batches_fill_the_limit_plus_one_and_requests_carry_their_batch_position(tmp_path: Any) -> None:
    """The position is the limiter's priority (tests/tasks/test_concurrency.py: lower goes first)."""
    recorder = run(tmp_path, batches=12, concurrency=8)
    assert recorder.peak_open == 3  # 8 requests in flight / 4 per batch, plus one queued behind them
    assert recorder.requests == 12 * 4 * 2 and recorder.priorities == {(i, i) for i in range(12)}


def test_a_growing_limit_opens_more_batches(tmp_path: Any) -> None:
    recorder = run(tmp_path, batches=24, concurrency=4, grow_after=6)  # 4 -> 16 requests in flight
    assert recorder.peak_open == 5


def test_an_explicit_batches_in_flight_caps_open_batches(tmp_path: Any) -> None:
    collection = CollectionConfig(batch_size=4, concurrency=64, batches_in_flight=2)
    ctx = CollectContext(
        "run", str(tmp_path), Endpoint("http://x/v1", "m"), "fp", SamplingConfig(), collection, Store(str(tmp_path))
    )
    env = get_env("gsm8k")
    work = [Planned(env, Batch("gsm8k", i, f"k{i}", ({"i": 0},) * 4, (0,))) for i in range(6)]
    recorder = Recorder(ctx)
    asyncio.run(collect_all(ctx, work, recorder))
    assert recorder.peak_open == 2


@pytest.mark.parametrize("cap", [None, 2])
def test_slow_rollouts_in_old_batches_do_not_hold_back_the_later_batches(
    tmp_path: Any, monkeypatch: Any, cap: int | None
) -> None:
    """The real batch and rollout code, with the request itself stood in for: one rollout each of batches
    0 and 1 is slow. A batch used to hold its place among the open batches (here 2: 4 requests / 4 per
    batch, plus one) until its slowest rollout returned, so while those two ran the limiter held 2 of 4
    requests and batches 2-5 waited. Now a batch whose rollouts all had their first request gives its
    place to the next: every other rollout of the run finishes while the slow ones run. An explicit
    `batches_in_flight` (`cap`) still means that many open batches: there the later batches wait."""
    from types import SimpleNamespace

    from tasks.collection import rollout as rollout_module
    from tasks.collection.batch import collect_batch_impl
    from tasks.collection.plan import rollout_seed

    slow = {rollout_seed(SamplingConfig().seed, f"b{b}q0", 0) for b in (0, 1)}
    finished: list[int] = []

    async def request(ctx: CollectContext, **kwargs: Any) -> Any:
        await asyncio.sleep(1.0 if kwargs["seed"] in slow else 0.01)
        finished.append(kwargs["seed"])
        message = SimpleNamespace(content="#### 1", tool_calls=None)
        usage = SimpleNamespace(prompt_tokens=5, completion_tokens=3)
        return SimpleNamespace(choices=[SimpleNamespace(message=message, finish_reason="stop")], usage=usage)

    monkeypatch.setattr(rollout_module, "request_with_retries", request)
    env = get_env("gsm8k")
    rows = [tuple({"id": f"b{b}q{i}", "question": "1?", "answer": "#### 1"} for i in range(4)) for b in range(6)]
    work = [Planned(env, Batch("gsm8k", b, f"k{b}", rows[b], (0,))) for b in range(6)]
    collection = CollectionConfig(batch_size=4, concurrency=4, batches_in_flight=cap)
    ctx = CollectContext(
        "run", str(tmp_path), Endpoint("http://x/v1", "m"), "fp", SamplingConfig(), collection, Store(str(tmp_path))
    )
    collected = asyncio.run(collect_all(ctx, work, collect_batch_impl))
    assert [r.rollouts for r in collected.results] == [4] * 6 and len(finished) == 24
    if cap is None:
        assert set(finished[-2:]) == slow  # the slow ones last: the other 22 did not wait for them
    else:
        assert set(finished[6:8]) == slow  # batches 0 and 1 done (2 x 4) before batches 2-5 started
    assert all(r["success"] for url in (r.url for r in collected.results) for r in _rows(url))


def _rows(url: str) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.read_table(url).to_pylist()
