"""Benchmark name -> environment class, so configs name environments by string; their declared metrics."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

from envs.base import Env, MetricSpec
from envs.code import HumanEvalEnv, MBPPEnv
from envs.gsm8k import GSM8KEnv
from envs.ifeval import IFEvalEnv
from envs.math import MathEnv
from envs.tetris import TetrisEnv

ENVS: dict[str, type[Env]] = {cls.name: cls for cls in (GSM8KEnv, MathEnv, MBPPEnv, HumanEvalEnv, IFEvalEnv, TetrisEnv)}


def get_env(name: str, **options: Any) -> Env:
    """An environment instance configured with the config's env options; unknown names list the known ones."""
    try:
        cls = ENVS[name]
    except KeyError:
        raise ValueError(f"unknown environment {name!r}; known: {', '.join(sorted(ENVS))}") from None
    try:
        inspect.signature(cls).bind(**options)
    except TypeError as e:
        raise ValueError(f"environment {name!r}: bad options {sorted(options)}: {e}") from None
    return cls(**options)


def metric_specs(names: Iterable[str]) -> dict[str, tuple[MetricSpec, ...]]:
    """The metrics each named environment declares; a name with no environment here (a benchmark of an
    older run, say) declares none."""
    return {name: ENVS[name].metrics if name in ENVS else () for name in names}
