"""Running a run's planned batches: cached ones reused, the others opened as the request limit
allows, earliest first; progress reported as rollouts finish."""

from __future__ import annotations

import asyncio
import math
from typing import Any

from tasks.collection.concurrency import Limiter, request_priority
from tasks.collection.plan import BatchResult, Planned, batch_url
from tasks.collection.progress import Progress
from tasks.collection.rollout import CollectContext


async def collect_all(ctx: CollectContext, work: list[Planned], batch_task: Any) -> list[BatchResult]:
    """Reuse cached batches; run the others a few at a time. Requests share one limiter, earlier batches
    first, so batches overlap their tails and the oldest open one finishes first. As many batches are
    open as fill the (possibly growing) request limit, plus one. A failed batch does not stop the
    others: what finishes is kept."""
    progress = Progress(sum(p.batch.size for p in work))
    await progress.start()
    requests = ctx.requests()
    requests.expect(sum(p.batch.size for p in work if p.cached is None))

    def open_batches(limit: int) -> int:
        return ctx.collection.batches_in_flight or math.ceil(limit / ctx.collection.batch_size) + 1

    window = Limiter(open_batches(requests.limit))
    requests.on_resize.append(lambda limit: window.resize(open_batches(limit)))

    async def one(position: int, item: Planned) -> BatchResult:
        target = batch_url(ctx.run_dir, item.batch)
        if item.cached is not None:
            if item.cached.url != target:  # every run folder holds all of its rollouts
                ctx.store.copy(item.cached.url, target)
            await progress.advance(item.cached.rollouts, generated=False)
            return BatchResult(target, item.cached.rollouts, item.cached.errors, item.cached.completion_tokens, 0.0)
        async with window.slot(position):
            request_priority.set(position)  # this task's context: the batch's requests inherit it
            run = batch_task.with_options(refresh_cache=True) if item.stale else batch_task
            result = BatchResult.from_record(await run(ctx, item.env, item.batch))
        if result is None:
            raise RuntimeError(f"batch {item.batch.benchmark}-{item.batch.index} returned no batch record")
        if result.url != target:  # a concurrent run collected it first (we waited on its lock)
            ctx.store.copy(result.url, target)
            result = BatchResult(target, result.rollouts, result.errors, result.completion_tokens, result.seconds)
        await progress.advance(result.rollouts, result.completion_tokens)
        return result

    outcomes = await asyncio.gather(*(one(i, item) for i, item in enumerate(work)), return_exceptions=True)
    failures = [o for o in outcomes if isinstance(o, BaseException)]
    if failures:
        done = len(work) - len(failures)
        raise RuntimeError(
            f"{len(failures)} of {len(work)} batches failed ({done} finished and kept for a rerun); "
            f"first error: {failures[0]!r}"
        ) from failures[0]
    return [o for o in outcomes if isinstance(o, BatchResult)]
