"""Scale-out: wall time of one evaluation's rollouts over 1, 2, 4 and 8 replicas against ideal linear
scaling, and the parent's overhead per shard when the evaluation runs as child flow runs.

SIMULATION: each replica is bench/sim_replica.py (a throughput model of a GPU server, in its own
process), since real vLLM replicas do not fit on a 2-core machine. What is measured is evalflow's
orchestration: the real eval flow (plan, batches as Prefect tasks, the replica pool, the store) and,
with --shards, real child flow runs of a served deployment on a local Prefect server.

    python -m bench.scale_out                      # 3,200 rollouts over 1, 2, 4, 8 replicas
    python -m bench.scale_out --shards 1,2,4       # and the parent's overhead per shard
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from core.ports import free_port

REPO = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def replicas(count: int, args: argparse.Namespace) -> Iterator[list[str]]:
    """`count` simulated replicas, each its own process; their /v1 URLs."""
    procs, urls = [], []
    for _ in range(count):
        port = free_port()
        cmd = [sys.executable, "-m", "bench.sim_replica", "--port", str(port), "--tokens-per-s", str(args.tokens_per_s),
               "--per-seq-tokens-per-s", str(args.per_seq_tokens_per_s), "--latency-s", str(args.latency_s),
               "--answer-tokens", str(args.answer_tokens)]  # fmt: skip
        procs.append(subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        urls.append(f"http://127.0.0.1:{port}/v1")
    try:
        for url in urls:
            deadline = time.monotonic() + 30
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(url.removesuffix("/v1") + "/health", timeout=1).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"simulated replica {url} did not start")
                time.sleep(0.2)
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait()


def config(urls: list[str], args: argparse.Namespace, store: str, **collection: Any) -> dict[str, Any]:
    repeats = max(1, args.rollouts // args.prompts)
    return {
        "run_name": "scale-out-simulation",
        "model": {"source": "sim-replica", "served_name": "sim-replica"},
        "server": {"mode": "external", "base_url": urls if len(urls) > 1 else urls[0]},
        "sampling": {"max_tokens": args.answer_tokens, "temperature": 0.7},
        "benchmarks": [{"name": "gsm8k", "limit": args.prompts, "repeats": repeats}],
        "collection": {
            "batch_size": args.batch_size,
            "concurrency": args.concurrency_per_replica * len(urls),
            "progress_interval_s": 30,
            **collection,
        },
        "store": {"url": store},
    }


def run_replicas(count: int, args: argparse.Namespace) -> dict[str, float]:
    from core.config import EvalConfig
    from flows.eval import eval_flow

    with replicas(count, args) as urls, tempfile.TemporaryDirectory() as store:
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        result = asyncio.run(eval_flow(EvalConfig.model_validate(config(urls, args, store))))
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
    assert result.state == "complete", result.state
    rollouts = result.total_rollouts
    collect = result.run_info.timings["collect"]
    return {"replicas": count, "rollouts": rollouts, "collect_s": collect, "run_s": wall,
            "client_cpu_s": (after.ru_utime + after.ru_stime) - (cpu.ru_utime + cpu.ru_stime)}  # fmt: skip


COLUMNS = ("replicas", "collect s", "rollouts/s", "speed-up", "of linear", "client CPU s", "run s")


def replica_table(rows: list[dict[str, float]], args: argparse.Namespace) -> None:
    """The table: collection time per replica count, speed-up over one replica and its share of linear."""
    base = rows[0]["collect_s"] * rows[0]["replicas"]
    print(
        f"\nSIMULATION: {args.rollouts:,} rollouts, {args.answer_tokens} tokens each; a replica makes "
        f"{args.tokens_per_s:,.0f} tokens/s (<= {args.per_seq_tokens_per_s:.0f} per sequence), "
        f"+{args.latency_s * 1000:.0f} ms per request; {args.concurrency_per_replica} requests in flight per replica"
    )
    print(" ".join(f"{c:>12}" for c in COLUMNS))
    for row in rows:
        speedup = base / row["collect_s"]
        cells = (row["replicas"], row["collect_s"], row["rollouts"] / row["collect_s"], speedup,
                 speedup / row["replicas"], row["client_cpu_s"], row["run_s"])  # fmt: skip
        print(" ".join(f"{c:>12}" if isinstance(c, int) else f"{c:>12.2f}" for c in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", default="1,2,4,8", help="replica counts to measure")
    parser.add_argument("--shards", default="", help="shard counts for the parent's overhead (e.g. 1,2,4)")
    parser.add_argument("--rollouts", type=int, default=3200)
    parser.add_argument("--prompts", type=int, default=200, help="GSM8K prompts (the rest are repeats)")
    parser.add_argument("--tokens-per-s", type=float, default=1000.0, help="one replica's total decode rate")
    parser.add_argument("--per-seq-tokens-per-s", type=float, default=60.0)
    parser.add_argument("--latency-s", type=float, default=0.05)
    parser.add_argument("--answer-tokens", type=int, default=64)
    parser.add_argument("--concurrency-per-replica", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    rows = [run_replicas(int(n), args) for n in args.replicas.split(",") if n]
    replica_table(rows, args)
    if args.shards:
        from bench.shard_overhead import measure_shards

        measure_shards([int(n) for n in args.shards.split(",") if n], args, config)


if __name__ == "__main__":
    main()
