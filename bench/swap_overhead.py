"""Per-step server overhead of a training run's evaluation: a fresh vLLM server per step, or one server that takes
each next step's weights in place (tasks/serving/keeper.py), measured side by side in one run on this machine.

    uv run python -m bench.swap_overhead                 # 3 steps each way, then a 10-step watcher run
    uv run python -m bench.swap_overhead --steps 3 --watch-steps 0 --eager

The steps are SmolLM2-135M-Instruct (the CPU default) written as NeMo RL DCP checkpoints, each with its own
final-norm noise (tasks/runtime/scripts/hf_to_dcp.py), converted once to HF folders before anything is timed.
- fresh: per step, a new server from `start()` to a proven probe answer, then stopped (the time a step paid
  before swapping);
- swap: one server started for the first step, then per step the weight reload, the prefix cache reset and the
  proof (probe plus weight checksums), as the watcher does it.
Then `--watch-steps` steps are evaluated by the `watch` flow itself (conversion, server, a small greedy
benchmark, reports), and its wall time and per-step time printed with the servers it started and swapped.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from core.config import EvalConfig, ModelConfig, ServerConfig
from tasks.checkpoints.prepare import PreparedModel, prepare_model_impl
from tasks.checkpoints.results import DcpExport
from tasks.checkpoints.runner import run_script
from tasks.runtime.venv import Runtime, ensure_runtime
from tasks.serving import probe as proof
from tasks.serving.keeper import keep_servers
from tasks.serving.server import VLLMServer


def build_steps(runtime: Runtime, base: str, root: Path, steps: int) -> list[Path]:
    """`steps` NeMo RL step folders of `base`, each with its own noise (bf16, as a bf16 trainer saves)."""
    made = []
    for i in range(1, steps + 1):
        step = root / f"step_{i * 100}"
        args = [base, str(step), "--layout", "nemo-rl", "--noise-seed", str(i), "--dtype", "bfloat16"]
        run_script(runtime, "hf_to_dcp.py", args, f"writing {step}", DcpExport)
        made.append(step)
    return made


def fresh_starts(runtime: Runtime, models: list[PreparedModel], cfg: ServerConfig, logs: Path) -> list[float]:
    seconds = []
    for i, model in enumerate(models):
        started = time.monotonic()
        server = VLLMServer(runtime, model, cfg, logs / f"fresh-{i}.log", swappable=True)
        try:
            server.start()
            proof.run_probe(server.base_url, server.served_as, server.api_key)
            seconds.append(time.monotonic() - started)
        finally:
            server.stop()
    return seconds


async def swaps(runtime: Runtime, models: list[PreparedModel], cfg: ServerConfig, logs: Path) -> list[float]:
    seconds = []
    async with keep_servers() as keeper:
        for model in models:
            served = await keeper.serve(runtime, model, cfg, logs / "kept.log", 1)
            seconds.append(served.seconds)
            print(f"  {model.path}: {served.how} in {served.seconds:.1f} s")
    return seconds


def watch_run(run: Path, cache: Path, store: Path, cfg: ServerConfig) -> tuple[float, int, int]:
    from flows.watch import watch_flow

    config = EvalConfig.model_validate({
        "model": {"source": str(run), "cache_dir": str(cache), "settle_s": 0},
        "server": cfg.model_dump(mode="json", exclude_unset=True),
        "sampling": {"temperature": 0.0, "max_tokens": 32},
        "benchmarks": [{"task": "examples/tasks/science_mc.yaml", "limit": 8, "repeats": 1}],
        "collection": {"batch_size": 8},
        "store": {"url": str(store)},
    })  # fmt: skip
    started = time.monotonic()
    result = asyncio.run(watch_flow(config))
    wall = time.monotonic() - started
    logs = [p.read_text() for p in store.glob("runs/*/logs/vllm.log")]
    starts = sum(log.count("Starting vLLM server on") for log in logs)
    reloads = sum(log.count('"POST /collective_rpc HTTP/1.1" 200') for log in logs)
    assert all(s.state == "evaluated" for s in result.steps), [(s.step, s.state, s.message) for s in result.steps]
    return wall, starts, reloads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3, help="steps timed each way (fresh, swap)")
    parser.add_argument("--watch-steps", type=int, default=10, help="steps of the watcher run (0: none)")
    parser.add_argument("--eager", action="store_true", help="servers with --enforce-eager (no compilation)")
    args = parser.parse_args()

    runtime = ensure_runtime("auto")
    root = Path(tempfile.mkdtemp(prefix="swap-bench-"))
    base = prepare_model_impl(ModelConfig(), "auto")
    cfg = ServerConfig(extra_args=["--enforce-eager"] if args.eager else [])
    print(f"building {max(args.steps, args.watch_steps)} steps of {base.path} under {root}")
    steps = build_steps(runtime, base.path, root / "run", max(args.steps, args.watch_steps))
    cache = root / "ckpt-cache"
    models = [prepare_model_impl(ModelConfig(source=str(s), cache_dir=str(cache)), "auto") for s in steps[: args.steps]]

    print(f"fresh: {args.steps} servers, one per step")
    fresh = fresh_starts(runtime, models, cfg, root / "logs")
    print(f"swap: one server, {args.steps - 1} swaps")
    swapped = asyncio.run(swaps(runtime, models, cfg, root / "logs"))

    mode = "eager" if args.eager else "compiled"
    print(f"\nper-step server overhead, SmolLM2-135M on the CPU server ({mode}), ready and proven by the probe")
    print(f"{'':<28}{'per step (s)':>40}{'median (s)':>12}")
    print(f"{'fresh server per step':<28}{' '.join(f'{s:6.1f}' for s in fresh):>40}{statistics.median(fresh):>12.1f}")
    per_swap = swapped[1:]
    print(f"{'one server, weights swapped':<28}{' '.join(f'{s:6.1f}' for s in per_swap):>40}"
          f"{statistics.median(per_swap):>12.1f}")  # fmt: skip
    print(f"swap / fresh (medians): {statistics.median(per_swap) / statistics.median(fresh):.3f}")

    if args.watch_steps:
        run = root / "watch-run"
        run.mkdir()
        for step in steps[: args.watch_steps]:  # hard links: the listing sees real files, no bytes copied
            shutil.copytree(step, run / step.name, copy_function=os.link)
        wall, starts, reloads = watch_run(run, cache, root / "store", cfg)
        print(f"\nwatcher, {args.watch_steps} steps ({mode}; conversion, server, 8 greedy prompts, reports each):")
        print(f"  wall {wall:.0f} s, {wall / args.watch_steps:.1f} s per step; {starts} server start(s), "
              f"{reloads} weight reloads (counted in the servers' logs)")  # fmt: skip


if __name__ == "__main__":
    main()
