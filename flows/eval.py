"""The `eval` flow: checkpoint -> vLLM server -> batched rollouts -> DuckDB analysis -> reports.

Run it as `evalflow run --config configs/demo.yaml [key.path=value ...]`, or through a Prefect
deployment. Everything that can be checked cheaply (config, store, datasets) is checked
before the model is converted or a server is started.

No `from __future__ import annotations` here: a deployment validates the flow's parameters against
its signature, and postponed (string) annotations leave `EvalConfig` unresolved there.
"""

import asyncio
import contextlib
import json
import tempfile
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.context import FlowRunContext
from prefect.runtime import deployment as prefect_deployment
from prefect.runtime import flow_run as prefect_flow_run

from core import store as store_paths
from core.config import EvalConfig
from core.logs import Stages, get_logger, quiet_tracebacks
from core.resolve import BlockNotFound
from core.secrets import redact
from core.store import Store, StoreError
from envs.base import DatasetError
from flows.plan import check_endpoints, external_endpoint, plan_run, preflight
from flows.shards import (
    Shard,
    cancel_shards,
    check_deployment,
    check_marker,
    child_parameters,
    lost_batch,
    run_shards,
    shard_count,
    shard_work,
    split,
    write_marker,
)
from flows.shards import deployment_name as shard_deployment
from tasks.analysis.compare import baseline_comparison
from tasks.analysis.metrics import analyze_task
from tasks.checkpoints.errors import CheckpointError
from tasks.checkpoints.prepare import PreparedModel, prepare_model
from tasks.collection.batch import BatchKeyPolicy, collect_batch
from tasks.collection.cache import result_storage
from tasks.collection.failures import RunFailed
from tasks.collection.lease import LockStoreError, lock_manager
from tasks.collection.plan import Benchmark, Planned, plan
from tasks.collection.progress import Progress
from tasks.collection.prompt_length import check_prompt_lengths, local_folder
from tasks.collection.provenance import provenance
from tasks.collection.rollout import CollectContext
from tasks.collection.schedule import Collected, collect_all
from tasks.reporting.index import read_entries
from tasks.reporting.report import format_terminal_summary, report_task
from tasks.runtime.venv import ensure_runtime, runtime_for
from tasks.serving.sample_settings import samples_fingerprint
from tasks.serving.server import Endpoint, VLLMServer, Watchdog
from tasks.serving.slots import server_slot

# Errors whose one-line message names what to fix (a bad checkpoint, dataset, store or block): logged
# without tracebacks in every entry point (`evalflow run`, a deployment run), and `evalflow run` turns
# them into one line with exit status 2, as `evalflow prepare` and the dry run do.
INPUT_ERRORS: tuple[type[Exception], ...] = (CheckpointError, DatasetError, BlockNotFound, StoreError, LockStoreError)
quiet_tracebacks((*INPUT_ERRORS, RunFailed))


def new_run_id() -> str:
    return f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"


def _stop_servers(*_: Any, **__: Any) -> None:
    """Crash and cancellation hooks: whatever happened, no server outlives the flow run.

    In-process Prefect passes (flow, flow_run, state) positionally; a worker's runner passes them
    as keywords when it reports a killed flow-run process as crashed."""
    VLLMServer.stop_all()


def _cancel_shards(*args: Any, **kwargs: Any) -> None:
    """Cancellation hook: a cancelled sharded run cancels its shards (a crashed one leaves them running:
    what they collect is cached for the retry)."""
    flow_run = kwargs.get("flow_run", args[1] if len(args) > 1 else None)
    if flow_run is not None and (count := cancel_shards(flow_run.id)):
        get_logger().warning("cancelled %d shard flow runs of this run", count)


@flow(name="eval", on_crashed=[_stop_servers], on_cancellation=[_stop_servers, _cancel_shards], log_prints=True)
async def eval_flow(config: EvalConfig, dry_run: bool = False, shard: Shard | None = None) -> dict[str, Any]:
    """Evaluate one model on the configured benchmarks and write the report.

    The run ends Failed (report written if any rollout finished, never a baseline) on a configuration
    failure or when more than collection.max_failed_share of its rollouts failed transiently.

    With `dry_run`, report what would be converted, started and generated, and start nothing. With
    `collection.shards`, the batches are collected by child flow runs of the deployment; `shard` is
    set in those children: they collect their batches into the parent's run and write no report.
    """
    logger = get_logger()
    if dry_run:
        summary = plan_run(config)
        logger.info("dry run:\n%s", json.dumps(summary, indent=2, default=str))
        return summary
    original, stages = config, Stages()
    flow_ctx = FlowRunContext.get()
    with stages("validate"):
        config, store, benchmarks, _ = preflight(config)
        locks = lock_manager(store)  # an S3 store's batch locks are leases on it: conditional writes checked
        shards, deployment = 1, None
        if shard is None and config.collection.shards != 1:
            deployment = shard_deployment(config, prefect_flow_run.flow_name, prefect_deployment.name)
            await check_deployment(deployment)
            shards = await shard_count(config)
    run_id = shard.run_id if shard else new_run_id()
    run_dir = store.path("runs", run_id)
    if shard is not None:
        check_marker(store, run_dir)  # before the model is prepared or a server started
    started_at = datetime.now(UTC)
    logger.info("run %s -> %s%s", run_id, run_dir, f" ({shard.label})" if shard else "")

    with stages("prepare_model"):
        if config.server.mode == "managed":
            model = prepare_model(config.model, config.server.runtime)
            if model.kind != "hub" and not Path(model.path).exists():  # cached result, folder since deleted
                model = prepare_model.with_options(refresh_cache=True)(config.model, config.server.runtime)
        else:
            name = config.model.served_name or config.model.source
            model = PreparedModel(name, name, f"external:{name}", config.model.source, "external")

    if config.server.mode == "managed" and (folder := local_folder(model.path)) is not None:
        with stages("prompt_lengths"):  # before any batch is planned: a skipped prompt changes the batches
            benchmarks = check_prompt_lengths(benchmarks, config, folder, model.fingerprint)

    storage = result_storage(store)
    batch_task = collect_batch.with_options(
        retries=config.collection.batch_retries,
        result_storage=storage,
        cache_policy=BatchKeyPolicy().configure(lock_manager=locks, isolation_level="SERIALIZABLE"),
    )
    fingerprint = samples_fingerprint(model.fingerprint, config.server)
    with stages("plan"):
        # the model plus the server settings that change samples (dtype, quantization, vLLM version)
        work = plan(benchmarks, config, fingerprint, storage, store)
        if shard is not None:
            work = shard_work(shard, work, fingerprint)
        missing = [p for p in work if p.cached is None]
        logger.info(
            "%d batches (%d rollouts): %d cached, %d to collect (%d rollouts)",
            len(work), sum(p.batch.size for p in work), len(work) - len(missing), len(missing),
            sum(p.batch.size for p in missing),
        )  # fmt: skip

    ctx = CollectContext(
        run_id=run_id,
        run_dir=run_dir,
        endpoint=Endpoint("http://127.0.0.1:9/v1", model.served_name),  # replaced by the server's
        model_fingerprint=model.fingerprint,
        sampling=config.sampling,
        collection=config.collection,
        store=store,
        progress_interval_s=config.collection.progress_interval_s,
    )
    server: VLLMServer | None = None
    if deployment is not None and shards > 1 and len(missing) > 1:  # else collected here, as unsharded
        with stages("shards"):
            collected, server_info = await _collect_sharded(
                ctx, work, batch_task, original, deployment, shards, fingerprint, benchmarks, config, storage
            )
    else:
        log_name = f"vllm-shard-{shard.index + 1}.log" if shard else "vllm.log"
        collected, server, server_info = await _collect_here(
            ctx, work, batch_task, config, model, benchmarks, stages, log_name
        )
    status = collected.status(config.collection.max_failed_share)
    if shard is not None:  # a child: its batches are in the store; the parent analyses and reports
        if status["state"] != "complete":
            raise RunFailed(f"{shard.label} of run {run_id}: {status['reason']}")
        return {"run_id": run_id, "shard": shard.index, "batches": len(work), "collected": len(missing),
                "timings_s": stages.seconds, "server": server_info}  # fmt: skip
    files = [r.url for r in collected.results] + _kept_rollouts(store, run_dir, collected)
    if status["state"] != "complete":
        logger.warning("run %s is %s: %s", run_id, status["state"].upper(), status["reason"])
    if status["state"] == "failed" and not files:
        raise RunFailed(f"run {run_id} failed, no rollout finished: {status['reason']}")
    with stages("analyze"):
        # keyed by each benchmark's label: one environment may run in several settings
        specs = {b.name: b.env.metrics for b in benchmarks}
        metrics = analyze_task(files, store, specs, {b.name for b in benchmarks if b.env.majority_vote})
    with stages("report"):
        run_info = {
            "run_id": run_id,
            "run_name": config.run_name,
            "status": status,
            "flow_run_id": str(flow_ctx.flow_run.id) if flow_ctx and flow_ctx.flow_run else None,
            "model": model.served_name,
            "model_source": model.source,
            "model_fingerprint": model.fingerprint,
            "started_at": started_at.isoformat(),
            "finished_at": datetime.now(UTC).isoformat(),
            "config": redact(config.model_dump(mode="json")),  # no credential reaches a report
            "timings": stages.seconds,
            "deployment": prefect_deployment.name,  # None outside a deployment run
            "provenance": _provenance(config, benchmarks, server),
        }
        if "shards" in server_info:
            run_info["shards"] = server_info["shards"]
        long_prompts = {b.name: b.long_prompts for b in benchmarks if b.long_prompts and b.long_prompts["skipped"]}
        if long_prompts:
            run_info["long_prompts"] = long_prompts
        # the latest earlier complete run of the same deployment (or run name) with these benchmarks
        comparison = baseline_comparison(store, metrics, run_info, read_entries(store), config.baseline_run_id)
        urls = report_task(run_dir, metrics, run_info, files, store, comparison=comparison)
    summary = format_terminal_summary(metrics, urls)
    logger.info("run %s finished; stages: %s\n%s", run_id, json.dumps(stages.seconds), summary)
    if status["state"] == "failed":  # the report says so at its top; the flow run ends Failed
        raise RunFailed(f"run {run_id} failed: {status['reason']} (report: {urls['html']})")
    return {
        "run_id": run_id,
        "run_dir": run_dir,
        "status": status["state"],
        "reports": urls,
        "timings_s": stages.seconds,
        "metrics": metrics.model_dump(mode="json"),
        "comparison": comparison,
        "batches": {"total": len(work), "cached": len(work) - len(missing)},
        "server": server_info,
    }


async def _collect_here(
    ctx: CollectContext,
    work: list[Planned],
    batch_task: Any,
    config: EvalConfig,
    model: PreparedModel,
    benchmarks: list[Benchmark],
    stages: Stages,
    log_name: str = "vllm.log",
) -> tuple[Collected, VLLMServer | None, dict[str, Any]]:
    """Collect the run's batches in this flow run: with a managed server in one of this host's server
    slots (stopped on any exit), or with the external endpoint."""
    logger = get_logger()
    missing = [p for p in work if p.cached is None]
    server: VLLMServer | None = None
    server_info: dict[str, Any] = {}
    local_logs = Path(ctx.run_dir) / "logs" if store_paths.is_local(ctx.run_dir) else Path(tempfile.mkdtemp()) / "logs"
    async with contextlib.AsyncExitStack() as stack:
        try:
            with stages("start_server"):
                if not missing:
                    logger.info("every batch is cached: no server needed")
                elif config.server.mode == "managed":
                    runtime = ensure_runtime(config.server.runtime)
                    need = config.server.tensor_parallel_size * config.server.data_parallel_size
                    slot = await stack.enter_async_context(
                        server_slot(runtime.flavor, need if runtime.flavor == "gpu" else 1)
                    )
                    log = local_logs / log_name
                    server = VLLMServer(runtime, model, config.server, log, pin=slot.env)
                    ctx.endpoint = await asyncio.to_thread(server.start)
                    server_info = {"pid": server.pid, "port": server.port, "log": str(server.log_path),
                                   "slot": {"kind": slot.kind, "devices": list(slot.devices),
                                            "waited_s": round(slot.waited_s, 1)}}  # fmt: skip
                    check_endpoints(ctx.endpoint, config, benchmarks)
                else:
                    ctx.endpoint = external_endpoint(config)
                    check_endpoints(ctx.endpoint, config, benchmarks)
            with stages("collect"):
                if server is not None:
                    async with Watchdog(server, max_restarts=config.server.max_restarts) as watchdog:
                        ctx.server_ready = watchdog.wait_ready
                        collected = await collect_all(ctx, work, batch_task)
                    # a restart is a new process: the info names the one that served last
                    server_info.update(pid=server.pid, restarts=watchdog.restarts)
                else:
                    collected = await collect_all(ctx, work, batch_task)
                    if len(ctx.endpoint.urls) > 1:  # requests each replica took, and any left out at the end
                        server_info["replicas"] = [{"url": r.url, "requests": r.requests, "up": r.up}
                                                   for r in ctx.pool().replicas]  # fmt: skip
        finally:
            await ctx.aclose()
            if server is not None:
                with stages("stop_server"):
                    server.stop()
            if not ctx.store.is_local and (local_logs / log_name).exists():
                ctx.store.write_bytes(
                    store_paths.join(ctx.run_dir, "logs", log_name), (local_logs / log_name).read_bytes()
                )
    return collected, server, server_info


async def _collect_sharded(
    ctx: CollectContext,
    work: list[Planned],
    batch_task: Any,
    original: EvalConfig,
    deployment: str,
    shards: int,
    fingerprint: str,
    benchmarks: list[Benchmark],
    config: EvalConfig,
    storage: Any,
) -> tuple[Collected, dict[str, Any]]:
    """Collect the missing batches with child flow runs of `deployment`, then read every batch of the run
    from the store; a batch no shard finished counts as failed (its kept rollouts are analysed)."""
    keys = split([p.batch.cache_key for p in work if p.cached is None], shards)
    parts = [Shard(run_id=ctx.run_id, index=i, count=len(keys), batches=k, samples_fingerprint=fingerprint)
             for i, k in enumerate(keys)]  # fmt: skip
    write_marker(ctx.store, ctx.run_dir, parts)
    sizes = {p.batch.cache_key: p.batch.size for p in work if p.cached is None}
    progress = Progress(sum(sizes.values()), config.collection.progress_interval_s, f"collect ({len(parts)} shards)")
    runs = await run_shards(
        deployment, child_parameters(original), parts, config.collection.shard_retries, progress, storage, sizes
    )
    replanned = plan(benchmarks, config, fingerprint, storage, ctx.store)
    done = await collect_all(ctx, [p for p in replanned if p.cached is not None], batch_task)
    why = {key: f"{run.shard.label} ended {run.state}: {run.message}" for run in runs for key in run.shard.batches}
    lost = [lost_batch(ctx.store, p.batch, why.get(p.batch.cache_key, "not collected")) for p in replanned
            if p.cached is None]  # fmt: skip
    collected = Collected(done.results, lost, planned_rollouts=sum(p.batch.size for p in replanned))
    return collected, {"shards": [run.as_record() for run in runs]}


def _provenance(config: EvalConfig, benchmarks: list[Benchmark], server: VLLMServer | None) -> dict[str, Any]:
    """The run's provenance; for a run that started no server, the runtime a managed run would use."""
    runtime = server.runtime if server is not None else None
    if runtime is None and config.server.mode == "managed":
        candidate = runtime_for(config.server.runtime)
        runtime = candidate if candidate.is_complete() else None
    return provenance(config, benchmarks, runtime, server.cpu if server is not None else None)


def _kept_rollouts(store: Store, run_dir: str, collected: Collected) -> list[str]:
    """The finished rollouts of failed batches, copied into the run folder for its analysis."""
    urls = []
    for failure in collected.failed:
        if failure.kept_url:
            target = store_paths.join(
                run_dir, "partial", failure.summary.benchmark, f"{failure.summary.index:05d}.parquet"
            )
            store.copy(failure.kept_url, target)
            urls.append(target)
    return urls
