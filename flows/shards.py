"""Shards: one evaluation's uncached batches spread over child flow runs of its deployment.

The parent plans the run, splits the batches to collect into disjoint shards and submits one child
flow run per shard (`run_deployment`) to the deployment's work pool. Each child prepares the model,
starts its own server in a server slot of its worker and collects its batches into the shared store
through the content-keyed batch cache; the parent waits, resubmits a failed or crashed shard (which
then collects only what it lost), and analyses every batch as one run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from prefect.filesystems import WritableFileSystem
from pydantic import BaseModel, Field

from core import store as store_paths
from core.config import EvalConfig
from core.logs import get_logger
from core.record import ShardRun as ShardRecord
from core.store import Store
from tasks.collection.batch import partial_url
from tasks.collection.cache import lookup
from tasks.collection.failures import BatchFailed, FailureSummary
from tasks.collection.plan import Batch, BatchResult, Planned
from tasks.collection.progress import Progress

MARKER = "shards.json"  # written by the parent into the run folder; a child that cannot read it cannot reach the store
POLL_S = 2.0


class Shard(BaseModel):
    """A child flow run's part of a sharded evaluation (the eval flow's `shard` parameter)."""

    run_id: str = Field(description="the parent's run id: the child writes into its run folder")
    index: int = Field(ge=0)
    count: int = Field(ge=1)
    batches: list[str] = Field(description="cache keys of the batches this shard collects")
    samples_fingerprint: str = Field(description="the model + server fingerprint the parent planned with")

    @property
    def label(self) -> str:
        return f"shard {self.index + 1}/{self.count}"


def split(keys: list[str], count: int) -> list[list[str]]:
    """Deal the batches round-robin into at most `count` non-empty shards: each shard gets a mix of the
    run's benchmarks (Tetris batches take longer than GSM8K ones), and the split is deterministic."""
    count = max(1, min(count, len(keys)))
    return [keys[i::count] for i in range(count)]


def deployment_name(config: EvalConfig, flow_name: str | None, deployment: str | None) -> str:
    """The deployment shards run as: collection.shard_deployment, else the run's own deployment."""
    if config.collection.shard_deployment:
        return config.collection.shard_deployment
    if flow_name and deployment:
        return f"{flow_name}/{deployment}"
    raise ValueError(
        f"collection.shards {config.collection.shards!r} submits child flow runs of a deployment: start the run "
        "from a deployment (prefect deployment run eval/<name>) or set collection.shard_deployment (e.g. eval/smoke)"
    )


async def check_deployment(name: str) -> None:
    """The shards' deployment exists (checked before the model is prepared)."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    async with get_client() as client:
        try:
            await client.read_deployment_by_name(name)
        except ObjectNotFound:
            raise ValueError(
                f"collection.shard_deployment {name!r}: no such deployment; list them with `prefect deployment ls`"
            ) from None


async def shard_count(config: EvalConfig) -> int:
    """collection.shards as a number: `auto` is the number of free server slots in the pool (at least 1)."""
    if config.collection.shards != "auto":
        return int(config.collection.shards)
    from tasks.serving.slots import free_slots

    free, total = await free_slots()
    get_logger().info("collection.shards auto: %d of %d server slots free", free, total)
    return max(1, free)


def child_parameters(original: EvalConfig) -> dict[str, Any]:
    """The config a child runs with: the run's own, as given (blocks are resolved by the child, so their
    secrets stay in the blocks), never sharded again. A bearer token given in the parameters (not a
    block) is passed on as given: the child needs it, and it is already in the parent's parameters."""
    data = original.model_dump(mode="json", exclude_unset=True)  # unset fields still take a block's values
    if "api_key" in data.get("server", {}):
        data["server"]["api_key"] = original.server.api_key.get_secret_value()
    data.setdefault("collection", {})["shards"] = 1
    return data


def write_marker(store: Store, run_dir: str, shards: list[Shard]) -> None:
    """The run folder's note of its shards; a child reads it to prove it sees the same store."""
    note = {"host": socket.gethostname(), "shards": [{"index": s.index, "batches": len(s.batches)} for s in shards]}
    store.write_bytes(store_paths.join(run_dir, MARKER), json.dumps(note, indent=1).encode())


def check_marker(store: Store, run_dir: str) -> None:
    """A child whose worker cannot reach the parent's store (a local path on another host) fails here,
    before it starts a server."""
    if not store.exists(store_paths.join(run_dir, MARKER)):
        raise ValueError(
            f"store.url {store.url} is not the parent run's store as seen from host {socket.gethostname()}: "
            f"{store_paths.join(run_dir, MARKER)} is missing (a local folder on another host?); use a store every "
            "worker reaches (s3://..., or a shared filesystem)"
        )


def shard_work(shard: Shard, work: list[Planned], fingerprint: str) -> list[Planned]:
    """The child's part of the run's plan. A child whose model or server settings make other samples
    than the parent planned (another vLLM version on its worker, a conversion that differs) fails
    here: its batches would be cached under keys the parent never reads."""
    if fingerprint != shard.samples_fingerprint:
        raise ValueError(
            f"{shard.label}: on host {socket.gethostname()} the model and server settings fingerprint "
            f"{fingerprint[:16]}, the parent planned with {shard.samples_fingerprint[:16]}: give every worker the "
            "same vLLM runtime and model (e.g. a shared model.cache_dir)"
        )
    mine = [p for p in work if p.batch.cache_key in set(shard.batches)]
    if len(mine) != len(shard.batches):
        raise ValueError(
            f"{shard.label}: {len(shard.batches) - len(mine)} of its batches are not in this worker's plan "
            "(the dataset or config differs from the parent's)"
        )
    return mine


def lost_batch(store: Store, batch: Batch, reason: str) -> BatchFailed:
    """A batch no shard finished, as a failed batch: its rollouts kept by the last attempt are analysed."""
    import pyarrow.parquet as pq

    url = partial_url(store, batch)
    kept = 0
    if store.exists(url):
        with store.open(url, "rb") as f:
            kept = pq.ParquetFile(f).metadata.num_rows
    failed = batch.size - kept
    summary = FailureSummary(batch.benchmark, batch.index, batch.size, failed, "transient", ((reason, failed),))
    return BatchFailed(summary, url if kept else None)


@dataclass
class ShardRun:
    """One shard's flow runs (the first submission and its resubmissions)."""

    shard: Shard
    flow_run_ids: list[Any] = field(default_factory=list)
    state: str = "Pending"
    message: str = ""
    seconds: float = 0.0

    def as_record(self) -> ShardRecord:
        """The shard as the run record lists it (run_info.shards)."""
        return ShardRecord(index=self.shard.index, batches=len(self.shard.batches), state=self.state,
                           attempts=len(self.flow_run_ids), flow_runs=[str(i) for i in self.flow_run_ids],
                           seconds=round(self.seconds, 1), message=self.message)  # fmt: skip


async def _submit(deployment: str, parameters: dict[str, Any], shard: Shard, attempt: int) -> Any:
    from prefect.deployments import arun_deployment

    name = f"{shard.run_id}-shard-{shard.index + 1}of{shard.count}" + (f"-retry{attempt}" if attempt else "")
    params = {"config": parameters, "shard": shard.model_dump(mode="json")}
    run = await arun_deployment(name=deployment, parameters=params, timeout=0, flow_run_name=name, tags=["shard"])
    return run.id


async def watch(progress: Progress, storage: WritableFileSystem, sizes: dict[str, int]) -> None:
    """Count the shards' batches as their cache records reach the store (until cancelled), so the
    parent's log, terminal and progress artifact show done/total, rate and ETA of the whole run."""
    pending = dict(sizes)
    while pending:
        await asyncio.sleep(progress.interval_s)
        for key in list(pending):
            result = BatchResult.from_record(await asyncio.to_thread(lookup, storage, key))
            if result is not None:
                progress.add_batch(result.rollouts, result.completion_tokens, result.errors)
                del pending[key]


async def run_shards(
    deployment: str, parameters: dict[str, Any], shards: list[Shard], retries: int, progress: Progress | None = None,
    storage: WritableFileSystem | None = None, sizes: dict[str, int] | None = None,
) -> list[ShardRun]:  # fmt: skip
    """Submit every shard, wait for all, resubmit a shard whose run failed, crashed or was cancelled (up
    to `retries` times). Returns each shard's outcome; never raises for a failed shard (the parent
    judges the run by the batches that reached the store). With `progress`, the shards' batches are
    counted as they reach `storage`."""
    if progress is None or storage is None or sizes is None:
        return await _run_shards(deployment, parameters, shards, retries)
    async with progress.reporting():
        watcher = asyncio.create_task(watch(progress, storage, sizes))
        try:
            return await _run_shards(deployment, parameters, shards, retries)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher


async def _run_shards(deployment: str, parameters: dict[str, Any], shards: list[Shard], retries: int) -> list[ShardRun]:
    from prefect.client.orchestration import get_client

    logger = get_logger()
    runs = [ShardRun(s) for s in shards]
    started = time.monotonic()
    for run in runs:
        run.flow_run_ids.append(await _submit(deployment, parameters, run.shard, 0))
    logger.info("submitted %d shards to %s: %s", len(runs), deployment, ", ".join(str(len(s.batches)) for s in shards))
    open_runs = list(runs)
    async with get_client() as client:
        while open_runs:
            await asyncio.sleep(POLL_S)
            for run in list(open_runs):
                state = (await client.read_flow_run(run.flow_run_ids[-1])).state
                if state is None or not state.is_final():
                    continue
                assert state.name is not None  # Prefect's State validator names every state after its type
                run.state, run.message = state.name, " ".join((state.message or "").split())[:300]
                if state.is_completed():
                    run.seconds = time.monotonic() - started
                    open_runs.remove(run)
                elif len(run.flow_run_ids) <= retries:
                    logger.warning("%s ended %s (%s): resubmitting it", run.shard.label, state.name, run.message)
                    run.flow_run_ids.append(await _submit(deployment, parameters, run.shard, len(run.flow_run_ids)))
                    continue
                else:
                    logger.error("%s ended %s after %d attempts: %s", run.shard.label, state.name,
                                 len(run.flow_run_ids), run.message)  # fmt: skip
                    run.seconds = time.monotonic() - started
                    open_runs.remove(run)
                done = len(runs) - len(open_runs)
                logger.info("%s %s; %d/%d shards done (%.0f s)", run.shard.label, run.state, done, len(runs),
                            time.monotonic() - started)  # fmt: skip
    return runs


def cancel_shards(parent_flow_run_id: Any) -> int:
    """Cancel the unfinished shards of a cancelled parent (the flow's on_cancellation hook): a cancelled
    evaluation leaves no server running for it on any worker. Returns how many were cancelled."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId, FlowRunFilterTags
    from prefect.states import Cancelling

    with get_client(sync_client=True) as client:
        children = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[parent_flow_run_id]),
                tags=FlowRunFilterTags(all_=["shard"]),
            )
        )
        live = [run for run in children if run.state is None or not run.state.is_final()]
        for run in live:
            client.set_flow_run_state(run.id, Cancelling(message="the sharded run was cancelled"), force=True)
    return len(live)
