"""Collection throughput: evalflow's collection vs. a raw asyncio openai client, same server, same
prompts, same per-rollout seeds, measured alternately in one run.

    uv run python -m bench.collection_throughput                 # starts its own vLLM (default mode)
    uv run python -m bench.collection_throughput --base-url URL --model NAME   # an external server

First the raw client at each --concurrency, to find its best; then --pairs pairs of (raw client at that
best, evalflow at its defaults) back to back, the order flipping each pair. Prints one row per run and
evalflow's tokens/s as a ratio to the raw client in its own pair, with the median over pairs.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

import openai

from bench.common import add_server_args, server_from
from core.config import EvalConfig
from envs.datasets import load_rows
from envs.registry import get_env
from flows.eval import eval_flow
from tasks.collection.plan import rollout_seed


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
    return result.run_info.timings["collect"], wall, result.benchmarks["gsm8k"].tokens.completion_total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_args(parser)
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--pairs", type=int, default=4, help="back-to-back (raw best, evalflow) pairs")
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


def show(step: str, label: str, secs: float, tokens: int, completions: int) -> None:
    print(f"{step:>6} {label:<24} {secs:8.1f} {completions / secs:8.2f} {tokens / secs:9.0f}", flush=True)


def raw_rate(args: argparse.Namespace, base_url: str, model: str, jobs: list, conc: int, step: str) -> float:
    secs, tokens = asyncio.run(raw_client(base_url, model, jobs, conc, args))
    show(step, f"raw c={conc}", secs, tokens, len(jobs))
    return tokens / secs


def evalflow_rates(args: argparse.Namespace, base_url: str, model: str, jobs: list, step: str) -> dict[str, float]:
    """tokens/s of evalflow's collection and whole flow, at its defaults (and any fixed concurrency)."""
    out = {}
    for fixed in [None, *args.evalflow_fixed]:
        collect, wall, tokens = evalflow_run(base_url, model, args, fixed)
        name = "evalflow" if fixed is None else f"evalflow c={fixed}"
        out[f"{name} (collect)"], out[f"{name} (whole flow)"] = tokens / collect, tokens / wall
        show(step, f"{name} collect", collect, tokens, len(jobs))
        show(step, f"{name} whole flow", wall, tokens, len(jobs))
    return out


def measure(args: argparse.Namespace, base_url: str, model: str) -> None:
    """Find the raw client's best concurrency, then alternate it with evalflow in pairs.

    This machine's speed drifts by up to 25% within minutes (shared host), so a ratio is only taken between
    two runs back to back, and the order flips every pair."""
    env = get_env("gsm8k")
    rows = load_rows(str(env.default_dataset_path()), env, limit=args.prompts)
    jobs = [(env.messages(row), rollout_seed(1234, env.prompt_id(row), 0)) for row in rows]
    asyncio.run(raw_client(base_url, model, jobs[:16], 16, args))  # warm-up
    # evalflow's warm-up: the first flow in a process starts Prefect's ephemeral API, which keeps working
    # (and competing with a CPU server) for a while; deployments run against a long-running one instead
    evalflow_run(base_url, model, argparse.Namespace(**{**vars(args), "prompts": 16}), None)
    print(f"{'step':>6} {'what':<24} {'seconds':>8} {'compl/s':>8} {'tokens/s':>9}", flush=True)
    scan = {conc: raw_rate(args, base_url, model, jobs, conc, "scan") for conc in args.concurrency}
    best = max(scan, key=lambda conc: scan[conc])
    print(f"\nthe raw client's best concurrency: {best}; now {args.pairs} pairs, alternating\n", flush=True)
    raw: list[float] = []
    ours: dict[str, list[float]] = {}
    ratios: dict[str, list[float]] = {}
    for pair in range(1, args.pairs + 1):
        step = f"pair {pair}"
        if pair % 2:
            raw.append(raw_rate(args, base_url, model, jobs, best, step))
            measured = evalflow_rates(args, base_url, model, jobs, step)
        else:
            measured = evalflow_rates(args, base_url, model, jobs, step)
            raw.append(raw_rate(args, base_url, model, jobs, best, step))
        for name, value in measured.items():
            ours.setdefault(name, []).append(value)
            ratios.setdefault(name, []).append(value / raw[-1])

    print("\nmedian tokens/s:")
    for conc, value in scan.items():
        print(f"  {'raw c=' + str(conc) + ' (scan)':<30} {value:9.0f}")
    print(f"  {'raw c=' + str(best) + ' (pairs)':<30} {statistics.median(raw):9.0f}")
    for name, values in ours.items():
        print(f"  {name:<30} {statistics.median(values):9.0f}")
    print(f"\n{'ratio to the raw client at ' + str(best):<32} {'per pair':<30} {'median':>7}")
    for name, values in ratios.items():
        print(f"  {name:<30} {' '.join(f'{v:.3f}' for v in values):<30} {statistics.median(values):7.3f}")


if __name__ == "__main__":
    main()
