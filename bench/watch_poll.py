"""The watcher's overhead per poll, as a training run grows: what one `watch` poll costs when every step is
already evaluated (the usual poll: nothing new), next to the evaluation of one step it waits for.

    uv run python -m bench.watch_poll [--steps 10,100,400] [--repeats 5]

Per size: a local training run of N NeMo RL step folders (`.metadata` + a shard each, as the listing sees a
finished save) and a local store holding N complete step runs (each with its own metrics.json, written once by
the real analysis and report code from 40 prompts x 4 rollouts, then copied) in the run index. Timed, medians
of `--repeats`: the listing (tasks.checkpoints.training_run.list_steps), reading the index and planning the
poll, rewriting the curve (N records read, page, markdown and json written), and the whole poll as a flow run
(`watch_flow` on a temporary Prefect API, artifacts included). Then the same listing of an S3 run of the
largest size (moto on loopback) and its request count. The figure to compare with: one step's evaluation on
the CPU default (SmolLM2, managed vLLM CPU server) is about 45 s (tests/flows/test_training_run_e2e.py's logs).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq

from bench.analysis_scale import Generator
from core.config import EvalConfig
from core.record import IndexEntry
from core.resolve import resolve
from core.store import Store
from tasks.analysis.metrics import compute_metrics
from tasks.checkpoints.training_run import list_steps, training_run_id
from tasks.reporting.index import index_entry, read_entries, update_index
from tasks.reporting.report import write_report
from tasks.reporting.training_curve import write_curve_report


def timed(fn: Callable[[], object], repeats: int) -> float:
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def make_run(root: Path, steps: int) -> Path:
    run = root / f"grpo-{steps}"
    for n in range(1, steps + 1):
        weights = run / f"step_{n * 10}" / "policy" / "weights"
        weights.mkdir(parents=True)
        (weights / "__0_0.distcp").write_bytes(b"x" * 64)
        (weights / ".metadata").write_bytes(b"m")
    return run


def make_store(root: Path, run: Path, steps: int, config: EvalConfig) -> Store:
    """N complete step runs in the index, with the key the watcher looks for (all done: nothing to evaluate)."""
    from flows.watch import watch_key

    store = Store(str(root / f"store-{steps}"))
    batch = store.path("runs", "template", "rollouts", "gsm8k", "batch-0.parquet")
    Path(batch).parent.mkdir(parents=True)
    pq.write_table(Generator(40).batch("gsm8k", 0, 40, 4, 0), batch)
    metrics = compute_metrics([batch], store)
    from tests.tasks.conftest import run_info  # a complete run's info with the fields given

    training, key = training_run_id(str(run)), watch_key(resolve(config).config)
    template = write_report(store.path("runs", "template"), metrics, run_info(run_id="template"), [batch], store)
    for n in range(1, steps + 1):
        run_id = f"step-{n * 10:05d}"
        shutil.copytree(Path(store.path("runs", "template")), Path(store.path("runs", run_id)))
        info = run_info(run_id=run_id, training_run=training, step=n * 10)
        urls = {k: v.replace("/template/", f"/{run_id}/") for k, v in template.items()}
        entry = index_entry(info, metrics, urls, store.url)
        update_index(store, IndexEntry.model_validate({**entry.model_dump(), "config_key": key}))
    return store


def config_for(run: Path, store_root: Path, steps: int) -> EvalConfig:
    return EvalConfig.model_validate({
        "model": {"source": str(run), "steps": "all", "settle_s": 0},
        "benchmarks": [{"name": "gsm8k", "limit": 40, "repeats": 4}],
        "store": {"url": str(store_root / f"store-{steps}")},
    })  # fmt: skip


def s3_listing(run: Path, steps: int) -> tuple[float, int]:
    """(seconds, requests) of one listing of the run uploaded to a moto S3 server on loopback."""
    import os

    import boto3

    from tests.conftest import moto_s3

    with moto_s3("ckpts") as url:
        os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
        s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1")
        for path in run.rglob("*"):
            if path.is_file():
                s3.put_object(Bucket="ckpts", Key=f"run/{path.relative_to(run)}", Body=path.read_bytes())
        store = Store("s3://ckpts/run", {"client_kwargs": {"endpoint_url": url}})
        calls = []
        fs = store.filesystem("s3://ckpts/run")[0]
        original = fs._call_s3

        async def counted(method: str, *args: object, **kwargs: object) -> object:
            calls.append(method)
            return await original(method, *args, **kwargs)

        fs._call_s3 = counted
        started = time.perf_counter()
        found = list_steps("s3://ckpts/run", store, settle_s=0)
        seconds = time.perf_counter() - started
        assert len(found) == steps and all(s.ready for s in found)
        return seconds, len(calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", default="10,100,400")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(n) for n in args.steps.split(",")]
    from flows.watch import plan_poll, watch_flow, watch_key
    from ops.api import started_api

    root = Path(tempfile.mkdtemp(prefix="bench-watch-"))
    rows = []
    with started_api() as api, api.serving() if api else _null():
        for steps in sizes:
            run = make_run(root, steps)
            config = config_for(run, root, steps)
            store = make_store(root, run, steps, config)
            key, training = watch_key(resolve(config).config), training_run_id(str(run))
            listing = timed(lambda run=run: list_steps(str(run), settle_s=0), args.repeats)
            listed = list_steps(str(run), settle_s=0)

            def plan(
                store: Store = store,
                listed: list = listed,
                config: EvalConfig = config,
                run: str = training,
                key: str = key,
            ) -> None:
                todo, left = plan_poll(listed, config, run, key, read_entries(store), {})
                assert not todo and len(left) == len(listed)

            planning = timed(plan, args.repeats)
            curve = timed(lambda store=store, run=training: write_curve_report(store, run), args.repeats)
            poll = timed(lambda config=config: asyncio.run(watch_flow(config)), args.repeats)
            rows.append((steps, listing, planning, curve, poll))
        s3_seconds, s3_requests = s3_listing(make_run(root / "s3", sizes[-1]), sizes[-1])
    shutil.rmtree(root, ignore_errors=True)
    print(f"\nwatch poll with every step already evaluated (medians of {args.repeats}; seconds)\n")
    print("| steps | list run folder | index + plan | curve rewrite | whole poll (flow run) | poll / 45 s step |")
    print("|---:|---:|---:|---:|---:|---:|")
    for steps, listing, planning, curve, poll in rows:
        print(f"| {steps} | {listing:.3f} | {planning:.3f} | {curve:.3f} | {poll:.2f} | {poll / 45:.1%} |")
    print(f"\nS3 (moto on loopback), {sizes[-1]} steps: one listing {s3_seconds:.3f} s, {s3_requests} S3 requests")


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":
    main()
