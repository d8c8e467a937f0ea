"""The `eval` flow: checkpoint -> vLLM server -> batched rollouts -> DuckDB analysis -> reports.

Run it as `python -m flows.eval --config configs/demo.yaml [key.path=value ...]`, or through a
Prefect deployment. Everything that can be checked cheaply (config, store, datasets) is checked
before the model is converted or a server is started.

No `from __future__ import annotations` here: a deployment validates the flow's parameters against
its signature, and postponed (string) annotations leave `EvalConfig` unresolved there.
"""

import argparse
import asyncio
import json
import math
import signal
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.context import FlowRunContext
from prefect.runtime import deployment as prefect_deployment

from blocks.resolve import BlockNotFound, resolve_blocks
from core import store
from core.config import EvalConfig
from core.logs import get_logger
from core.overrides import OverrideError, config_data
from envs.base import DatasetError, Env
from envs.datasets import load_rows
from envs.registry import get_env
from tasks.analysis.compare import baseline_comparison
from tasks.analysis.metrics import analyze_task
from tasks.checkpoints.errors import CheckpointError
from tasks.checkpoints.prepare import PreparedModel, plan_model, prepare_model
from tasks.collection.cache import FileLockManager, lock_directory, lookup, result_storage
from tasks.collection.concurrency import Limiter, request_priority
from tasks.collection.progress import Progress
from tasks.collection.rollouts import (
    Batch,
    BatchKeyPolicy,
    BatchResult,
    CollectContext,
    batch_url,
    collect_batch,
    plan_batches,
)
from tasks.reporting.report import format_terminal_summary, report_task
from tasks.runtime.venv import ensure_runtime
from tasks.serving.server import Endpoint, VLLMServer, Watchdog


@dataclass
class Benchmark:
    name: str
    env: Env
    rows: list[dict[str, Any]]
    repeats: int


class Stages:
    """Wall time per stage, for the report and the closing log line."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str):
        started = time.monotonic()
        get_logger().info("stage %s: started", name)
        try:
            yield
        finally:
            self.seconds[name] = round(time.monotonic() - started, 3)
            get_logger().info("stage %s: %.1f s", name, self.seconds[name])


def new_run_id() -> str:
    return f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"


def load_benchmarks(config: EvalConfig) -> list[Benchmark]:
    """Build every environment and load and validate every dataset row up front."""
    benchmarks = []
    for bench in config.benchmarks:
        env = get_env(bench.name, **bench.options)
        source = bench.dataset or str(env.default_dataset_path())
        rows = load_rows(source, env, storage_options=config.store.options or None, limit=bench.limit)
        get_logger().info("benchmark %s: %d prompts x %d repeats from %s", bench.name, len(rows), bench.repeats, source)
        benchmarks.append(Benchmark(bench.name, env, rows, bench.repeats))
    return benchmarks


def _stop_servers(*_: Any, **__: Any) -> None:
    """Crash and cancellation hooks: whatever happened, no server outlives the flow run.

    In-process Prefect passes (flow, flow_run, state) positionally; a worker's runner passes them
    as keywords when it reports a killed flow-run process as crashed."""
    VLLMServer.stop_all()


@dataclass
class Planned:
    env: Env
    batch: Batch
    cached: BatchResult | None = None  # a finished batch of an earlier run (or attempt)
    stale: bool = False  # Prefect has a record, but its parquet file is gone: collect again


def plan(benchmarks: list[Benchmark], config: EvalConfig, model_fingerprint: str, storage: Any) -> list[Planned]:
    """Every batch of the run, each looked up in the cache before any server is started."""
    planned = []
    for bench in benchmarks:
        for batch in plan_batches(
            bench.name, bench.env, bench.rows, bench.repeats, config.collection.batch_size, model_fingerprint,
            config.sampling,
        ):  # fmt: skip
            hit = lookup(storage, BatchKeyPolicy.key_for(batch))
            if isinstance(hit, BatchResult) and store.exists(hit.url, config.store.options):
                planned.append(Planned(bench.env, batch, cached=hit))
            else:
                planned.append(Planned(bench.env, batch, stale=hit is not None))
    return planned


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
                store.copy(item.cached.url, target, ctx.storage_options)
            await progress.advance(item.cached.rollouts, generated=False)
            return BatchResult(target, item.cached.rollouts, item.cached.errors, item.cached.completion_tokens, 0.0)
        async with window.slot(position):
            request_priority.set(position)  # this task's context: the batch's requests inherit it
            run = batch_task.with_options(refresh_cache=True) if item.stale else batch_task
            result = await run(ctx, item.env, item.batch)
        if result.url != target:  # a concurrent run collected it first (we waited on its lock)
            store.copy(result.url, target, ctx.storage_options)
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


def plan_run(config: EvalConfig) -> dict[str, Any]:
    """What a run would do, starting nothing: no conversion, no server, no store writes.

    Datasets are loaded and validated, the model source is located and hashed (memoised), and every
    batch is looked up in the cache, so the numbers match what a real run then does.
    """
    benchmarks = load_benchmarks(config)
    if config.server.mode == "managed":
        model_plan = plan_model(config.model, config.server.runtime)
        fingerprint = model_plan.get("fingerprint")
    else:
        name = config.model.served_name or config.model.source
        model_plan = {"action": f"none: external server {config.server.base_url}", "served_name": name}
        fingerprint = f"external:{name}"
    storage = result_storage(config.store.url, config.store.options, save=False)
    work = plan(benchmarks, config, fingerprint, storage) if fingerprint else []
    cached = [p for p in work if p.cached is not None]
    total = sum(b.repeats * len(b.rows) for b in benchmarks)
    to_generate = total - sum(p.batch.size for p in cached)
    return {
        "config": config.model_dump(mode="json"),
        "model": model_plan,
        "benchmarks": {b.name: {"prompts": len(b.rows), "repeats": b.repeats} for b in benchmarks},
        "batches": {"total": len(work) or None, "cached": len(cached)},
        "rollouts": {"total": total, "cached": total - to_generate, "to_generate": to_generate},
        "would_start": (
            "nothing: every batch is cached"
            if not to_generate
            else f"vLLM ({config.server.runtime}) for {model_plan.get('served_name')}"
            if config.server.mode == "managed"
            else f"requests to {config.server.base_url}"
        ),
    }


@flow(name="eval", on_crashed=[_stop_servers], on_cancellation=[_stop_servers], log_prints=True)
async def eval_flow(config: EvalConfig, dry_run: bool = False) -> dict[str, Any]:
    """Evaluate one model on the configured benchmarks and write the report.

    With `dry_run`, report what would be converted, started and generated, and start nothing.
    """
    logger = get_logger()
    config = resolve_blocks(config)  # a missing block fails here, naming the field
    if dry_run:
        summary = plan_run(config)
        logger.info("dry run:\n%s", json.dumps(summary, indent=2, default=str))
        return summary
    stages = Stages()
    run_id = new_run_id()
    run_dir = store.join(config.store.url, "runs", run_id)
    opts = config.store.options
    started_at = datetime.now(UTC)
    flow_ctx = FlowRunContext.get()
    logger.info("run %s -> %s", run_id, run_dir)

    with stages("validate"):
        store.check_writable(config.store.url, opts)
        benchmarks = load_benchmarks(config)

    with stages("prepare_model"):
        if config.server.mode == "managed":
            model = prepare_model(config.model, config.server.runtime)
            if model.kind != "hub" and not Path(model.path).exists():  # cached result, folder since deleted
                model = prepare_model.with_options(refresh_cache=True)(config.model, config.server.runtime)
        else:
            name = config.model.served_name or config.model.source
            model = PreparedModel(name, name, f"external:{name}", config.model.source, "external")

    storage = result_storage(config.store.url, opts)
    batch_task = collect_batch.with_options(
        result_storage=storage,
        cache_policy=BatchKeyPolicy().configure(
            lock_manager=FileLockManager(lock_directory(config.store.url)), isolation_level="SERIALIZABLE"
        ),
    )
    with stages("plan"):
        work = plan(benchmarks, config, model.fingerprint, storage)
        missing = [p for p in work if p.cached is None]
        logger.info(
            "%d batches (%d rollouts): %d cached, %d to collect (%d rollouts)",
            len(work), sum(p.batch.size for p in work), len(work) - len(missing), len(missing),
            sum(p.batch.size for p in missing),
        )  # fmt: skip

    local_logs = Path(run_dir) / "logs" if store.is_local(run_dir) else Path(tempfile.mkdtemp()) / "logs"
    server: VLLMServer | None = None
    server_info: dict[str, Any] = {}
    try:
        with stages("start_server"):
            if not missing:
                logger.info("every batch is cached: no server needed")
                endpoint = Endpoint("http://127.0.0.1:9/v1", model.served_name)  # never contacted
            elif config.server.mode == "managed":
                runtime = ensure_runtime(config.server.runtime)
                server = VLLMServer(runtime, model, config.server, local_logs / "vllm.log")
                endpoint = server.start()
                server_info = {"pid": server.pid, "port": server.port, "log": str(server.log_path)}
            else:
                assert config.server.base_url
                endpoint = Endpoint(config.server.base_url, model.served_name, config.server.api_key.get_secret_value())
        with stages("collect"):
            ctx = CollectContext(
                run_id=run_id,
                run_dir=run_dir,
                endpoint=endpoint,
                model_fingerprint=model.fingerprint,
                sampling=config.sampling,
                collection=config.collection,
                storage_options=opts,
            )
            if server is not None:
                async with Watchdog(server, max_restarts=config.server.max_restarts) as watchdog:
                    ctx.server_ready = watchdog.wait_ready
                    results = await collect_all(ctx, work, batch_task)
                server_info["restarts"] = watchdog.restarts
            else:
                results = await collect_all(ctx, work, batch_task)
    finally:
        if server is not None:
            with stages("stop_server"):
                server.stop()
        if not store.is_local(run_dir) and (local_logs / "vllm.log").exists():
            store.write_bytes(store.join(run_dir, "logs", "vllm.log"), (local_logs / "vllm.log").read_bytes(), opts)

    files = [r.url for r in results]
    with stages("analyze"):
        metrics = analyze_task(files, opts)
    with stages("report"):
        run_info = {
            "run_id": run_id,
            "run_name": config.run_name,
            "flow_run_id": str(flow_ctx.flow_run.id) if flow_ctx and flow_ctx.flow_run else None,
            "model": model.served_name,
            "model_source": model.source,
            "model_fingerprint": model.fingerprint,
            "started_at": started_at.isoformat(),
            "finished_at": datetime.now(UTC).isoformat(),
            "config": config.model_dump(mode="json"),  # SecretStr dumps as '**********'
            "timings": stages.seconds,
            "deployment": prefect_deployment.name,  # None outside a deployment run
        }
        # the latest earlier run of the same deployment (or run name) with these benchmarks
        comparison = baseline_comparison(config.store.url, metrics, run_info, opts, config.baseline_run_id)
        urls = report_task(run_dir, metrics, run_info, files, opts, comparison=comparison, store_url=config.store.url)
    summary = format_terminal_summary(metrics, urls)
    logger.info("run %s finished; stages: %s\n%s", run_id, json.dumps(stages.seconds), summary)
    return {
        "run_id": run_id,
        "run_dir": run_dir,
        "reports": urls,
        "timings_s": stages.seconds,
        "metrics": metrics,
        "comparison": comparison,
        "batches": {"total": len(work), "cached": len(work) - len(missing)},
        "server": server_info,
    }


# --- command line ---------------------------------------------------------------------------------


def resolve_config(path: str | None, overrides: list[str]) -> EvalConfig:
    """The config file with dotted overrides applied, validated."""
    try:
        data = config_data(path, overrides)
    except OverrideError as exc:
        raise SystemExit(str(exc)) from exc
    return EvalConfig.model_validate(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.eval", description=__doc__)
    parser.add_argument("--config", help="YAML file with EvalConfig fields (default: all defaults)")
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. sampling.temperature=0.6")
    parser.add_argument("--dry-run", action="store_true", help="print what would run (cache hits, rollouts) and exit")
    args = parser.parse_args(argv)
    try:
        config = resolve_config(args.config, args.overrides)
    except ValueError as exc:  # pydantic.ValidationError is a ValueError
        print(f"invalid configuration:\n{exc}", file=sys.stderr)
        return 2
    if args.dry_run:  # no Prefect run either: nothing is started
        try:
            print(json.dumps(plan_run(resolve_blocks(config)), indent=2, default=str))
        except (CheckpointError, DatasetError, BlockNotFound) as exc:
            print(f"dry run: {exc}", file=sys.stderr)
            return 2
        return 0
    # A SIGTERM (e.g. `kill`, a cancelled deployment run) unwinds through `finally`: server stopped.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    asyncio.run(eval_flow(config))  # the flow logs the summary and the report paths
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
