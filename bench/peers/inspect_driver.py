"""Runs INSIDE a throwaway environment with Inspect AI (bench/peers/envs.py builds it): the bench's chat
requests as an Inspect task on the `openai-api` provider (chat completions), `max_connections=N`, one
`generate` per sample with the sample's seed, no scorer; timed (wall and process CPU) from the first
request to the last answer (eval()'s start-up and log writing are left out), plus the whole eval() call.

    python inspect_driver.py REQUESTS.json BASE_URL MODEL CONCURRENCY TEMPERATURE MAX_TOKENS
prints one JSON line: {"seconds", "completions", "cpu_s", "eval_seconds", "eval_cpu_s"}.
"""

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from inspect_ai import Task
from inspect_ai import eval as inspect_eval
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageUser
from inspect_ai.solver import Generate, TaskState, solver

ROLES = {"system": ChatMessageSystem, "user": ChatMessageUser, "assistant": ChatMessageAssistant}
SPANS: list[tuple[float, float]] = []
CPU: list[float] = []  # process CPU seconds at each request's start and end
ANSWERED: list[int] = []


@solver
def seeded_generate():
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        started = time.perf_counter()
        CPU.append(time.process_time())
        state = await generate(state, tool_calls="none", seed=state.metadata["seed"])
        SPANS.append((started, time.perf_counter()))
        CPU.append(time.process_time())
        ANSWERED.append(int(bool(state.output and state.output.completion)))
        return state

    return solve


def main() -> None:
    path, base_url, model, concurrency, temperature, max_tokens = sys.argv[1:7]
    os.environ["BENCH_API_KEY"], os.environ["BENCH_BASE_URL"] = "EMPTY", base_url
    requests = json.loads(Path(path).read_text())
    samples = [
        Sample(
            id=i,
            input=[ROLES[m["role"]](content=m["content"]) for m in r["messages"]],
            metadata={"seed": r["seed"]},
        )
        for i, r in enumerate(requests)
    ]
    task = Task(dataset=MemoryDataset(samples), solver=seeded_generate(), scorer=None)
    cpu, started = time.process_time(), time.perf_counter()
    logs = inspect_eval(
        task, model=f"openai-api/bench/{model}", max_connections=int(concurrency), max_samples=int(concurrency),
        temperature=float(temperature), top_p=1.0, max_tokens=int(max_tokens), display="none",
        log_dir=tempfile.mkdtemp(prefix="bench-inspect-"), log_samples=False, score=False,
    )  # fmt: skip
    eval_seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    if logs[0].status != "success":
        raise SystemExit(f"inspect eval ended {logs[0].status}: {logs[0].error}")
    seconds = max(end for _, end in SPANS) - min(start for start, _ in SPANS)
    phase_cpu = max(CPU) - min(CPU)  # the generation phase, as for the other clients
    out = {"seconds": seconds, "completions": sum(ANSWERED), "cpu_s": phase_cpu, "eval_seconds": eval_seconds,
           "eval_cpu_s": cpu}  # fmt: skip
    print(json.dumps(out))


if __name__ == "__main__":
    main()
