"""The batch task: one batch of rollouts collected concurrently and written as one parquet file,
cached by the batch's content key so a finished batch is never collected again.

An open batch snapshots its finished rollouts to `cache/partial/<batch cache key>.parquet` every
progress interval, and a batch with failed rollouts (see tasks.collection.failures) fails with them
written there: nothing is cached, so a retry of the task, a rerun after a kill or the UI's Retry
collects only the rest, and a run whose retries ran out still analyses them."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from prefect import task
from prefect.cache_policies import CachePolicy
from prefect.context import TaskRunContext
from prefect.serializers import JSONSerializer

from core.logs import get_logger
from core.rollout_row import RolloutRow
from core.schema import to_parquet_bytes
from core.store import Store
from envs.base import Env
from tasks.collection.concurrency import request_priority
from tasks.collection.failures import BatchFailed, FailureSummary, RolloutFailed
from tasks.collection.generations import record_generation
from tasks.collection.plan import Batch, BatchRecord, BatchResult, batch_url
from tasks.collection.rescore import rescore_batch_impl
from tasks.collection.rollout import CollectContext, rollout


def write_batch(store: Store, url: str, records: list[RolloutRow]) -> None:
    now = datetime.now(UTC)
    for record in records:
        record["created_at"] = now
    store.write_bytes(url, to_parquet_bytes(records))  # atomic: never a half-written batch


def partial_url(store: Store, batch: Batch) -> str:
    """Where a batch keeps its finished rollouts while it is open (snapshots) and after it failed: keyed
    by content like the batch cache, outside the run folder and the cache, so never read as a finished
    batch; only the next attempt of the same batch reads it."""
    return store.path("cache", "partial", f"{batch.cache_key}.parquet")


def _kept(store: Store, url: str, batch: Batch) -> dict[tuple[str, int], RolloutRow]:
    """Finished rollouts an earlier attempt of this batch kept, by (prompt_id, repeat)."""
    if not store.exists(url):
        return {}
    import pyarrow.parquet as pq

    with store.open(url, "rb") as f:
        rows = pq.read_table(f).to_pylist()
    return {(r["prompt_id"], r["repeat"]): r for r in rows if r.get("batch_key") == batch.key}


@contextlib.asynccontextmanager
async def _snapshots(
    ctx: CollectContext, url: str, finished: dict[tuple[str, int], RolloutRow]
) -> AsyncIterator[list[int]]:
    """Every `ctx.progress_interval_s` while the batch is open, write its finished rollouts to `url` when
    there are new ones, so a killed attempt (SIGKILL, a lost node) keeps them. Yields [rows written];
    on exit the writer is stopped, never mid-write, so nothing writes `url` after the batch moved on."""
    written = [len(finished)]  # what is there already came from the file
    stop = asyncio.Event()

    async def loop() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), ctx.progress_interval_s)
            if stop.is_set() or len(finished) <= written[0]:
                continue
            rows = [r.copy() for r in finished.values()]  # copies: the thread stamps created_at on them
            try:
                await asyncio.to_thread(write_batch, ctx.store, url, rows)
                written[0] = len(rows)
            except Exception as exc:  # a snapshot is an insurance: the batch goes on without it
                get_logger().warning("snapshot of %d finished rollouts to %s failed: %s", len(rows), url, exc)

    writer = asyncio.create_task(loop())
    try:
        yield written
    finally:
        stop.set()
        await writer


async def collect_batch_impl(ctx: CollectContext, env: Env, batch: Batch) -> BatchResult:
    started = time.perf_counter()
    partial = partial_url(ctx.store, batch)
    # store reads and writes go to threads: other batches' requests are in flight on this event loop
    kept = await asyncio.to_thread(_kept, ctx.store, partial, batch)
    ctx.progress.add_kept(batch.key, len(kept))
    ctx.feed.expect(request_priority.get(), batch.size - len(kept))
    finished = dict(kept)

    async def one(row: dict[str, Any], repeat: int) -> RolloutRow:
        key = (env.prompt_id(row), repeat)
        if key in kept:
            return kept[key]
        try:
            record = await rollout(ctx, env, batch, row, repeat)
        except Exception:
            ctx.progress.add_failure()
            raise
        finished[key] = record
        ctx.progress.add_rollout(batch.key, record)
        return record

    async with _snapshots(ctx, partial, finished) as written:
        outcomes = await asyncio.gather(
            *(one(row, r) for row in batch.rows for r in batch.repeats), return_exceptions=True
        )
    records = [o for o in outcomes if isinstance(o, dict)]
    failures = [_as_failure(o) for o in outcomes if not isinstance(o, dict)]
    records.sort(key=lambda rec: (rec["prompt_id"], rec["repeat"]))
    if failures:
        if records:
            await asyncio.to_thread(write_batch, ctx.store, partial, records)
        summary = FailureSummary.of(batch.benchmark, batch.index, batch.size, failures)
        raise BatchFailed(summary, partial if records else None)
    url = batch_url(ctx.run_dir, batch)
    await asyncio.to_thread(write_batch, ctx.store, url, records)
    if written[0]:
        await asyncio.to_thread(ctx.store.remove, partial)
    result = BatchResult(
        url=url,
        rollouts=len(records),
        errors=sum(rec.get("error") is not None for rec in records),
        completion_tokens=sum(rec.get("completion_tokens") or 0 for rec in records),
        seconds=time.perf_counter() - started,
    )
    await asyncio.to_thread(record_generation, ctx.store, batch.generation or batch.key, result.as_record())
    return result


def _as_failure(exc: BaseException) -> RolloutFailed:
    """Any exception of a rollout as a failure; one that is not a request failure (a scoring bug, say)
    counts as a configuration failure: it would fail again."""
    if isinstance(exc, RolloutFailed):
        return exc
    if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
        raise exc
    return RolloutFailed("configuration", " ".join(f"{type(exc).__name__}: {exc}".split())[:500])


class BatchKeyPolicy(CachePolicy):
    """Cache key = the batch's content key: a new run, a UI retry or a sweep point with the same
    inputs hits it; any change of model, rows, sampling or prompt template misses."""

    def compute_key(
        self, task_ctx: TaskRunContext, inputs: dict[str, Any], flow_parameters: dict[str, Any], **kwargs: Any
    ) -> str | None:
        return inputs["batch"].cache_key


def _retryable(_task: Any, _task_run: Any, state: Any) -> bool:
    """Prefect's retry condition: a failure that says it is a configuration error is not retried."""
    failure = state.data
    return not (isinstance(failure, BatchFailed) and not failure.transient)


@task(
    name="collect-batch",
    task_run_name="{batch.benchmark}-batch-{batch.index}",
    retries=2,
    retry_delay_seconds=10,
    # a configuration failure (wrong model name, key) would fail again: only transient ones are retried
    retry_condition_fn=_retryable,
    persist_result=True,
    # the record is plain JSON (BatchResult.as_record), readable by any version; a failed batch is
    # written as evalflow's own line, never as the exception (failures.persisted_form)
    result_serializer=JSONSerializer(object_encoder="tasks.collection.failures.persisted_form"),
    cache_policy=BatchKeyPolicy(),
)
async def collect_batch(
    ctx: CollectContext, env: Env, batch: Batch, rescore_from: BatchRecord | None = None
) -> BatchRecord:
    """Prefect task: one batch of rollouts, written as one parquet file. Retried as a whole; its
    result (where the file is) is persisted, so a finished batch is never collected again. With
    `rescore_from` (a finished batch with the same completions, tasks.collection.rescore) it is scored
    from that batch's file instead, with no request."""
    source = BatchResult.from_record(rescore_from) if rescore_from is not None else None
    if source is not None:
        return (await rescore_batch_impl(ctx, env, batch, source)).as_record()
    return (await collect_batch_impl(ctx, env, batch)).as_record()
