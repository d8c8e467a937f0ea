"""Resume overhead: wall time of a fully cached rerun (default 200 prompts x 16 repeats = 3,200
rollouts), next to the first run that collected them, in one process against one server.

    uv run python -m bench.resume_overhead                  # starts its own vLLM server
    uv run python -m bench.resume_overhead --base-url URL --model NAME
    uv run python -m bench.resume_overhead --config configs/demo.yaml [store.url=DIR]  # no server

The first run uses short completions (--max-tokens) since only the rerun is measured. With --config
(a config whose store already holds every batch, e.g. after `make demo`) no server and no first run
are needed. Prints the stage timings of the in-process runs, then the fully cached rerun as a fresh
process (`evalflow run`, which adds imports and a Prefect API): wall time of --runs runs and their
median, first with a temporary API (unless this checkout's local server is already up), then with the
local server that `make server`/`make demo` leave running (started here if needed, and stopped again).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.common import add_server_args, server_from
from core.config import EvalConfig
from core.overrides import resolve_config
from flows.eval import eval_flow
from flows.plan import plan_run
from ops import local
from ops.api import prefect_api, running_local_server

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_args(parser)
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--config", help="a config whose batches are all cached: measure its reruns, no server")
    parser.add_argument("overrides", nargs="*", help="dotted overrides for --config, e.g. store.url=DIR")
    parser.add_argument("--runs", type=int, default=5, help="fresh-process reruns to take the median of")
    args = parser.parse_args()

    if args.config:
        measure_cached(args.config, args.overrides, args.runs)
        return
    with server_from(args) as (base_url, model):
        measure(args, base_url, model)


def fresh_process(config: Path, overrides: list[str], runs: int) -> list[float]:
    """Wall seconds of `evalflow run` as a new process, each run."""
    walls = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(
            [str(Path(sys.executable).with_name("evalflow")), "run", "--config", str(config), *overrides],
            cwd=ROOT, check=True, capture_output=True,
        )  # fmt: skip
        walls.append(time.perf_counter() - started)
    return walls


def fresh_processes(config: Path, overrides: list[str], runs: int) -> dict[str, list[float]]:
    """{Prefect API used: walls} of fresh `evalflow run` processes, for each API a new process can use."""
    if os.environ.get("PREFECT_API_URL"):
        return {"PREFECT_API_URL": fresh_process(config, overrides, runs)}
    found: dict[str, list[float]] = {}
    started_here = running_local_server() is None
    if started_here:
        found["temporary Prefect API"] = fresh_process(config, overrides, runs)
        local.server()
    try:
        found["local server (make server)"] = fresh_process(config, overrides, runs)
    finally:
        if started_here:
            local.stop_server()
    return found


def print_table(rows: list[tuple[str, float, dict[str, Any], dict[str, float]]], fresh: dict[str, list[float]]) -> None:
    print(f"{'run':<26} {'wall s':>7} {'batches cached':>15}  stages (s)")
    for label, wall, batches, timings in rows:
        stages = ", ".join(f"{k} {v:.2f}" for k, v in timings.items())
        print(f"{label:<26} {wall:7.2f} {batches.batches_cached:>7}/{batches.batches_total:<7}  {stages}")
    for api, walls in fresh.items():
        runs = ", ".join(f"{w:.1f}" for w in walls)
        label = "cached rerun, new process"
        print(f"{label:<26} {statistics.median(walls):7.2f}  median of {len(walls)} ({runs}); {api}")


def measure_cached(config_path: str, overrides: list[str], runs: int) -> None:
    config = resolve_config(config_path, overrides)
    planned = plan_run(config)
    if planned.rollouts.to_generate:
        raise SystemExit(f"not fully cached: {planned.rollouts} (run it once, or give a store that holds it)")
    rows = []
    with prefect_api():
        for label in ("cached rerun, in process", "again, in process"):
            started = time.perf_counter()
            result = asyncio.run(eval_flow(config))
            rows.append((label, time.perf_counter() - started, result.collection, result.run_info.timings))
    print(f"\n{planned.rollouts.total:,} rollouts, all cached ({config_path} {' '.join(overrides)})")
    print_table(rows, fresh_processes(Path(config_path), overrides, runs))


def measure(args: argparse.Namespace, base_url: str, model: str) -> None:
    data = {
        "model": {"source": model, "served_name": model},
        "server": {"mode": "external", "base_url": base_url},
        "sampling": {"temperature": 0.7, "max_tokens": args.max_tokens},
        "benchmarks": [{"name": "gsm8k", "limit": args.prompts, "repeats": args.repeats}],
        "store": {"url": tempfile.mkdtemp(prefix="bench-resume-")},
    }
    rows = []
    with prefect_api():
        for label in ("first run (collects)", "cached rerun", "cached rerun again"):
            started = time.perf_counter()
            result = asyncio.run(eval_flow(EvalConfig.model_validate(data)))
            rows.append((label, time.perf_counter() - started, result.collection, result.run_info.timings))
    config = Path(tempfile.mkdtemp()) / "eval.yaml"
    config.write_text(yaml.safe_dump(data))
    rollouts = args.prompts * args.repeats
    print(f"\n{rollouts:,} rollouts ({args.prompts} prompts x {args.repeats} repeats)")
    print_table(rows, fresh_processes(config, [], args.runs))
    print(f"\nratio cached rerun / first run: {rows[1][1] / rows[0][1]:.3f}")


if __name__ == "__main__":
    main()
