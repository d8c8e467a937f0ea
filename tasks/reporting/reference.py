"""A run beside a published reference profile (envs.base.ReferenceProfile, declared by its environment),
one statistic per row, so it can be checked against the published figures line by line."""

from __future__ import annotations

from typing import Any

from core.metrics_doc import BenchmarkMetrics
from envs.base import ReferenceProfile
from tasks.reporting.format import fmt_num, fmt_rate
from tasks.reporting.parts import Section, Table

NONE = "–"


def _num(value: Any, digits: int = 2) -> str:
    return NONE if value is None else fmt_num(value, digits)


def _rate(value: float | None, k: int | None = None, n: int | None = None) -> str:
    if value is None:
        return NONE
    return fmt_rate(value) + (f" ({k:,}/{n:,})" if k is not None and n is not None else "")


def _range(low: Any, high: Any) -> str:
    return NONE if low is None or high is None else f"{low} to {high}"


def _mode(value: float | None, share: float | None) -> str:
    return NONE if value is None else f"{fmt_num(value, 2)} ({fmt_rate(share)} of rollouts)"


def title(profile: ReferenceProfile) -> str:
    return f"Reference: {profile.title}"


def reference_section(bm: BenchmarkMetrics, profile: ReferenceProfile) -> Section:
    """This run's figures and the reference's, for every statistic the profile can publish."""
    f, r, tools = profile.figures, bm.reward, bm.tool_calls
    rows = [
        ["prompts x repeats", f"{bm.n_prompts:,} x {bm.repeats['max']}",
         f"{_num(f.get('prompts'), 0)} x {_num(f.get('repeats'), 0)}"],
        ["success rate", _rate(bm.accuracy, bm.successes, bm.n_rollouts),
         _rate(f.get("success_rate"), f.get("successes"), f.get("rollouts"))],
        ["mean reward", _num(r.mean), _num(f.get("reward_mean"))],
        ["median reward", _num(r.median), _num(f.get("reward_median"))],
        ["reward std", _num(r.std), _num(f.get("reward_std"))],
        ["min, max reward", f"{_num(r.min)}, {_num(r.max)}",
         f"{_num(f.get('reward_min'))}, {_num(f.get('reward_max'))}"],
        ["most common reward", _mode(r.mode, r.mode_share), _mode(f.get("reward_mode"), f.get("reward_mode_share"))],
        ["tool calls per rollout", _num(tools.mean), _num(f.get("tool_calls_mean"))],
        ["tool calls range", _range(tools.min, tools.max), _range(f.get("tool_calls_min"), f.get("tool_calls_max"))],
        ["Pearson r (tool calls, reward)", _num(tools.reward_corr, 3), _num(f.get("tool_calls_reward_corr"), 3)],
    ]  # fmt: skip
    note = (
        f"{profile.source}. The reward histogram, the mean reward by tool-call count and per-prompt success are "
        "in the sections above; –: not published."
    )
    return Section(title(profile), Table(["statistic", "this run", "reference"], rows, note))
