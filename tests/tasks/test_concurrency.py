"""The request limiter: a fixed cap, and the adaptive one settling on the fastest level."""

from __future__ import annotations

import asyncio

from tasks.concurrency import AdaptiveLimiter, Limiter, make_limiter


def test_fixed_limiter_caps_requests_in_flight() -> None:
    async def main() -> int:
        limiter = Limiter(3)
        peak = 0

        async def job() -> None:
            nonlocal peak
            async with limiter:
                peak = max(peak, limiter.in_flight)
                await asyncio.sleep(0.01)

        await asyncio.gather(*(job() for _ in range(20)))
        return peak

    assert asyncio.run(main()) == 3


def test_explicit_concurrency_is_fixed_and_none_is_adaptive() -> None:
    assert type(make_limiter(8)) is Limiter and make_limiter(8).limit == 8
    assert isinstance(make_limiter(None), AdaptiveLimiter)


def test_adaptive_limiter_climbs_to_the_fastest_level_and_stays() -> None:
    """A simulated server whose throughput grows up to 64 requests in flight and drops beyond."""

    async def main() -> AdaptiveLimiter:
        limiter = AdaptiveLimiter(start=32, reprobe_every=1000)

        async def request() -> None:
            async with limiter:
                load = limiter.in_flight
                # steep on both sides, so scheduling noise on a busy machine cannot flip the choice
                await asyncio.sleep(0.04 * max(1.0, load / 64) ** 3)
            limiter.record(100)

        await asyncio.gather(*(request() for _ in range(1500)))
        return limiter

    limiter = asyncio.run(main())
    tried = [level for level, _ in limiter.history]
    assert tried[0] == 32 and 64 in tried and 128 in tried
    assert limiter.limit == 64
    assert limiter.best is not None and limiter.best[0] == 64
