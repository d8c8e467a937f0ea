"""The batch task: one batch of rollouts collected concurrently and written as one parquet file,
cached by the batch's content key so a finished batch is never collected again."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

from prefect import task
from prefect.cache_policies import CachePolicy
from prefect.context import TaskRunContext

from core.schema import to_parquet_bytes
from core.store import Store
from envs.base import Env
from tasks.collection.plan import Batch, BatchResult, batch_url
from tasks.collection.rollout import CollectContext, rollout


def write_batch(store: Store, url: str, records: list[dict[str, Any]]) -> None:
    now = datetime.now(UTC)
    for record in records:
        record["created_at"] = now
    store.write_bytes(url, to_parquet_bytes(records))  # atomic: never a half-written batch


async def collect_batch_impl(ctx: CollectContext, env: Env, batch: Batch) -> BatchResult:
    started = time.perf_counter()
    records = await asyncio.gather(*(rollout(ctx, env, batch, row, r) for row in batch.rows for r in batch.repeats))
    records.sort(key=lambda rec: (rec["prompt_id"], rec["repeat"]))
    url = batch_url(ctx.run_dir, batch)
    write_batch(ctx.store, url, records)
    return BatchResult(
        url=url,
        rollouts=len(records),
        errors=sum(rec.get("error") is not None for rec in records),
        completion_tokens=sum(rec.get("completion_tokens") or 0 for rec in records),
        seconds=time.perf_counter() - started,
    )


class BatchKeyPolicy(CachePolicy):
    """Cache key = the batch's content key: a new run, a UI retry or a sweep point with the same
    inputs hits it; any change of model, rows, sampling or prompt template misses."""

    def compute_key(
        self, task_ctx: TaskRunContext, inputs: dict[str, Any], flow_parameters: dict[str, Any], **kwargs: Any
    ) -> str | None:
        return inputs["batch"].cache_key


@task(
    name="collect-batch",
    task_run_name="{batch.benchmark}-batch-{batch.index}",
    retries=2,
    retry_delay_seconds=10,
    persist_result=True,
    result_serializer="json",  # the record is plain JSON (BatchResult.as_record), readable by any version
    cache_policy=BatchKeyPolicy(),
)
async def collect_batch(ctx: CollectContext, env: Env, batch: Batch) -> dict[str, Any]:
    """Prefect task: one batch of rollouts, written as one parquet file. Retried as a whole; its
    result (where the file is) is persisted, so a finished batch is never collected again."""
    return (await collect_batch_impl(ctx, env, batch)).as_record()
