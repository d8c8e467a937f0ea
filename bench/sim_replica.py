"""SIMULATION: a stand-in for one vLLM replica, for bench/scale_out.py only. It generates nothing.

It answers just enough of the OpenAI API for evalflow (GET /v1/models, GET /health, POST
/v1/chat/completions and /v1/completions) with a fixed text after a throughput model of a GPU
server with continuous batching: `tokens_per_s` shared by the requests in flight, at most
`per_seq_tokens_per_s` each, plus a fixed `latency_s`. It measures the orchestration (evalflow's
client, batches, replica pool, shards), never a model: no test may use it for model results.

Run one: `python -m bench.sim_replica --port 8001 --tokens-per-s 1000`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

MODEL = "sim-replica"
TICK_S = 0.01


@dataclass
class _Job:
    remaining: float
    done: asyncio.Future[None]


class ThroughputModel:
    """Processor sharing: every tick, each request in flight advances by min(per-seq cap, total / n)."""

    def __init__(self, tokens_per_s: float, per_seq_tokens_per_s: float) -> None:
        self.tokens_per_s = tokens_per_s
        self.per_seq = per_seq_tokens_per_s
        self.jobs: list[_Job] = []
        self.generated = 0

    async def generate(self, tokens: int) -> None:
        job = _Job(float(tokens), asyncio.get_running_loop().create_future())
        self.jobs.append(job)
        await job.done
        self.generated += tokens

    async def run(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(TICK_S)
            now = time.perf_counter()
            elapsed, last = now - last, now
            if not self.jobs:
                continue
            step = min(self.per_seq, self.tokens_per_s / len(self.jobs)) * elapsed
            for job in list(self.jobs):
                job.remaining -= step
                if job.remaining <= 0:
                    self.jobs.remove(job)
                    job.done.set_result(None)


def app(tokens_per_s: float, per_seq: float, latency_s: float, answer_tokens: int) -> Starlette:
    model = ThroughputModel(tokens_per_s, per_seq)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        ticker = asyncio.create_task(model.run())
        yield
        ticker.cancel()

    async def models(_: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "simulation"}]})

    async def health(_: Request) -> JSONResponse:
        return JSONResponse({})

    async def complete(request: Request) -> JSONResponse:
        body = await request.json()
        tokens = min(answer_tokens, int(body.get("max_tokens") or answer_tokens))
        await asyncio.sleep(latency_s)
        await model.generate(tokens)
        text = "SIMULATION " + "x " * (tokens - 1)
        usage = {"prompt_tokens": 100, "completion_tokens": tokens, "total_tokens": 100 + tokens}
        if request.url.path.endswith("/chat/completions"):
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
            kind = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "finish_reason": "length"}
            kind = "text_completion"
        return JSONResponse({"id": "sim", "object": kind, "created": int(time.time()), "model": MODEL,
                             "choices": [choice], "usage": usage})  # fmt: skip

    routes = [
        Route("/v1/models", models),
        Route("/health", health),
        Route("/v1/chat/completions", complete, methods=["POST"]),
        Route("/v1/completions", complete, methods=["POST"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tokens-per-s", type=float, default=1000.0, help="the replica's total decode rate")
    parser.add_argument("--per-seq-tokens-per-s", type=float, default=60.0, help="one sequence's decode rate cap")
    parser.add_argument("--latency-s", type=float, default=0.05, help="fixed time per request (prefill, network)")
    parser.add_argument("--answer-tokens", type=int, default=64)
    args = parser.parse_args()
    served = app(args.tokens_per_s, args.per_seq_tokens_per_s, args.latency_s, args.answer_tokens)
    uvicorn.run(served, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
