"""Analysis at scale: compute_metrics + write_report (+ the index update) over 1,000,000 rollouts.

    uv run python -m bench.analysis_scale                    # 2 benchmarks x 5,000 prompts x 100 repeats
    uv run python -m bench.analysis_scale --prompts 500      # a quick run (100,000 rollouts)
    uv run python -m bench.analysis_scale --keep /tmp/scale  # keep the store to open the report

The synthetic run looks like a real one: a gsm8k-like benchmark (single turn, the env's info JSON,
per-prompt difficulty, parse errors, length stops, a few request errors) and a tetris-like one
(multi-turn transcripts with 0-10 tool calls, rewards of -0.1 per action and +10 per cleared row),
written as 20 parquet batch files through the run store (core.store.Store). The measured work runs in a fresh child
process, so the peak RSS (ru_maxrss) is the analysis's own, not the generator's. Goal on the
2-core dev machine (issue 16): analysis + report under 10 s of CPU time, under 2 GB. BEFORE holds the
figures measured at commit ebaa8e6 (before the single JSON parse per row), printed beside today's.
CPU seconds (user + sys) are printed next to wall times, with the machine's CPU pressure: on a
shared machine the wall times grow with other load, the CPU seconds do not (DuckDB uses both
cores, so an idle machine needs about half of them).
"""

from __future__ import annotations

import argparse
import io
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from core.schema import ROLLOUT_SCHEMA, to_json
from core.store import Store

RUN_ID = "bench-scale-run"
# CPU seconds per phase and peak RSS at ebaa8e6, default size (1M rollouts), same 2-core machine
BEFORE = {"import": 2.80, "compute_metrics": 7.91, "write_report": 2.13, "update_index": 0.05, "total": 12.89}
BEFORE_RSS_MIB = 1007
FINAL_BOARD = "_____\n_____\n__X__\n#_##_\n##_##"
BENCHMARKS = ("gsm8k", "tetris")
TETRIS_SYSTEM = (
    "You are playing Tetris on a small board. Call the `step` tool with a list of actions "
    "(Left, Right, Down) to move the falling piece. Call step([]) first to see the board, then play "
    "until you clear a line or lose, and finally answer with <answer>Action1 || Action2 || ...</answer>. "
) * 3


def _pool(rng: np.random.Generator, words: list[str], count: int, lo: int, hi: int) -> list[str]:
    """`count` pseudo-random texts of lo..hi words (cheap, varied, realistic sizes)."""
    return [" ".join(rng.choice(words, size=int(rng.integers(lo, hi)))) for _ in range(count)]


class Generator:
    """Column-wise batch generation with pyarrow (a Python dict per row would dominate the bench)."""

    def __init__(self, prompts: int, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        words = "the a of to and is in how many apples does she have left after giving each friend total".split()  # noqa: SIM905
        words += [str(i) for i in range(100)]
        rng = self.rng
        self.prompts = prompts
        # gsm8k: one question per prompt, a pool of completions (assistant JSON) and answers.
        self.answers = [str(int(x)) for x in rng.integers(1, 5000, size=prompts)]
        questions = _pool(rng, words, prompts, 40, 90)
        self.gsm_prefix = pa.array([to_json([{"role": "user", "content": q}])[:-1] for q in questions])
        completions = [c + f"\n#### {int(rng.integers(1, 5000))}" for c in _pool(rng, words, 800, 60, 200)]
        self.gsm_completion = pa.array(completions)
        self.gsm_assistant = pa.array([to_json({"role": "assistant", "content": c}) for c in completions])
        self.difficulty = rng.beta(0.6, 0.8, size=prompts)
        # tetris: one board per game, transcripts by tool-call count (0-10), 20 variants each.
        boards = ["\n".join("".join(rng.choice(["_", "#"], size=5, p=[0.8, 0.2])) for _ in range(5)) for _ in range(50)]
        self.tetris_prefix = pa.array(
            [
                to_json([{"role": "system", "content": TETRIS_SYSTEM}, {"role": "user", "content": boards[i % 50]}])[
                    :-1
                ]
                for i in range(prompts)
            ]
        )
        self.tetris_turns: list[list[str]] = []
        for calls in range(11):
            variants = []
            for _ in range(20):
                turns = []
                for c in range(calls):
                    actions = list(rng.choice(["Left", "Right", "Down"], size=int(rng.integers(1, 4))))
                    turns.append(
                        {
                            "role": "assistant",
                            "content": "",
                            "tool_calls": [
                                {
                                    "id": f"call_{c}",
                                    "function": {"name": "step", "arguments": to_json({"actions": actions})},
                                }
                            ],
                        }
                    )
                    turns.append({"role": "tool", "tool_call_id": f"call_{c}", "content": boards[c]})
                turns.append({"role": "assistant", "content": "<answer>Left || Down || Down</answer>"})
                variants.append(to_json(turns)[1:])
            self.tetris_turns.append(variants)
        self.tetris_skill = rng.beta(0.3, 5.0, size=prompts)
        self.now = datetime(2025, 6, 1, tzinfo=UTC)

    def tetris_info(self, actions: int, success: bool, calls: int, game: int) -> str:
        """The env's info JSON (envs/tetris.py): ~20 keys, action lists and the final board."""
        moves = (["Left", "Down", "Right", "Down"] * (actions // 4 + 1))[:actions]
        return to_json(
            {
                "mode": "tools", "turns": calls + 1, "tool_calls": calls, "refused_tool_calls": 0,
                "malformed_tool_calls": 0, "actions_applied": actions, "effective_actions": actions - actions // 5,
                "actions": moves, "action_effective": [i % 5 != 4 for i in range(actions)], "invalid_actions": 0,
                "invalid_action_examples": [], "skipped_actions": 0, "pieces_locked": actions // 4,
                "cleared_rows": int(success), "lockout": not success and actions > 12, "game_over": success,
                "end_reason": "cleared" if success else "no_tool_call", "final_board": FINAL_BOARD,
                "answer": "Left || Down", "seed": 1000 + game, "dim_board": [5, 5], "box_type": game % 4,
            }
        )  # fmt: skip

    def batch(self, benchmark: str, first_prompt: int, n_prompts: int, repeats: int, index: int) -> pa.Table:
        rng = self.rng
        p = np.repeat(np.arange(first_prompt, first_prompt + n_prompts), repeats)
        rep = np.tile(np.arange(repeats, dtype=np.int32), n_prompts)
        n = len(p)
        errored = rng.random(n) < 0.005
        prompt_tokens = (120 + (p * 7919) % 150).astype(np.int64)
        completion_tokens = np.clip(rng.lognormal(5.3, 0.5, size=n), 5, 512).astype(np.int64)
        finish = np.where(completion_tokens >= 512, "length", "stop").astype(object)
        latency = completion_tokens / 45.0 + rng.gamma(2.0, 0.3, size=n)
        if benchmark == "gsm8k":
            success = (rng.random(n) < self.difficulty[p]) & ~errored
            parse_fail = ~success & (rng.random(n) < 0.15)
            wrong = rng.integers(1, 5000, size=n).astype(str)
            answers = np.asarray(self.answers, dtype=object)[p]
            parsed = np.where(success, answers, np.where(parse_fail, None, wrong))
            reward = success.astype(np.float64)
            tool_calls = np.zeros(n, dtype=np.int32)
            comp_idx = rng.integers(0, len(self.gsm_completion), size=n)
            prefix = self.gsm_prefix.take(pa.array(p - 0))
            messages = pc.binary_join_element_wise(prefix, pa.scalar("]"), "")
            transcript = pc.binary_join_element_wise(prefix, ", ", self.gsm_assistant.take(comp_idx), "]", "")
            completion = self.gsm_completion.take(comp_idx)
            info = [
                f'{{"boxed_answer": null, "boxed_correct": false, "flexible_correct": {str(bool(s)).lower()}, '
                f'"parse_error": {str(bool(f)).lower()}, "strict_answer": {"null" if a is None else json.dumps(a)}, '
                f'"strict_correct": {str(bool(s and r % 5)).lower()}}}'
                for s, f, a, r in zip(success, parse_fail, parsed, rep, strict=True)
            ]
            reference = pa.array(answers.tolist(), pa.string())
        else:
            tool_calls = rng.integers(0, 11, size=n).astype(np.int32)
            success = (rng.random(n) < self.tetris_skill[p]) & ~errored & (tool_calls > 0)
            actions = tool_calls * 2 + rng.integers(0, 3, size=n)
            reward = np.round(-0.1 * actions + 10.0 * success, 1)
            parsed = np.where(rng.random(n) < 0.8, "Left || Down || Down", None)
            variant = rng.integers(0, 20, size=n)
            turns = pa.array([self.tetris_turns[c][v] for c, v in zip(tool_calls, variant, strict=True)])
            prefix = self.tetris_prefix.take(pa.array(p))
            messages = pc.binary_join_element_wise(prefix, pa.scalar("]"), "")
            transcript = pc.binary_join_element_wise(prefix, ", ", turns, "")
            completion = pa.array(np.full(n, "<answer>Left || Down || Down</answer>", dtype=object))
            info = [
                self.tetris_info(int(a), bool(s), int(c), int(g))
                for a, s, c, g in zip(actions, success, tool_calls, p, strict=True)
            ]
            reference = pa.nulls(n, pa.string())
        error = np.where(errored, "ReadTimeout: the server took longer than 300 s", None)
        reward = np.where(errored, 0.0, reward)
        null_if_error = pa.array(errored)
        columns = {
            "run_id": pa.array(np.full(n, RUN_ID, dtype=object)),
            "benchmark": pa.array(np.full(n, benchmark, dtype=object)),
            "env_version": pa.array(np.full(n, "1", dtype=object)),
            "batch_key": pa.array(np.full(n, f"{benchmark}-{index:04d}", dtype=object)),
            "prompt_id": pa.array(np.char.add(f"{benchmark}-", np.char.zfill(p.astype(str), 5)).astype(object)),
            "repeat": pa.array(rep),
            "seed": pa.array(rng.integers(0, 2**62, size=n)),
            "model": pa.array(np.full(n, "bench-model", dtype=object)),
            "model_fingerprint": pa.array(np.full(n, "sha256:bench", dtype=object)),
            "sampling": pa.array(np.full(n, '{"max_tokens": 512, "temperature": 0.7, "top_p": 1.0}', dtype=object)),
            "messages": messages,
            "completion": pc.if_else(null_if_error, pa.scalar(None, pa.string()), completion),
            "reasoning": pa.nulls(n, pa.string()),  # a model that does not think (rollout schema 3's columns)
            "reasoning_tokens": pa.array(np.zeros(n, dtype=np.int64), mask=errored),
            "answer_tokens": pa.array(completion_tokens, mask=errored),
            "ended_in_reasoning": pa.array(np.zeros(n, dtype=bool), mask=errored),
            "transcript": pc.if_else(null_if_error, pa.scalar(None, pa.string()), transcript),
            "finish_reason": pa.array(np.where(errored, None, finish), pa.string()),
            "prompt_tokens": pa.array(prompt_tokens, mask=errored),
            "completion_tokens": pa.array(completion_tokens, mask=errored),
            "turns": pa.array(tool_calls + 1),
            "tool_calls": pa.array(tool_calls),
            "latency_s": pa.array(latency, mask=errored),
            "reward": pa.array(reward),
            "success": pa.array(success),
            "parsed_answer": pa.array(np.where(errored, None, parsed), pa.string()),
            "reference": reference,
            "error": pa.array(error, pa.string()),
            "info": pa.array(info),
            "created_at": pa.array(
                np.full(n, np.datetime64(self.now.replace(tzinfo=None), "ms")), pa.timestamp("ms", tz="UTC")
            ),
        }
        return pa.Table.from_pydict(columns, schema=ROLLOUT_SCHEMA)


def generate(store: Store, prompts: int, repeats: int, files: int) -> list[str]:
    """Write `files` batch files (half per benchmark) under <store>/runs/<RUN_ID>/rollouts/."""
    gen = Generator(prompts)
    per_bench = max(1, files // len(BENCHMARKS))
    per_file = -(-prompts // per_bench)
    urls = []
    for benchmark in BENCHMARKS:
        for i in range(per_bench):
            first = i * per_file
            count = min(per_file, prompts - first)
            if count <= 0:
                break
            buf = io.BytesIO()
            pq.write_table(gen.batch(benchmark, first, count, repeats, i), buf, compression="zstd")
            url = store.path("runs", RUN_ID, "rollouts", benchmark, f"batch-{i:04d}.parquet")
            urls.append(store.write_bytes(url, buf.getvalue()))
    return urls


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def worker(store_url: str, files: list[str]) -> dict[str, Any]:
    """The measured work (in a fresh process): metrics, report, index; returns wall and CPU seconds
    per phase and the peak RSS."""
    timings: dict[str, float] = {}
    cpu: dict[str, float] = {}

    def phase(name: str, started: float, cpu_started: float) -> None:
        timings[name], cpu[name] = time.perf_counter() - started, _cpu() - cpu_started

    t0, c0 = time.perf_counter(), _cpu()
    from core.record import RunInfo, RunStatus
    from envs.registry import metric_specs
    from tasks.analysis.metrics import compute_metrics
    from tasks.reporting.index import index_entry, update_index
    from tasks.reporting.report import write_report

    phase("import", t0, c0)
    store = Store(store_url)
    run_dir = store.path("runs", RUN_ID)
    run_info = RunInfo(
        run_id=RUN_ID,
        run_name="bench",
        status=RunStatus(state="complete"),
        model="bench-model",
        model_fingerprint="sha256:bench",
        started_at="2025-06-01T00:00:00+00:00",
        finished_at="2025-06-01T02:00:00+00:00",
    )
    t, c = time.perf_counter(), _cpu()
    metrics = compute_metrics(files, store, metric_specs(BENCHMARKS))
    phase("compute_metrics", t, c)
    t, c = time.perf_counter(), _cpu()
    urls = write_report(run_dir, metrics, run_info, files, store)
    phase("write_report", t, c)
    t, c = time.perf_counter(), _cpu()
    update_index(store, index_entry(run_info, metrics, urls, store.url))
    phase("update_index", t, c)
    phase("total", t0, c0)
    return {
        "timings": timings,
        "cpu": cpu,
        "cpu_s": _cpu(),
        "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "urls": urls,
        "rollouts": metrics.total_rollouts,
    }


def _cpu_pressure() -> str:
    """How much other work competed for the CPU (Linux PSI), to read the wall times against."""
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return "n/a"
    return line.split()[1].split("=")[1] + "% of the last 10 s some task waited for a CPU"


def _size(path: str) -> str:
    return f"{Path(path).stat().st_size / 2**20:.1f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=5000, help="prompts per benchmark")
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--keep", help="write the store here (kept) instead of a temporary folder")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)  # STORE FILE...: the measured child
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], args.worker[1:])))
        return

    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-analysis-"))
    store_url = str(root / "store")
    t = time.perf_counter()
    files = generate(Store(store_url), args.prompts, args.repeats, args.files)
    generated = time.perf_counter() - t
    data = sum(Path(f).stat().st_size for f in files) / 2**20
    proc = subprocess.run(
        [sys.executable, "-m", "bench.analysis_scale", "--worker", store_url, *files],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode:
        sys.exit(f"worker failed:\n{proc.stderr}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    urls = result["urls"]
    timings = result["timings"]
    work = timings["compute_metrics"] + timings["write_report"] + timings["update_index"]
    work_cpu = sum(result["cpu"][k] for k in ("compute_metrics", "write_report", "update_index"))
    rows = [
        (
            "rollouts",
            f"{result['rollouts']:,} in {len(files)} files ({data:.0f} MiB parquet, generated in {generated:.1f} s)",
        ),
        *[
            (f"{k} (s)", f"{v:6.2f} wall, {result['cpu'][k]:6.2f} CPU (before {BEFORE[k]:5.2f} CPU)")
            for k, v in timings.items()
        ],
        ("analysis + report (s)", f"{work:.2f} wall, {work_cpu:.2f} CPU  (goal < 10 s CPU; 'total' adds the imports)"),
        ("CPU pressure (avg10)", _cpu_pressure()),
        ("peak RSS (child)", f"{result['max_rss_mib']:.0f} MiB (before {BEFORE_RSS_MIB} MiB; goal < 2,048 MiB)"),
        ("report.html", _size(urls["html"])),
        ("metrics.json", _size(urls["metrics"])),
        ("report.md", _size(urls["markdown"])),
    ]
    width = max(len(k) for k, _ in rows)
    print("\n".join(f"{k.ljust(width)}  {v}" for k, v in rows))
    print(f"store: {store_url}" + ("" if args.keep else " (removed)"))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
