"""A benchmark's own code failing on a rollout (raises, hangs, returns a bad value) is an environment error
on that rollout: its own kind, not retried, counted apart, and the run follows the failure policy."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from envs.base import Score, Turn
from envs.gsm8k import GSM8KEnv
from envs.registry import get_env
from tasks.collection.env_calls import checked_score, checked_turn, env_call
from tasks.collection.failures import BatchFailed, FailureSummary, RolloutFailed
from tasks.collection.schedule import Collected

USER_ENV = """
import time
from typing import Any, ClassVar
from envs.base import Score
from envs.gsm8k import GSM8KEnv


class Moody(GSM8KEnv):
    name: ClassVar[str] = "moody"
    version: ClassVar[str] = "1"

    def score(self, row: dict[str, Any], completion: str) -> Any:
        if completion == "hang":
            time.sleep(3)
        if completion == "raise":
            raise KeyError("no such field")
        if completion == "dict":
            return {"reward": 1}
        if completion == "exit":
            raise SystemExit(3)
        return super().score(row, completion)
"""
ROW = {"id": "a", "question": "1+1?", "answer": "2"}


@pytest.fixture
def moody(tmp_path: Path) -> Any:
    (tmp_path / "moody.py").write_text(USER_ENV)
    return get_env(f"{tmp_path}/moody.py:Moody")


def call(env: Any, completion: str, timeout_s: float = 5.0) -> Score:
    result = asyncio.run(env_call(env, "score", timeout_s, env.score, ROW, completion))
    return checked_score(env, "score", result)


def test_a_users_scorer_that_raises_hangs_or_returns_junk_is_an_environment_error(moody: Any) -> None:
    assert call(moody, "#### 2").success  # a well-behaved call
    with pytest.raises(RolloutFailed, match=r"environment 'moody' score: raised KeyError: 'no such field'") as info:
        call(moody, "raise")
    assert info.value.kind == "environment"
    started = time.monotonic()
    with pytest.raises(RolloutFailed, match=r"did not return within 0.3 s \(collection.env_timeout_s\)"):
        call(moody, "hang", timeout_s=0.3)
    assert time.monotonic() - started < 2  # the event loop did not wait for the sleeping scorer
    with pytest.raises(RolloutFailed, match=r"score: returned dict, not an envs.base.Score"):
        call(moody, "dict")
    with pytest.raises(RolloutFailed, match=r"score: raised RuntimeError: SystemExit\(3\)"):
        call(moody, "exit")  # sys.exit in a scorer ends that call, never the run


@pytest.mark.parametrize(
    ("score", "problem"),
    [
        (Score(float("nan"), False, None, {}), "reward nan: a finite number"),
        (Score(True, True, None, {}), "reward True: a finite number"),  # type: ignore[arg-type]
        (Score(1.0, 1, None, {}), "success 1: True or False"),  # type: ignore[arg-type]
        (Score(1.0, True, 42, {}), "parsed_answer of type int"),  # type: ignore[arg-type]
        (Score(1.0, True, None, {"x": object()}), "info that is not plain JSON"),
        (Score(1.0, True, None, {"x": float("inf")}), "info that is not plain JSON"),
    ],
)
def test_a_bad_score_is_named(score: Score, problem: str) -> None:
    with pytest.raises(RolloutFailed, match=problem):
        checked_score(GSM8KEnv(), "score", score)


def test_a_bad_turn_is_named() -> None:
    env = get_env("tetris")
    assert checked_turn(env, Turn([{"role": "tool", "content": "ok"}], False)).done is False
    for bad, problem in [
        ("done", "returned str, not an envs.base.Turn"),
        (Turn(["hi"], False), "not a list of chat messages"),  # type: ignore[list-item]
        (Turn([], "yes"), "done 'yes'"),  # type: ignore[arg-type]
    ]:
        with pytest.raises(RolloutFailed, match=problem):
            checked_turn(env, bad)


def test_evalflows_own_environments_run_in_place() -> None:
    """No thread hop and no timeout for the built-ins: their scorers keep their own (sympy's alarm needs the
    main thread), and a bug in one is still an environment error, not a crash."""
    env = GSM8KEnv()
    assert asyncio.run(env_call(env, "score", 0.001, env.score, ROW, "#### 2")).success
    with pytest.raises(RolloutFailed, match="environment 'gsm8k' score: raised KeyError"):
        asyncio.run(env_call(env, "score", 5, env.score, {"id": "a"}, "#### 2"))


def failed(environment: int, transient: int) -> BatchFailed:
    failures = [RolloutFailed("environment", "environment 'moody' score: raised KeyError")] * environment
    failures += [RolloutFailed("transient", "ReadTimeout")] * transient
    return BatchFailed(FailureSummary.of("moody", 0, 8, failures))


def test_environment_errors_count_apart_and_follow_the_failure_policy() -> None:
    batch = failed(2, 1)
    assert (batch.summary.kind, batch.summary.environment, batch.transient) == ("environment", 2, False)
    status = Collected([], [batch], planned_rollouts=16).status(max_failed_share=0.5)
    assert (status.state, status.failed_rollouts, status.environment_errors) == ("incomplete", 3, 2)
    assert "3 of 16 rollouts (18.8%) failed (2 environment errors, 1 transient) and are left out" in status.reason
    assert status.failed_batches[0].environment == 2 and status.failed_batches[0].kind == "environment"
    too_many = Collected([], [batch], planned_rollouts=16).status(max_failed_share=0.1)
    assert too_many.state == "failed" and "more than collection.max_failed_share (10.0%)" in too_many.reason
    transient_only = Collected([], [failed(0, 1)], planned_rollouts=16).status(max_failed_share=0.5)
    assert "failed transiently" in transient_only.reason and transient_only.environment_errors == 0
