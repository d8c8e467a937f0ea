"""Collection throughput: evalflow's collection vs. a raw asyncio openai client (and, with --peers,
lm-evaluation-harness and Inspect AI), same server, same chat requests, same per-rollout seeds, one
client at a time, measured alternately in one run.

    uv run python -m bench.collection_throughput                 # starts its own vLLM (default mode)
    uv run python -m bench.collection_throughput --peers         # + lm-eval and Inspect AI rows
    uv run python -m bench.collection_throughput --base-url URL --model NAME   # an external server

First the raw client at each --concurrency, to find its best; then --pairs rounds in which every client
(evalflow at its defaults, then each peer) runs right beside a run of the raw client at that best, the
order flipping each round. A client's ratio is its tokens/s over that of the raw run beside it; the table
gives the ratios per round and their median.

Tokens are the server's own count (`vllm:generation_tokens_total` on /metrics, so every client is
counted alike; the usage fields where a server has no /metrics), over each client's generation phase:
the raw client's gather, evalflow's collect stage, lm-eval's `generate_until`, Inspect's first request to
last answer. Client CPU is the client process's CPU time (every thread) over the same phase, per 1,000
rollouts: evalflow's is its collect stage's (run_info.cpu_timings).
Peers run from throwaway environments (bench/peers/envs.py) at the versions their rows name.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
from prefect.logging.handlers import PrefectConsoleHandler

from bench.common import add_server_args, server_from
from bench.peers.envs import PEERS, run_peer
from core.config import EvalConfig
from envs.datasets import load_rows
from envs.registry import get_env
from flows.eval import eval_flow
from tasks.collection.plan import rollout_seed

COUNTER = re.compile(r"^vllm:generation_tokens_total(?:\{[^}]*\})?\s+([0-9.eE+]+)\s*$", re.MULTILINE)


@dataclass
class Measured:
    seconds: float  # the client's generation phase
    tokens: int  # generated in it (the server's count where it has one)
    completions: int
    cpu_s: float  # the client process's CPU time over the phase

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds


class Counter:
    """The server's generated-token counter (None when the server has no /metrics)."""

    def __init__(self, base_url: str) -> None:
        self.url = base_url.rstrip("/").removesuffix("/v1") + "/metrics"

    def read(self) -> float | None:
        try:
            found = COUNTER.findall(httpx.get(self.url, timeout=10).text)
        except httpx.HTTPError:
            return None
        return sum(float(v) for v in found) if found else None

    def delta(self, before: float | None, fallback: int) -> int:
        after = self.read()
        return round(after - before) if before is not None and after is not None else fallback


async def raw_client(
    base_url: str, model: str, jobs: list[tuple[list, int]], concurrency: int, args, top_p: float = 1.0
) -> tuple:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="EMPTY", timeout=600, max_retries=0)
    sem = asyncio.Semaphore(concurrency)

    async def one(messages: list, seed: int) -> int:
        async with sem:
            r = await client.chat.completions.create(
                model=model, messages=messages, seed=seed, temperature=args.temperature, top_p=top_p,
                max_tokens=args.max_tokens,
            )  # fmt: skip
            return r.usage.completion_tokens

    started = time.perf_counter()
    tokens = await asyncio.gather(*(one(m, s) for m, s in jobs))
    await client.close()
    return time.perf_counter() - started, sum(tokens)


def raw_run(args: argparse.Namespace, base_url: str, model: str, jobs: list, conc: int) -> Measured:
    counter = Counter(base_url)
    before, cpu = counter.read(), time.process_time()
    secs, tokens = asyncio.run(raw_client(base_url, model, jobs, conc, args))
    cpu = time.process_time() - cpu
    return Measured(secs, counter.delta(before, tokens), len(jobs), cpu)


def evalflow_run(base_url: str, model: str, args, concurrency: int | None) -> tuple[Measured, float]:
    """evalflow's collect stage, and the whole flow's wall seconds (plan, analysis and report included)."""
    data = {
        "model": {"source": model, "served_name": model},
        "server": {"mode": "external", "base_url": base_url},
        "sampling": {"temperature": args.temperature, "top_p": 1.0, "max_tokens": args.max_tokens, "seed": 1234},
        "benchmarks": [{"name": "gsm8k", "limit": args.prompts, "repeats": 1}],
        "store": {"url": tempfile.mkdtemp(prefix="bench-store-")},  # fresh: nothing cached
    }
    if concurrency:
        data["collection"] = {"concurrency": concurrency}
    counter = Counter(base_url)
    before, started = counter.read(), time.perf_counter()
    result = asyncio.run(eval_flow(EvalConfig.model_validate(data)))
    wall = time.perf_counter() - started
    info, stats = result.run_info, result.benchmarks["gsm8k"]
    tokens = counter.delta(before, stats.tokens.completion_total)
    return Measured(info.timings["collect"], tokens, stats.n_rollouts, info.cpu_timings["collect"]), wall


def peer_run(name: str, requests: Path, base_url: str, model: str, conc: int, args) -> Measured:
    counter = Counter(base_url)
    before = counter.read()
    out = run_peer(PEERS[name], requests, base_url, model, conc, [str(args.temperature), str(args.max_tokens)])
    return Measured(out["seconds"], counter.delta(before, 0), out["completions"], out["cpu_s"])


def quiet_console() -> None:
    """The terminal shows the table: Prefect's console handlers keep warnings only. The flows log as they
    always do (the API still gets every line), so evalflow is measured with its usual logging."""
    for logger in (logging.getLogger(), *logging.Logger.manager.loggerDict.values()):
        for handler in getattr(logger, "handlers", []):
            if isinstance(handler, PrefectConsoleHandler):
                handler.setLevel(logging.WARNING)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_args(parser)
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--pairs", type=int, default=6, help="rounds: every client beside a raw run")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--peers", action="store_true", help="also lm-eval and Inspect AI (throwaway envs)")
    parser.add_argument(
        "--evalflow-fixed", type=int, nargs="*", default=[],
        help="also run evalflow with these fixed concurrencies (separates the limiter from the pipeline)",
    )  # fmt: skip
    args = parser.parse_args()

    with server_from(args) as (base_url, model):
        quiet_console()
        measure(args, base_url, model)


def show(step: str, label: str, m: Measured) -> None:
    per_k = 1000 * m.cpu_s / max(m.completions, 1)
    print(f"{step:>7} {label:<40} {m.seconds:8.1f} {m.completions / m.seconds:8.2f} {m.rate:9.0f} {per_k:10.2f}")


def write_requests(path: Path, jobs: list[tuple[list, int]]) -> Path:
    """The requests as the peers' drivers read them: [{"messages", "seed"}, ...]."""
    path.write_text(json.dumps([{"messages": m, "seed": s} for m, s in jobs]))
    return path


def measure(args: argparse.Namespace, base_url: str, model: str) -> None:
    """Find the raw client's best concurrency, then alternate it with each client in rounds.

    This machine's speed drifts by up to 25% within minutes (shared host), so a ratio is only taken between
    two runs back to back, and the order flips every round."""
    env = get_env("gsm8k")
    rows = load_rows(str(env.default_dataset_path()), env, limit=args.prompts)
    jobs = [(env.messages(row), rollout_seed(1234, env.prompt_id(row), 0)) for row in rows]
    requests = write_requests(Path(tempfile.mkdtemp(prefix="bench-requests-")) / "requests.json", jobs)
    asyncio.run(raw_client(base_url, model, jobs[:16], 16, args))  # warm-up
    # evalflow's warm-up: the first flow in a process starts Prefect's ephemeral API, which keeps working
    # (and competing with a CPU server) for a while; deployments run against a long-running one instead
    evalflow_run(base_url, model, argparse.Namespace(**{**vars(args), "prompts": 16}), None)
    peers = list(PEERS) if args.peers else []
    for name in peers:  # builds its environment; a short run warms its imports
        peer_run(name, write_requests(requests.with_name(f"warm-{name}.json"), jobs[:16]), base_url, model, 16, args)

    clients = {"evalflow": lambda conc: evalflow_run(base_url, model, args, None)[0]}
    for fixed in args.evalflow_fixed:
        clients[f"evalflow c={fixed}"] = lambda conc, fixed=fixed: evalflow_run(base_url, model, args, fixed)[0]
    for name in peers:
        clients[PEERS[name].name] = lambda conc, name=name: peer_run(name, requests, base_url, model, conc, args)

    print(f"{'step':>7} {'client':<40} {'seconds':>8} {'compl/s':>8} {'tokens/s':>9} {'CPU s/1k':>10}", flush=True)
    scan = {}
    for conc in args.concurrency:
        scan[conc] = raw_run(args, base_url, model, jobs, conc)
        show("scan", f"raw c={conc}", scan[conc])
    best = max(scan, key=lambda conc: scan[conc].rate)
    print(f"\nthe raw client's best concurrency: {best}; now {args.pairs} rounds, alternating\n", flush=True)
    runs: dict[str, list[Measured]] = {"raw": []}
    ratios: dict[str, list[float]] = {}
    for round_ in range(1, args.pairs + 1):
        step = f"round {round_}"
        for name, run in clients.items():
            pair: dict[str, Measured] = {}
            for who in ("raw", name) if round_ % 2 else (name, "raw"):
                pair[who] = raw_run(args, base_url, model, jobs, best) if who == "raw" else run(best)
                show(step, f"raw c={best}" if who == "raw" else name, pair[who])
                runs.setdefault(who, []).append(pair[who])
            ratios.setdefault(name, []).append(pair[name].rate / pair["raw"].rate)
    summary(runs, ratios, best)


def summary(runs: dict[str, list[Measured]], ratios: dict[str, list[float]], best: int) -> None:
    print(f"\n{'client':<40} {'median tokens/s':>15} {'median CPU s/1k rollouts':>25} {'CPU vs raw':>10}")
    raw_cpu = statistics.median(1000 * m.cpu_s / m.completions for m in runs["raw"])
    for name, ms in runs.items():
        label = f"raw c={best}" if name == "raw" else name
        cpu = statistics.median(1000 * m.cpu_s / max(m.completions, 1) for m in ms)
        rate = statistics.median(m.rate for m in ms)
        print(f"{label:<40} {rate:15.0f} {cpu:25.2f} {cpu / raw_cpu:9.2f}x")
    print(f"\n{'tokens/s ratio to the raw run beside it':<40} {'per round':<36} {'median':>7}")
    for name, values in ratios.items():
        print(f"{name:<40} {' '.join(f'{v:.3f}' for v in values):<36} {statistics.median(values):7.3f}")


if __name__ == "__main__":
    main()
