"""CPU server speed: generated tokens/s of the vLLM CPU server under each setting, side by side in one run.

    uv run python -m bench.cpu_server_speed [--requests 64 --concurrency 32 --max-tokens 128] [--compiled]

SmolLM2 as the project starts it (`--enforce-eager`, the cpu-smoke block), one server at a time:
vLLM's defaults (the model's bf16, one reserved core), no reserved core, no reserved core plus
float32, and what evalflow chooses for this CPU (`tasks/serving/cpu_settings.py`). Each server gets
one untimed warm-up request, then `--requests` GSM8K chat requests at `--concurrency`. With
`--compiled`, the chosen setting is also measured without --enforce-eager (slower start-up).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import openai

from core.config import ModelConfig, ServerConfig
from envs.datasets import load_rows
from envs.registry import get_env
from tasks.checkpoints.prepare import prepare_model_impl
from tasks.runtime.venv import ensure_runtime
from tasks.serving.cpu_settings import CpuChoice, choose, cpu_info
from tasks.serving.server import VLLMServer

EAGER = ["--enforce-eager"]


async def load(base_url: str, model: str, prompts: list[list[dict]], args: argparse.Namespace) -> tuple[float, int]:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="EMPTY", timeout=900, max_retries=0)
    sem = asyncio.Semaphore(args.concurrency)

    async def one(i: int) -> int:
        async with sem:
            r = await client.chat.completions.create(
                model=model, messages=prompts[i % len(prompts)], seed=i, temperature=0.7, top_p=0.95,
                max_tokens=args.max_tokens,
            )  # fmt: skip
            return r.usage.completion_tokens if r.usage else 0

    await one(-1)  # warm-up, untimed
    started = time.perf_counter()
    tokens = await asyncio.gather(*(one(i) for i in range(args.requests)))
    wall = time.perf_counter() - started
    await client.close()
    return wall, sum(tokens)


def measure(label: str, choice: CpuChoice, extra: list[str], prompts: list, args: argparse.Namespace) -> dict:
    prepared = prepare_model_impl(ModelConfig(), "cpu")
    cfg = ServerConfig(runtime="cpu", extra_args=extra)
    server = VLLMServer(ensure_runtime("cpu"), prepared, cfg, Path(tempfile.mkdtemp()) / "vllm.log", cpu=choice)
    started = time.perf_counter()
    try:
        endpoint = server.start()
        start_s = time.perf_counter() - started
        wall, tokens = asyncio.run(load(endpoint.base_url, endpoint.model, prompts, args))
    finally:
        server.stop()
    onednn_fallback = "Failed to create oneDNN linear" in server.log_path.read_text(errors="replace")
    row = {"label": label, "start_s": start_s, "wall_s": wall, "tokens": tokens, "tok_s": tokens / wall}
    row["onednn_fallback"] = onednn_fallback
    print(f"  {label}: {row['tok_s']:.1f} tokens/s ({tokens} tokens, {wall:.1f} s, start {start_s:.0f} s)", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--compiled", action="store_true", help="also measure the chosen setting compiled")
    parser.add_argument(
        "--executors", action="store_true",
        help="only evalflow's choice, with vLLM's worker in its own process (mp) and in the engine's (uni)",
    )  # fmt: skip
    args = parser.parse_args()

    env = get_env("gsm8k")
    rows = load_rows(str(env.default_dataset_path()), env, limit=args.requests)
    prompts = [env.messages(r) for r in rows]
    info = cpu_info()
    auto = choose("auto", None, info)
    print(f"CPU: {info.model}, {info.cores} usable cores, AMX-BF16 {info.amx_bf16}, AVX512-BF16 {info.avx512_bf16}")
    print(f"evalflow's choice: dtype {auto.dtype}, reserved cores {auto.reserved_cores} ({auto.reason})")
    print(f"{args.requests} chat requests at concurrency {args.concurrency}, max_tokens {args.max_tokens}", flush=True)

    settings = [
        ("vLLM defaults (model dtype, 1 reserved core)", CpuChoice(None, None, "defaults"), EAGER),
        ("no reserved core (model dtype)", CpuChoice(None, 0, "reserved 0"), EAGER),
        ("no reserved core + bfloat16", CpuChoice("bfloat16", 0, "bf16"), EAGER),
        ("no reserved core + float32", CpuChoice("float32", 0, "fp32"), EAGER),
    ]
    if args.executors:  # what a start costs and what generation gives, with one process fewer
        settings = [
            ("evalflow's choice, worker process (mp)", auto, [*EAGER, "--distributed-executor-backend", "mp"]),
            ("evalflow's choice, worker in the engine (uni)", auto, [*EAGER, "--distributed-executor-backend", "uni"]),
        ]
    if args.compiled:
        settings.append((f"evalflow's choice, compiled ({auto.dtype})", auto, []))
    rows_out = [measure(label, choice, extra, prompts, args) for label, choice, extra in settings]

    base = rows_out[0]["tok_s"]
    print()
    print("| server settings | generated tokens/s | x defaults | start-up s | oneDNN fallback |")
    print("|---|---|---|---|---|")
    for row in rows_out:
        print(
            f"| {row['label']} | {row['tok_s']:.1f} | {row['tok_s'] / base:.2f} | {row['start_s']:.0f} "
            f"| {'yes' if row['onednn_fallback'] else 'no'} |"
        )
    chosen = (auto.dtype, auto.reserved_cores)
    same = [r["label"] for (_, c, extra), r in zip(settings, rows_out, strict=True)
            if (c.dtype or "bfloat16", c.reserved_cores) == chosen and extra == EAGER]  # fmt: skip
    print(f"\nevalflow's choice on this CPU ({auto.dtype}, reserved {auto.reserved_cores}) is the row: {same}")


if __name__ == "__main__":
    main()
