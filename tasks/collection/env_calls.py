"""Calls into a benchmark's own code during a rollout (building the prompt, scoring, an episode's steps),
guarded: one that raises, hangs or returns a bad value is an environment error on that rollout
(RolloutFailed "environment"), never a crash of the batch and never a result.

evalflow's own environments (their `source_digest` is None) run in place, as they always have: they are
trusted, and their scorers manage their own timeouts (sympy on the main thread, the code sandbox). An
environment from outside evalflow runs in a daemon thread of its own with `collection.env_timeout_s`, so a
scorer that loops forever costs that rollout, not the event loop, and never holds up the process's exit (a
thread cannot be killed: it is left to finish or to die with the process).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import math
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from envs.base import Env, Score, Turn
from envs.judge import JudgeFailed
from tasks.collection.failures import RolloutFailed

MESSAGE_CHARS = 400


def _failed(env: Env, what: str, problem: str) -> RolloutFailed:
    return RolloutFailed("environment", " ".join(f"environment {env.name!r} {what}: {problem}".split())[:MESSAGE_CHARS])


def _in_thread(what: str, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
    """`fn(*args)` in a new daemon thread (not an executor's, whose threads the interpreter joins at exit); an
    awaitable it returns (an `ascore`) runs to its end on that thread's own event loop, so neither a blocking
    synchronous scorer behind the default `ascore` nor an async one that never yields can stall the rollouts'."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():  # timed out and cancelled meanwhile: the late answer is dropped
            future.set_result(value) if ok else future.set_exception(value)

    def run() -> None:
        try:
            value = fn(*args)
            outcome = (True, asyncio.run(_awaited(value)) if inspect.isawaitable(value) else value)
        except Exception as exc:
            outcome = (False, exc)
        except BaseException as exc:  # sys.exit() in a scorer: the user's code ended, not this process
            outcome = (False, RuntimeError(f"{type(exc).__name__}({exc})"))
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits for this answer any more
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=run, name=f"evalflow-env-{what}", daemon=True).start()
    return future


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value


async def env_call(env: Env, what: str, timeout_s: float, fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` (awaited when it returns an awaitable), any failure an environment error naming `what`."""
    own = type(env).source_digest() is None
    try:
        if own:
            result = fn(*args)
            return await result if inspect.isawaitable(result) else result
        return await asyncio.wait_for(_in_thread(what, fn, *args), timeout_s)
    except TimeoutError:
        raise _failed(env, what, f"did not return within {timeout_s:g} s (collection.env_timeout_s)") from None
    except RolloutFailed:
        raise
    except JudgeFailed as exc:  # the judge's failure, not the environment's: retried, counted apart
        raise RolloutFailed("judge", " ".join(str(exc).split())[:MESSAGE_CHARS]) from None
    except Exception as exc:
        raise _failed(env, what, f"raised {type(exc).__name__}: {exc}") from None


def checked_score(env: Env, what: str, value: Any) -> Score:
    """The value a scorer returned, if it is a usable Score; an environment error saying what is wrong if not."""
    if not isinstance(value, Score):
        raise _failed(env, what, f"returned {type(value).__name__}, not an envs.base.Score")
    reward = value.reward
    if isinstance(reward, bool) or not isinstance(reward, int | float) or not math.isfinite(reward):
        raise _failed(env, what, f"returned reward {reward!r}: a finite number is needed")
    if not isinstance(value.success, bool):
        raise _failed(env, what, f"returned success {value.success!r}: True or False is needed")
    if value.parsed_answer is not None and not isinstance(value.parsed_answer, str):
        raise _failed(
            env, what, f"returned parsed_answer of type {type(value.parsed_answer).__name__}: a string or None"
        )
    if not isinstance(value.info, dict):
        raise _failed(env, what, f"returned info of type {type(value.info).__name__}: a dict is needed")
    try:
        json.dumps(value.info, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise _failed(env, what, f"returned info that is not plain JSON ({exc})") from None
    return value


def checked_turn(env: Env, value: Any) -> Turn:
    """An episode step's answer, if it is a Turn of chat messages."""
    if not isinstance(value, Turn):
        raise _failed(env, "step", f"returned {type(value).__name__}, not an envs.base.Turn")
    if not isinstance(value.messages, list) or not all(isinstance(m, dict) and "role" in m for m in value.messages):
        raise _failed(env, "step", "returned messages that are not a list of chat messages ({'role': ..., ...})")
    if not isinstance(value.done, bool):
        raise _failed(env, "step", f"returned done {value.done!r}: True or False is needed")
    return value
