"""A Tetris run beside the published Qwen3-4B reference profile (envs/tetris_reference.py), one statistic
per row, so a Qwen3-4B run can be checked against the published figures line by line."""

from __future__ import annotations

from typing import Any

from core.schema import BenchmarkMetrics
from envs.tetris_reference import QWEN3_4B, SOURCE
from tasks.reporting.format import fmt_num, fmt_rate
from tasks.reporting.parts import Section, Table

TITLE = "Reference: Qwen3-4B (GRL Tetris)"
NONE = "–"


def _num(value: Any, digits: int = 2) -> str:
    return NONE if value is None else fmt_num(value, digits)


def _rate(value: float | None, k: int | None = None, n: int | None = None) -> str:
    if value is None:
        return NONE
    return fmt_rate(value) + (f" ({k:,}/{n:,})" if k is not None and n is not None else "")


def _range(low: Any, high: Any) -> str:
    return NONE if low is None or high is None else f"{low} to {high}"


def tetris_reference_section(bm: BenchmarkMetrics) -> Section:
    """This run's figures and the reference's, for every statistic the reference publishes."""
    ref, r, tools = QWEN3_4B, bm.reward, bm.tool_calls
    mode = NONE if r.mode is None else f"{fmt_num(r.mode, 2)} ({fmt_rate(r.mode_share)} of rollouts)"
    rows = [
        ["games x rollouts", f"{bm.n_prompts:,} x {bm.repeats['max']}", f"{ref['prompts']} x 16"],
        ["success rate", _rate(bm.accuracy, bm.successes, bm.n_rollouts),
         _rate(ref["success_rate"], ref["successes"], ref["rollouts"])],
        ["mean reward", _num(r.mean), _num(ref["reward_mean"])],
        ["median reward", _num(r.median), _num(ref["reward_median"])],
        ["reward std", _num(r.std), _num(ref["reward_std"])],
        ["min, max reward", f"{_num(r.min)}, {_num(r.max)}", f"{_num(ref['reward_min'])}, {_num(ref['reward_max'])}"],
        ["most common reward", mode, f"{_num(ref['reward_mode'])} ({fmt_rate(ref['reward_mode_share'])} of rollouts)"],
        ["tool calls per rollout", _num(tools.mean), _num(ref["tool_calls_mean"])],
        ["tool calls range", _range(tools.min, tools.max), _range(ref["tool_calls_min"], ref["tool_calls_max"])],
        ["Pearson r (tool calls, reward)", _num(tools.reward_corr, 3), _num(ref["tool_calls_reward_corr"], 3)],
    ]  # fmt: skip
    note = (
        f"{SOURCE}. The reward histogram, the mean reward by tool-call count and per-prompt success are in the "
        "sections above (the reference publishes them as charts only)."
    )
    return Section(TITLE, Table(["statistic", "this run", "reference"], rows, note))
