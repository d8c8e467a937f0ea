"""Benchmark name -> environment class, so configs can name environments by string."""

from __future__ import annotations

import inspect
from typing import Any

from envs.base import Env
from envs.code import HumanEvalEnv, MBPPEnv
from envs.gsm8k import GSM8KEnv
from envs.math import MathEnv
from envs.tetris import TetrisEnv

ENVS: dict[str, type[Env]] = {cls.name: cls for cls in (GSM8KEnv, MathEnv, MBPPEnv, HumanEvalEnv, TetrisEnv)}


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
