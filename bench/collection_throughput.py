"""Collection throughput: evalflow's collection vs. a raw asyncio openai client, same server, same
prompts, same per-rollout seeds, measured alternately in one run.

    uv run python -m bench.collection_throughput                 # starts its own vLLM (default mode)
    uv run python -m bench.collection_throughput --base-url URL --model NAME   # an external server

Prints one row per measurement and the ratio of evalflow's best to the raw client's best.
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
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 32, 64])
    args = parser.parse_args()

    with server_from(args) as (base_url, model):
        measure(args, base_url, model)


def measure(args: argparse.Namespace, base_url: str, model: str) -> None:
    env = get_env("gsm8k")
    rows = load_rows(str(env.default_dataset_path()), env, limit=args.prompts)
    jobs = [(env.messages(row), rollout_seed(1234, env.prompt_id(row), 0)) for row in rows]
    asyncio.run(raw_client(base_url, model, jobs[:16], 16, args))  # warm-up
    results: dict[str, list[float]] = {}
    print(f"{'round':>5} {'what':<22} {'seconds':>8} {'compl/s':>8} {'tokens/s':>9}", flush=True)
    for rnd in range(1, args.rounds + 1):
        for conc in args.concurrency:
            secs, tokens = asyncio.run(raw_client(base_url, model, jobs, conc, args))
            results.setdefault(f"raw c={conc}", []).append(tokens / secs)
            print(f"{rnd:>5} {'raw c=' + str(conc):<22} {secs:8.1f} {len(jobs) / secs:8.2f} {tokens / secs:9.0f}")
        collect, wall, tokens = evalflow_run(base_url, model, args, None)
        results.setdefault("evalflow (collect)", []).append(tokens / collect)
        results.setdefault("evalflow (whole flow)", []).append(tokens / wall)
        for label, secs in (("evalflow collect", collect), ("evalflow whole flow", wall)):
            print(f"{rnd:>5} {label:<22} {secs:8.1f} {len(jobs) / secs:8.2f} {tokens / secs:9.0f}", flush=True)
    print("\nmedian tokens/s over rounds:")
    medians = {name: statistics.median(v) for name, v in results.items()}
    for name, value in medians.items():
        print(f"  {name:<22} {value:9.0f}")
    best_raw = max(v for k, v in medians.items() if k.startswith("raw"))
    print(f"\nratio evalflow collect / best raw:    {medians['evalflow (collect)'] / best_raw:.3f}")
    print(f"ratio evalflow whole flow / best raw: {medians['evalflow (whole flow)'] / best_raw:.3f}")


if __name__ == "__main__":
    main()
