"""Collection throughput: evalflow's collection vs. a raw asyncio openai client, same server, same
prompts, same per-rollout seeds, measured alternately in one run.

    uv run python -m bench.collection_throughput                 # starts its own vLLM (default mode)
    uv run python -m bench.collection_throughput --base-url URL --model NAME   # an external server

Prints one row per measurement, then evalflow's tokens/s as a ratio to the raw client's best concurrency:
the ratio of the medians over rounds, and the median of per-round ratios (each round's runs are minutes
apart, so a machine whose speed drifts by 10% over a quarter of an hour shifts both sides alike).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

import openai

from bench.common import add_server_args, server_from
from envs.datasets import load_rows
from envs.registry import get_env
from flows.config import EvalConfig
from flows.eval import eval_flow
from tasks.rollouts import rollout_seed


async def raw_client(base_url: str, model: str, jobs: list[tuple[list, int]], concurrency: int, args) -> tuple:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="EMPTY", timeout=600, max_retries=0)
    sem = asyncio.Semaphore(concurrency)

    async def one(messages: list, seed: int) -> int:
        async with sem:
            r = await client.chat.completions.create(
                model=model, messages=messages, seed=seed, temperature=args.temperature, top_p=1.0,
                max_tokens=args.max_tokens,
            )  # fmt: skip
            return r.usage.completion_tokens

    started = time.perf_counter()
    tokens = await asyncio.gather(*(one(m, s) for m, s in jobs))
    await client.close()
    return time.perf_counter() - started, sum(tokens)


def evalflow_run(base_url: str, model: str, args, concurrency: int | None) -> tuple:
    data = {
        "model": {"source": model, "served_name": model},
        "server": {"mode": "external", "base_url": base_url},
        "sampling": {"temperature": args.temperature, "top_p": 1.0, "max_tokens": args.max_tokens, "seed": 1234},
        "benchmarks": [{"name": "gsm8k", "limit": args.prompts, "repeats": 1}],
        "store": {"url": tempfile.mkdtemp(prefix="bench-store-")},  # fresh: nothing cached
    }
    if concurrency:
        data["collection"] = {"concurrency": concurrency}
    started = time.perf_counter()
    result = asyncio.run(eval_flow(EvalConfig.model_validate(data)))
    wall = time.perf_counter() - started
    return result["timings_s"]["collect"], wall, result["metrics"]["benchmarks"]["gsm8k"]["tokens"]["completion_total"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_args(parser)
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument(
        "--evalflow-fixed", type=int, nargs="*", default=[],
        help="also run evalflow with these fixed concurrencies (separates the limiter from the pipeline)",
    )  # fmt: skip
    args = parser.parse_args()

    with server_from(args) as (base_url, model):
        measure(args, base_url, model)


def run_raw(args: argparse.Namespace, base_url: str, model: str, jobs: list, rnd: int) -> dict[str, float]:
    """tokens/s of the raw client at each concurrency."""
    out = {}
    for conc in args.concurrency:
        secs, tokens = asyncio.run(raw_client(base_url, model, jobs, conc, args))
        out[f"raw c={conc}"] = tokens / secs
        show(rnd, f"raw c={conc}", secs, tokens, len(jobs))
    return out


def run_evalflow(args: argparse.Namespace, base_url: str, model: str, jobs: list, rnd: int) -> dict[str, float]:
    """tokens/s of evalflow's collection and whole flow, at its defaults (and any fixed concurrency)."""
    out = {}
    for fixed in [None, *args.evalflow_fixed]:
        collect, wall, tokens = evalflow_run(base_url, model, args, fixed)
        name = "evalflow" if fixed is None else f"evalflow c={fixed}"
        out[f"{name} (collect)"], out[f"{name} (whole flow)"] = tokens / collect, tokens / wall
        show(rnd, f"{name} collect", collect, tokens, len(jobs))
        show(rnd, f"{name} whole flow", wall, tokens, len(jobs))
    return out


def show(rnd: int, label: str, secs: float, tokens: int, completions: int) -> None:
    print(f"{rnd:>5} {label:<24} {secs:8.1f} {completions / secs:8.2f} {tokens / secs:9.0f}", flush=True)


def measure(args: argparse.Namespace, base_url: str, model: str) -> None:
    env = get_env("gsm8k")
    rows = load_rows(str(env.default_dataset_path()), env, limit=args.prompts)
    jobs = [(env.messages(row), rollout_seed(1234, env.prompt_id(row), 0)) for row in rows]
    asyncio.run(raw_client(base_url, model, jobs[:16], 16, args))  # warm-up
    results: dict[str, list[float]] = {}
    paired: dict[str, list[float]] = {}  # per round: evalflow / the raw client's best in that same round
    print(f"{'round':>5} {'what':<24} {'seconds':>8} {'compl/s':>8} {'tokens/s':>9}", flush=True)
    for rnd in range(1, args.rounds + 1):
        # alternate the order, so a machine that speeds up or slows down during the run favours neither
        steps = (run_raw, run_evalflow) if rnd % 2 else (run_evalflow, run_raw)
        measured = {k: v for step in steps for k, v in step(args, base_url, model, jobs, rnd).items()}
        best_raw = max(v for k, v in measured.items() if k.startswith("raw"))
        for name, value in measured.items():
            results.setdefault(name, []).append(value)
            if not name.startswith("raw"):
                paired.setdefault(name, []).append(value / best_raw)

    print("\nmedian tokens/s over rounds:")
    medians = {name: statistics.median(v) for name, v in results.items()}
    for name, value in medians.items():
        print(f"  {name:<28} {value:9.0f}")
    best_raw = max(v for k, v in medians.items() if k.startswith("raw"))
    print(f"\n{'ratio to the raw client best':<32} {'of medians':>10} {'median of per-round ratios':>28}")
    for name in paired:
        print(f"  {name:<30} {medians[name] / best_raw:10.3f} {statistics.median(paired[name]):28.3f}")


if __name__ == "__main__":
    main()
