"""Every environment through the whole flow on the real vLLM server, in one run."""

import asyncio
import json
from pathlib import Path

import duckdb
import pytest

from core.config import EvalConfig
from flows.eval import eval_flow
from tasks.serving.server import Endpoint

pytestmark = pytest.mark.e2e


def test_all_environments_in_one_run(endpoint: Endpoint, prefect_home: Path, tmp_path: Path) -> None:
    cfg = EvalConfig.model_validate(
        {
            "model": {"source": endpoint.model, "served_name": endpoint.model},
            "server": {"mode": "external", "base_url": endpoint.base_url},
            "sampling": {"temperature": 0.7, "max_tokens": 192},
            "benchmarks": [
                {"name": "gsm8k", "limit": 2, "repeats": 2},
                {"name": "math", "limit": 2, "repeats": 2},
                {"name": "mbpp", "limit": 3, "repeats": 2},
                {"name": "humaneval", "limit": 2, "repeats": 2},
                # SmolLM2's chat template has no tools: the text fallback (<action>...</action>)
                {"name": "tetris", "limit": 2, "repeats": 2, "options": {"mode": "text"}},
            ],
            "collection": {"batch_size": 8, "concurrency": 16},
            "store": {"url": str(tmp_path)},
        }
    )
    result = asyncio.run(eval_flow(cfg))
    benches = result.model_dump(mode="json")["benchmarks"]
    assert {name: b["n_rollouts"] for name, b in benches.items()} == {
        "gsm8k": 4, "math": 4, "mbpp": 6, "humaneval": 4, "tetris": 4,
    }  # fmt: skip
    assert all(b["error_count"] == 0 for b in benches.values())
    assert {m["key"] for m in benches["gsm8k"]["env_metrics"]} >= {"strict_correct", "flexible_correct"}

    run_dir = Path(result.collection.run_dir)
    rows = duckdb.sql(
        f"select benchmark, info, turns, tool_calls, reward from read_parquet('{run_dir}/rollouts/*/*.parquet')"
    ).fetchall()
    code = [json.loads(info) for bench, info, *_ in rows if bench in ("mbpp", "humaneval")]
    assert all(i["outcome"] in {"pass", "fail", "timeout", "crash", "memory", "error"} for i in code)
    tetris = [(json.loads(i), turns, calls, reward) for bench, i, turns, calls, reward in rows if bench == "tetris"]
    for info, turns, calls, reward in tetris:
        assert turns >= 1
        assert calls == info["tool_calls"]
        assert reward == pytest.approx(-0.1 * info["actions_applied"] + 10 * info["cleared_rows"])
    report = (run_dir / "report.md").read_text()
    for name in benches:
        assert name in report
