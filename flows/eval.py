"""The `eval` flow: checkpoint -> vLLM server -> batched rollouts -> DuckDB analysis -> reports.

Run it as `evalflow run --config configs/demo.yaml [key.path=value ...]`, or through a Prefect
deployment. Everything that can be checked cheaply (config, store, datasets) is checked
before the model is converted or a server is started.

No `from __future__ import annotations` here: a deployment validates the flow's parameters against
its signature, and postponed (string) annotations leave `EvalConfig` unresolved there.
"""

import contextlib
import dataclasses
import json
import tempfile
import uuid
from dataclasses import dataclass
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
from core.record import Collection, Provenance, Replica, RunInfo, RunRecord, RunStatus, ServerInfo, ShardRun
from core.secrets import redact
from core.store import Store
from flows.judging import JudgeSetup, judge_phase, prepare_judge
from flows.plan import check_endpoints, external_endpoint, plan_run, preflight
from flows.rescore import RescoreError
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
from tasks.analysis.gate import describe as describe_gate
from tasks.analysis.gate import gate
from tasks.analysis.judge_stats import judge_stats
from tasks.analysis.metrics import analyze_task
from tasks.checkpoints.prepare import PreparedModel, prepare_model
from tasks.collection.batch import BatchKeyPolicy, collect_batch
from tasks.collection.cache import result_storage
from tasks.collection.failures import RunFailed
from tasks.collection.lease import lock_manager
from tasks.collection.plan import Benchmark, Planned, plan
from tasks.collection.progress import Progress
from tasks.collection.prompt_length import check_prompt_lengths, local_folder
from tasks.collection.provenance import provenance
from tasks.collection.rollout import CollectContext
from tasks.collection.schedule import Collected, collect_all
from tasks.judging.completions import for_collection
from tasks.reporting.index import read_entries
from tasks.reporting.report import FINISHED_MARK, format_terminal_summary, report_task, run_record
from tasks.runtime.venv import runtime_for
from tasks.serving.managed import Managed, start_managed
from tasks.serving.sample_settings import samples_fingerprint
from tasks.serving.server import Endpoint, VLLMServer, Watchdog

# Every EvalflowError's message names what to fix: logged without its traceback in every entry point
# (`evalflow run`, a deployment run); the command line prints its one line (cli.common.EvalflowGroup).
quiet_tracebacks()


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


@dataclass(frozen=True)
class Prepared:
    """A run ready to collect: its config (blocks applied), store, benchmarks, model and batch plan."""

    original: EvalConfig  # as given: what a shard child is started with
    config: EvalConfig
    store: Store
    benchmarks: list[Benchmark]
    run_id: str
    run_dir: str
    started_at: datetime
    model: PreparedModel
    fingerprint: str  # the samples fingerprint: the model plus the server settings that change samples
    storage: Any
    batch_task: Any
    work: list[Planned]
    shards: int
    deployment: str | None
    rescore_of: str | None = None
    judge: JudgeSetup | None = None  # the judge of the judged benchmarks (flows/judging.py)

    @property
    def missing(self) -> list[Planned]:
        return [p for p in self.work if p.needs_server]


@flow(name="eval", on_crashed=[_stop_servers], on_cancellation=[_stop_servers, _cancel_shards], log_prints=True)
async def eval_flow(
    config: EvalConfig, dry_run: bool = False, shard: Shard | None = None, rescore_of: str | None = None
) -> RunRecord:
    """Evaluate one model on the configured benchmarks and write the report; returns the run's record.

    The run ends Failed (report written if any rollout finished, never a baseline) on a configuration
    failure or when more than collection.max_failed_share of its rollouts failed transiently.

    With `dry_run`, report what would be converted, started and generated, and start nothing (a "planned"
    record). With `collection.shards`, the batches are collected by child flow runs of the deployment;
    `shard` is set in those children: they collect their batches into the parent's run and write no report
    (a "collected" record). With `rescore_of` (`evalflow rescore`), every batch must be cached or rescored
    from cached completions: a run that would need a server fails before it starts one.
    """
    if dry_run:
        return planned_run(config)
    stages = Stages()
    prepared = await prepare_run(config, shard, stages)
    if rescore_of is not None:
        prepared = _rescoring(prepared, rescore_of)
    if shard is not None:
        return await collect_shard(prepared, shard, stages)
    return await evaluate(prepared, stages)


def _rescoring(prepared: Prepared, source: str) -> Prepared:
    if prepared.missing:
        first = prepared.missing[0].batch
        raise RescoreError(
            f"rescore of {source}: {len(prepared.missing)} of {len(prepared.work)} batches have no cached completions "
            f"(first: {first.benchmark} batch {first.index}); their prompts, sampling, model or server settings differ "
            "from the run's: evaluate them with `evalflow run`"
        )
    return dataclasses.replace(prepared, rescore_of=source)


def planned_run(config: EvalConfig) -> RunRecord:
    """A dry run: the plan (plan_run) as a "planned" record; nothing converted, started or written."""
    summary = plan_run(config)
    get_logger().info("dry run:\n%s", summary.model_dump_json(indent=2))
    model = summary.model.get("served_name") or config.model.served_name or config.model.source
    info = RunInfo(
        run_id="dry-run", run_name=config.run_name, status=RunStatus(state="planned"), model=str(model),
        model_source=config.model.source, config=summary.config, deployment=prefect_deployment.name,
    )  # fmt: skip
    return RunRecord(run_info=info, collection=Collection(run_dir="", plan=summary))


async def prepare_run(config: EvalConfig, shard: Shard | None, stages: Stages) -> Prepared:
    """Everything before collection: checks, the model (converted, cached), prompt lengths, the batch plan."""
    logger, original = get_logger(), config
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

    judge = prepare_judge(config, benchmarks)  # its identity enters the judged batches' keys
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
        work = plan(benchmarks, config, fingerprint, storage, store, judge and judge.identity)
        work = for_collection(work) if judge else work  # judged: completions now, verdicts after collection
        if shard is not None:
            work = shard_work(shard, work, fingerprint)
        missing = [p for p in work if p.needs_server]
        rescored = sum(p.rescore_from is not None for p in work)
        logger.info(
            "%d batches (%d rollouts): %d cached, %d rescored from cached completions, %d to collect (%d rollouts)",
            len(work), sum(p.batch.size for p in work), len(work) - len(missing) - rescored, rescored, len(missing),
            sum(p.batch.size for p in missing),
        )  # fmt: skip
    return Prepared(
        original, config, store, benchmarks, run_id, run_dir, started_at, model, fingerprint, storage, batch_task,
        work, shards, deployment, judge=judge,
    )  # fmt: skip


async def collect_shard(prepared: Prepared, shard: Shard, stages: Stages) -> RunRecord:
    """A shard child: collect its batches into the parent's run (the parent analyses and reports)."""
    log_name = f"vllm-shard-{shard.index + 1}.log"
    collected, _, server_info = await _collect_here(prepared, stages, log_name)
    status = collected.status(prepared.config.collection.max_failed_share)
    if status.state != "complete":
        raise RunFailed(f"{shard.label} of run {prepared.run_id}: {status.reason}")
    info = _run_info(prepared, status.model_copy(update={"state": "collected"}), stages, None)
    return RunRecord(run_info=info, collection=_collection(prepared, server_info))


async def evaluate(prepared: Prepared, stages: Stages) -> RunRecord:
    """The parent run: collect (here, or by shard child flow runs), analyse, compare, report."""
    logger, config, store, run_id = get_logger(), prepared.config, prepared.store, prepared.run_id
    server: VLLMServer | None = None
    shard_runs: list[ShardRun] = []
    if prepared.deployment is not None and prepared.shards > 1 and len(prepared.missing) > 1:
        with stages("shards"):  # else collected here, as unsharded
            collected, shard_runs = await _collect_sharded(prepared)
        server_info = ServerInfo()  # each shard started its own
    else:
        collected, server, server_info = await _collect_here(prepared, stages, "vllm.log")
    judge = None
    if prepared.judge is not None:
        with stages("judge"):
            collected, judge = await judge_phase(prepared, collected)
    status = collected.status(config.collection.max_failed_share)
    files = [r.url for r in collected.results] + _kept_rollouts(store, prepared.run_dir, collected)
    if status.state != "complete":
        logger.warning("run %s is %s: %s", run_id, status.state.upper(), status.reason)
    if status.state == "failed" and not files:
        raise RunFailed(f"run {run_id} failed, no rollout finished: {status.reason}")
    with stages("analyze"):
        # keyed by each benchmark's label: one environment may run in several settings
        specs = {b.name: b.env.metrics for b in prepared.benchmarks}
        votes = {b.name for b in prepared.benchmarks if b.env.majority_vote}
        metrics = analyze_task(files, store, specs, votes)
        judge = judge and judge.model_copy(update={"metrics": judge_stats(files, store)})
    with stages("report"):
        info = _run_info(prepared, status, stages, server, shard_runs).model_copy(update={"judge": judge})
        # the latest earlier complete run of the same deployment (or run name) with these benchmarks
        comparison = baseline_comparison(store, metrics, info, read_entries(store), config.baseline_run_id)
        if comparison is not None:  # the gate's verdict goes into metrics.json, the report, the index and artifact
            verdict = gate(comparison, config.gate)
            comparison = comparison.model_copy(update={"gate": verdict})
            logger.info("against baseline %s: %s", comparison.baseline_id, describe_gate(verdict))
        urls = report_task(prepared.run_dir, metrics, info, files, store, comparison=comparison)
    summary = format_terminal_summary(metrics, urls)
    logger.info("run %s%s%s\n%s", run_id, FINISHED_MARK, json.dumps(stages.seconds), summary)
    if status.state == "failed":  # the report says so at its top; the flow run ends Failed
        raise RunFailed(f"run {run_id} failed: {status.reason} (report: {urls['html']})")
    record = run_record(
        metrics,
        info.model_copy(update={"timings": dict(stages.seconds), "cpu_timings": dict(stages.cpu_seconds)}),
        comparison,
    )
    return record.model_copy(update={"collection": _collection(prepared, server_info, urls)})


def _run_info(
    prepared: Prepared,
    status: RunStatus,
    stages: Stages,
    server: VLLMServer | None,
    shards: list[ShardRun] | None = None,
) -> RunInfo:
    flow_ctx = FlowRunContext.get()
    config = prepared.config
    long_prompts = {b.name: b.long_prompts for b in prepared.benchmarks if b.long_prompts and b.long_prompts.skipped}
    return RunInfo(
        run_id=prepared.run_id,
        run_name=config.run_name,
        status=status,
        flow_run_id=str(flow_ctx.flow_run.id) if flow_ctx and flow_ctx.flow_run else None,
        model=prepared.model.served_name,
        model_source=prepared.model.source,
        model_fingerprint=prepared.model.fingerprint,
        started_at=prepared.started_at.isoformat(),
        finished_at=datetime.now(UTC).isoformat(),
        config=redact(config.model_dump(mode="json")),  # no credential reaches a report
        timings=stages.seconds,
        cpu_timings=stages.cpu_seconds,
        deployment=prefect_deployment.name,  # None outside a deployment run
        provenance=_provenance(config, prepared.benchmarks, server),
        shards=shards or [],
        long_prompts=long_prompts,
        rescored_from=prepared.rescore_of,
        training_run=config.model.training_run,
        step=config.model.step,
    )


def _collection(prepared: Prepared, server: ServerInfo, reports: dict[str, str] | None = None) -> Collection:
    return Collection(
        run_dir=prepared.run_dir,
        reports=reports or {},
        batches_total=len(prepared.work),
        batches_cached=len(prepared.work) - len(prepared.missing),
        server=server,
    )


def _context(prepared: Prepared, endpoint: Endpoint | None, server_ready: Any = None) -> CollectContext:
    config = prepared.config
    return CollectContext(
        run_id=prepared.run_id,
        run_dir=prepared.run_dir,
        endpoint=endpoint,
        model_fingerprint=prepared.model.fingerprint,
        sampling=config.sampling,
        collection=config.collection,
        store=prepared.store,
        server_ready=server_ready,
        progress_interval_s=config.collection.progress_interval_s,
        reasoning=config.model.reasoning,
    )


async def _collect_here(
    prepared: Prepared, stages: Stages, log_name: str
) -> tuple[Collected, VLLMServer | None, ServerInfo]:
    """Collect the run's batches in this flow run: with a managed server in one of this host's server
    slots (stopped on any exit), or with the external endpoint; with neither when every batch is cached."""
    logger, config, store = get_logger(), prepared.config, prepared.store
    server: VLLMServer | None = None
    managed: Managed | None = None
    server_info = ServerInfo()
    failed = True
    run_dir, work, batch_task = prepared.run_dir, prepared.work, prepared.batch_task
    local_logs = Path(run_dir) / "logs" if store_paths.is_local(run_dir) else Path(tempfile.mkdtemp()) / "logs"
    async with contextlib.AsyncExitStack() as stack:
        try:
            endpoint: Endpoint | None = None
            with stages("start_server"):
                if not prepared.missing:
                    logger.info("every batch is cached: no server needed")
                elif config.server.mode == "managed":
                    managed = await start_managed(stack, config.server, prepared.model, local_logs / log_name)
                    server, server_info, endpoint = managed.server, managed.info, managed.server.endpoint
                    check_endpoints(endpoint, config, prepared.benchmarks)
                else:
                    endpoint = external_endpoint(config)
                    check_endpoints(endpoint, config, prepared.benchmarks)
            with stages("collect"):
                if server is not None:
                    async with Watchdog(server, max_restarts=config.server.max_restarts) as watchdog:
                        ctx = _context(prepared, endpoint, watchdog.wait_ready)
                        stack.push_async_callback(ctx.aclose)
                        collected = await collect_all(ctx, work, batch_task)
                    # a restart is a new process: the info names the one that served last
                    server_info = server_info.model_copy(update={"pid": server.pid, "restarts": watchdog.restarts})
                else:
                    ctx = _context(prepared, endpoint)
                    stack.push_async_callback(ctx.aclose)
                    collected = await collect_all(ctx, work, batch_task)
                    if endpoint is not None and len(endpoint.urls) > 1:  # requests each replica took
                        replicas = [Replica(url=r.url, requests=r.requests, up=r.up) for r in ctx.pool().replicas]
                        server_info = ServerInfo(replicas=replicas)
            failed = False
        finally:
            if managed is not None:
                with stages("stop_server"):
                    await managed.release(failed)
            log = server.log_path if server is not None else local_logs / log_name
            if not store.is_local and log.exists():  # a kept server's log: its whole life so far
                store.write_bytes(store_paths.join(run_dir, "logs", log_name), log.read_bytes())
    return collected, server, server_info


async def _collect_sharded(prepared: Prepared) -> tuple[Collected, list[ShardRun]]:
    """Collect the missing batches with child flow runs of the deployment, then read every batch of the run
    from the store; a batch no shard finished counts as failed (its kept rollouts are analysed)."""
    config, store, storage = prepared.config, prepared.store, prepared.storage
    assert prepared.deployment is not None
    keys = split([p.batch.cache_key for p in prepared.missing], prepared.shards)
    parts = [Shard(run_id=prepared.run_id, index=i, count=len(keys), batches=k,
                   samples_fingerprint=prepared.fingerprint) for i, k in enumerate(keys)]  # fmt: skip
    write_marker(store, prepared.run_dir, parts)
    sizes = {p.batch.cache_key: p.batch.size for p in prepared.missing}
    progress = Progress(sum(sizes.values()), config.collection.progress_interval_s, f"collect ({len(parts)} shards)")
    runs = await run_shards(
        prepared.deployment, child_parameters(prepared.original), parts, config.collection.shard_retries, progress,
        storage, sizes,
    )  # fmt: skip
    judge = prepared.judge and prepared.judge.identity
    replanned = for_collection(plan(prepared.benchmarks, config, prepared.fingerprint, storage, store, judge))
    ctx = _context(prepared, None)  # every batch read here is cached: no request is made
    try:
        done = await collect_all(ctx, [p for p in replanned if not p.needs_server], prepared.batch_task)
    finally:
        await ctx.aclose()
    why = {key: f"{run.shard.label} ended {run.state}: {run.message}" for run in runs for key in run.shard.batches}
    lost = [lost_batch(store, p.batch, why.get(p.batch.cache_key, "not collected")) for p in replanned
            if p.needs_server]  # fmt: skip
    collected = Collected(done.results, lost, planned_rollouts=sum(p.batch.size for p in replanned))
    return collected, [run.as_record() for run in runs]


def _provenance(config: EvalConfig, benchmarks: list[Benchmark], server: VLLMServer | None) -> Provenance:
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
