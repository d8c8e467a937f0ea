"""Running a run's planned batches: cached ones reused, the others opened as the request limit
allows, earliest first; progress counted per rollout and reported every progress interval."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import Any

from core.record import RunStatus
from tasks.collection.concurrency import Limiter, request_priority
from tasks.collection.failures import BatchFailed
from tasks.collection.plan import BatchResult, Planned, batch_url
from tasks.collection.progress import Progress
from tasks.collection.rollout import CollectContext


@dataclass
class Collected:
    """What a collection produced: the finished batches and the failed ones (whose finished rollouts
    are kept at `BatchFailed.kept_url`)."""

    results: list[BatchResult]
    failed: list[BatchFailed] = field(default_factory=list)
    planned_rollouts: int = 0

    @property
    def failed_rollouts(self) -> int:
        return sum(f.summary.failed for f in self.failed)

    def status(self, max_failed_share: float) -> RunStatus:
        """The run's state from its failures: "failed" on any configuration failure or when more than
        `max_failed_share` of the planned rollouts failed (transiently, or as environment errors),
        "incomplete" when fewer did, else "complete". Only a complete run is ever a baseline."""
        failed = self.failed_rollouts
        share = failed / self.planned_rollouts if self.planned_rollouts else 0.0
        environment = sum(f.summary.environment for f in self.failed)
        judge = sum(f.summary.judge for f in self.failed)
        apart = [f"{environment} environment errors"] * bool(environment) + [f"{judge} judge errors"] * bool(judge)
        how = (
            f"failed ({', '.join([*apart, f'{failed - environment - judge} transient'])})"
            if apart
            else "failed transiently"
        )
        configuration = [f for f in self.failed if f.summary.kind == "configuration"]
        if configuration:
            state, why = "failed", f"configuration failure: {configuration[0].summary.line()}"
        elif share > max_failed_share:
            state, why = (
                "failed",
                (
                    f"{failed} of {self.planned_rollouts} rollouts ({share:.1%}) {how}, more than "
                    f"collection.max_failed_share ({max_failed_share:.1%}); first: {self.failed[0].summary.line()}"
                ),
            )
        elif failed:
            state, why = (
                "incomplete",
                (
                    f"{failed} of {self.planned_rollouts} rollouts ({share:.1%}) {how} and are left "
                    f"out; a rerun collects only them. First: {self.failed[0].summary.line()}"
                ),
            )
        else:
            state, why = "complete", ""
        return RunStatus.model_validate(
            {"state": state, "reason": why, "failed_rollouts": failed, "planned_rollouts": self.planned_rollouts,
             "failed_batches": [f.summary.as_record() for f in self.failed], "environment_errors": environment,
             "judge_errors": judge}
        )  # fmt: skip


async def collect_all(ctx: CollectContext, work: list[Planned], batch_task: Any, label: str = "collect") -> Collected:
    """Reuse cached batches; run the others a few at a time. Requests share one limiter, earlier batches
    first, so batches overlap their tails and the oldest open one finishes first. As many batches are
    being fed as fill the (possibly growing) request limit, plus one; a batch whose rollouts all had their
    first request stops counting, so its slowest rollouts finish beside the next batches' requests (an
    explicit `collection.batches_in_flight` is a hard cap on open batches instead). A
    failed batch does not stop the others: what finishes is kept, and failed batches are returned for the
    run to judge."""
    ctx.progress = progress = Progress(sum(p.batch.size for p in work), ctx.progress_interval_s, label)
    requests = ctx.requests()
    requests.expect(sum(p.batch.size for p in work if p.needs_server))

    def open_batches(limit: int) -> int:
        return ctx.collection.batches_in_flight or math.ceil(limit / ctx.collection.batch_size) + 1

    window = Limiter(open_batches(requests.limit))
    requests.on_resize.append(lambda limit: window.resize(open_batches(limit)))

    async def one(position: int, item: Planned) -> BatchResult:
        target = batch_url(ctx.run_dir, item.batch)
        if item.cached is not None:
            if item.cached.url != target:  # every run folder holds all of its rollouts
                await asyncio.to_thread(ctx.store.copy, item.cached.url, target)
            progress.add_cached(item.cached.rollouts)
            return BatchResult(target, item.cached.rollouts, item.cached.errors, item.cached.completion_tokens, 0.0)
        run = batch_task.with_options(refresh_cache=True) if item.stale else batch_task
        if item.rescore_from is not None:  # scored from earlier completions: no request, no window slot
            result = BatchResult.from_record(await run(ctx, item.env, item.batch, item.rescore_from.as_record()))
        else:
            await window.acquire(position)
            held = [True]

            def free(_: object = None) -> None:
                if held[0]:
                    held[0] = False
                    window.release()

            # the batch's window place is given back once it is fed (every rollout had its first request
            # slot), so the next batch's requests queue while this one's slowest rollouts finish; an explicit
            # collection.batches_in_flight keeps its meaning: that many batches open, no more
            fed = asyncio.ensure_future(ctx.feed.event(position).wait())
            if ctx.collection.batches_in_flight is None:
                fed.add_done_callback(free)
            try:
                request_priority.set(position)  # this task's context: the batch's requests inherit it
                result = BatchResult.from_record(await run(ctx, item.env, item.batch))
            finally:
                fed.cancel()
                free()
                ctx.feed.forget(position)
        if result is None:
            raise RuntimeError(f"batch {item.batch.benchmark}-{item.batch.index} returned no batch record")
        if result.url != target:  # a concurrent run collected it first (we waited on its lock)
            await asyncio.to_thread(ctx.store.copy, result.url, target)
            result = BatchResult(target, result.rollouts, result.errors, result.completion_tokens, result.seconds)
        progress.batch_done(item.batch.key, result.rollouts)
        return result

    async with progress.reporting():  # every rollout counts as it finishes (collect_batch_impl)
        outcomes = await asyncio.gather(*(one(i, item) for i, item in enumerate(work)), return_exceptions=True)
    errors = [o for o in outcomes if isinstance(o, BaseException) and not isinstance(o, BatchFailed)]
    if errors:  # not a rollout failure (the server died and could not be restarted, a store error)
        done = sum(isinstance(o, BatchResult) for o in outcomes)
        raise RuntimeError(
            f"{len(errors)} of {len(work)} batches failed ({done} finished and kept for a rerun); "
            f"first error: {type(errors[0]).__name__}: {errors[0]}"
        ) from errors[0]
    return Collected(
        results=[o for o in outcomes if isinstance(o, BatchResult)],
        failed=[o for o in outcomes if isinstance(o, BatchFailed)],
        planned_rollouts=sum(p.batch.size for p in work),
    )
