"""The published reference profile of the GRL Tetris evaluation (Qwen3-4B, 200 games x 16 rollouts, tools
mode, at most 10 tool calls), as quoted in the project's design notes (shared/tetris.md): what a report of
a Tetris run is compared with, line by line. None: not published."""

from __future__ import annotations

from envs.base import ReferenceProfile

QWEN3_4B = ReferenceProfile(
    title="Qwen3-4B (GRL Tetris)",
    source="GRL Tetris evaluation, Qwen3-4B, 200 games x 16 rollouts, tools mode (shared/tetris.md)",
    figures={
        "prompts": 200,
        "repeats": 16,
        "rollouts": 3200,
        "successes": 163,
        "success_rate": 163 / 3200,  # 5.09%
        "reward_mean": -0.29,
        "reward_median": -0.80,
        "reward_std": None,
        "reward_min": -2.0,
        "reward_max": 19.2,
        "reward_mode": -0.9,
        "reward_mode_share": 0.210,
        "tool_calls_mean": 7.48,
        "tool_calls_min": 0,
        "tool_calls_max": 10,
        "tool_calls_reward_corr": -0.057,
    },
)
