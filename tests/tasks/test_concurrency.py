"""The request limiter: a fixed cap served by priority, and the adaptive one settling on the fastest level."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from tasks.collection import concurrency
from tasks.collection.concurrency import AdaptiveLimiter, Limiter, make_limiter


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock jumps to the next timer whenever nothing is ready: a simulated server's
    latencies take no wall time, and no other process on the machine can change what the limiter measures
    (under load, real sleeps once made 128 in flight look slower than 64)."""

    def __init__(self) -> None:
        super().__init__()
        self._virtual_now = 0.0

    def time(self) -> float:
        return self._virtual_now

    def _run_once(self) -> None:
        ready: Any = getattr(self, "_ready")  # noqa: B009 (CPython's loop internals: the ready queue and timer heap)
        scheduled: Any = getattr(self, "_scheduled")  # noqa: B009
        if not ready and scheduled:
            self._virtual_now = max(self._virtual_now, scheduled[0].when())
        super()._run_once()  # pyright: ignore[reportAttributeAccessIssue]  # the loop's own step, after the jump


def test_fixed_limiter_caps_requests_in_flight() -> None:
    async def main() -> int:
        limiter = Limiter(3)
        peak = 0

        async def job() -> None:
            nonlocal peak
            async with limiter.slot():
                peak = max(peak, limiter.in_flight)
                await asyncio.sleep(0.01)

        await asyncio.gather(*(job() for _ in range(20)))
        assert limiter.in_flight == 0 and limiter.waiting == 0
        return peak

    assert asyncio.run(main()) == 3


def test_waiters_are_admitted_by_priority_then_arrival() -> None:
    async def main() -> list[str]:
        limiter = Limiter(1)
        order: list[str] = []

        async def job(name: str, priority: int) -> None:
            async with limiter.slot(priority):
                order.append(name)
                await asyncio.sleep(0.001)

        first = asyncio.create_task(job("holder", 5))
        await asyncio.sleep(0)  # holder takes the only slot; the rest queue in this order
        await asyncio.gather(first, job("b2-first", 2), job("b1", 1), job("b2-second", 2), job("b0", 0))
        return order

    assert asyncio.run(main()) == ["holder", "b0", "b1", "b2-first", "b2-second"]


def test_a_cancelled_waiter_gives_nothing_away_and_resize_admits_more() -> None:
    async def main() -> None:
        limiter = Limiter(1)
        resized: list[int] = []
        limiter.on_resize.append(resized.append)
        release = asyncio.Event()

        async def hold() -> None:
            async with limiter.slot():
                await release.wait()

        holder = asyncio.create_task(hold())
        await asyncio.sleep(0)
        cancelled = asyncio.create_task(hold())
        waiting = [asyncio.create_task(hold()) for _ in range(2)]
        await asyncio.sleep(0)
        assert limiter.waiting == 3
        cancelled.cancel()
        await asyncio.sleep(0)
        assert limiter.waiting == 2 and limiter.in_flight == 1

        limiter.resize(3)  # both remaining waiters get in, the cancelled one does not count
        await asyncio.sleep(0)
        assert limiter.in_flight == 3 and limiter.waiting == 0 and resized == [3]
        release.set()
        await asyncio.gather(holder, *waiting)
        assert limiter.in_flight == 0

    asyncio.run(main())


def test_explicit_concurrency_is_fixed_and_none_is_adaptive() -> None:
    assert type(make_limiter(8)) is Limiter and make_limiter(8).limit == 8
    assert isinstance(make_limiter(None), AdaptiveLimiter)


def simulate(
    limiter: AdaptiveLimiter, requests: int, latency: Callable[[int], float], expect: bool = False
) -> AdaptiveLimiter:
    """Requests against a simulated server whose latency depends on how many are in flight."""

    async def main() -> AdaptiveLimiter:
        if expect:
            limiter.expect(requests)

        async def request() -> None:
            async with limiter.slot() as ticket:
                await asyncio.sleep(latency(limiter.in_flight))
                ticket.tokens = 100

        await asyncio.gather(*(request() for _ in range(requests)))
        return limiter

    loop = VirtualTimeLoop()
    clock = SimpleNamespace(monotonic=loop.time)  # the limiter's time.monotonic, on the loop's virtual clock
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(concurrency, "time", clock)
        try:
            return loop.run_until_complete(main())
        finally:
            loop.close()


def test_adaptive_limiter_climbs_to_the_fastest_level_and_stays() -> None:
    """Throughput grows up to 128 in flight and falls steeply beyond (steep, so scheduling noise on a
    busy machine cannot flip the choice)."""
    limiter = simulate(AdaptiveLimiter(start=32, reprobe_every=1000), 1600, lambda load: 0.15 * max(1, load / 128) ** 3)
    tried = [level for level, _ in limiter.history]
    assert tried[0] == 32 and 64 in tried and 128 in tried and 256 in tried
    assert limiter.limit == 128 and limiter.best is not None and limiter.best[0] == 128


def test_a_level_that_gains_less_than_the_threshold_is_given_up() -> None:
    """A CPU-bound server: doubling past 64 makes each request twice as slow, so tokens/s gains nothing, not
    worth the load (latencies of 0.6 s keep timer noise on a busy machine below the 5% threshold; with 0.15 s
    and a 1.4% gain, a CI run's fast lane once measured a gain above 5%, and with 0.3 s a loaded local fast lane
    once climbed to 256)."""
    limiter = simulate(AdaptiveLimiter(start=64, reprobe_every=1000), 900, lambda load: 0.6 * max(1, load / 64))
    assert [level for level, _ in limiter.history][:2] == [64, 128]
    assert limiter.limit == 64 and limiter.level == 64


def test_the_first_window_of_a_level_is_not_measured() -> None:
    """A slow start (the flow's own start-up competing with the server) must not make the next level
    look faster: the first window is skipped, so a server past its best at 64 stays there."""
    calls = 0

    def latency(load: int) -> float:
        nonlocal calls
        calls += 1
        return (0.6 if calls <= 64 else 0.15) * max(1, load / 64) ** 1.3  # 128 gives 19% less

    limiter = simulate(AdaptiveLimiter(start=64, reprobe_every=1000), 700, latency)
    assert limiter.history[0][0] == 64
    assert limiter.history[0][1] > 64 * 100 / 0.3  # measured after the slow start, not during it
    assert limiter.limit == 64


@pytest.mark.parametrize(("requests", "probed"), [(300, False), (3000, True)])
def test_a_run_too_short_to_gain_from_a_probe_keeps_its_start_level(requests: int, probed: bool) -> None:
    limiter = simulate(AdaptiveLimiter(start=64), requests, lambda load: 0.01 * max(1, load / 128) ** 3, expect=True)
    assert (128 in [level for level, _ in limiter.history]) is probed
