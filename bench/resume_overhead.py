"""Resume overhead: wall time of a fully cached rerun (default 200 prompts x 16 repeats = 3,200
rollouts), next to the first run that collected them, in one process against one server.

    uv run python -m bench.resume_overhead                  # starts its own vLLM server
    uv run python -m bench.resume_overhead --base-url URL --model NAME

The first run uses short completions (--max-tokens) since only the rerun is measured. Prints the
stage timings of both runs and the rerun's wall time; also times `python -m flows.eval` as a fresh
process (which adds Prefect's start-up: an ephemeral API unless PREFECT_API_URL is set).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench.common import add_server_args, server_from
from core.config import EvalConfig
from flows.eval import eval_flow

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_args(parser)
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=16)
    args = parser.parse_args()

    with server_from(args) as (base_url, model):
        measure(args, base_url, model)


def measure(args: argparse.Namespace, base_url: str, model: str) -> None:
    data = {
        "model": {"source": model, "served_name": model},
        "server": {"mode": "external", "base_url": base_url},
        "sampling": {"temperature": 0.7, "max_tokens": args.max_tokens},
        "benchmarks": [{"name": "gsm8k", "limit": args.prompts, "repeats": args.repeats}],
        "store": {"url": tempfile.mkdtemp(prefix="bench-resume-")},
    }
    rows = []
    for label in ("first run (collects)", "cached rerun", "cached rerun again"):
        started = time.perf_counter()
        result = asyncio.run(eval_flow(EvalConfig.model_validate(data)))
        wall = time.perf_counter() - started
        rows.append((label, wall, result["batches"], result["timings_s"]))
    config = Path(tempfile.mkdtemp()) / "eval.yaml"
    config.write_text(yaml.safe_dump(data))
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "flows.eval", "--config", str(config)],
        cwd=ROOT, check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    process_wall = time.perf_counter() - started

    rollouts = args.prompts * args.repeats
    print(f"\n{rollouts:,} rollouts ({args.prompts} prompts x {args.repeats} repeats)")
    print(f"{'run':<22} {'wall s':>7} {'batches cached':>15}  stages (s)")
    for label, wall, batches, timings in rows:
        stages = ", ".join(f"{k} {v:.2f}" for k, v in timings.items())
        print(f"{label:<22} {wall:7.2f} {batches['cached']:>7}/{batches['total']:<7}  {stages}")
    api = "PREFECT_API_URL" if os.environ.get("PREFECT_API_URL") else "ephemeral Prefect API"
    print(f"{'cached rerun, process':<22} {process_wall:7.2f}  (python -m flows.eval, {api} start-up included)")
    print(f"\nratio cached rerun / first run: {rows[1][1] / rows[0][1]:.3f}")


if __name__ == "__main__":
    main()
