"""Run a scoring function on a process's main thread, where its SIGALRM timeouts work, from any thread or loop.

sympy and math-verify bound their work with `signal.alarm`, which only the main thread may set: off it,
math-verify raises and lm-eval's sympy check quietly returns "not equal". `call` runs the function in place
on the main thread and otherwise in a small pool of worker processes (each runs its tasks on its own main
thread); `acall` always uses the pool, so that seconds of sympy never stall a rollout event loop. The pool
starts on first use (spawned workers: the caller may hold threads and locks a fork would copy) and
replaces itself if a worker dies.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

T = TypeVar("T")
# Scoring is a small share of a rollout's cost; a few workers keep up with a GPU server's completions
# without taking the CPUs the server's own processes need.
MAX_WORKERS = 4

_lock = threading.Lock()
_pool: ProcessPoolExecutor | None = None


def workers() -> int:
    return max(1, min(MAX_WORKERS, (os.cpu_count() or 2) // 2))


def _executor(replace: ProcessPoolExecutor | None = None) -> ProcessPoolExecutor:
    global _pool
    with _lock:
        if _pool is None or _pool is replace:
            if _pool is not None:
                _pool.shutdown(wait=False, cancel_futures=True)
            _pool = ProcessPoolExecutor(workers(), mp_context=multiprocessing.get_context("spawn"))
        return _pool


def _submit(fn: Callable[..., T], *args: Any) -> Future[T]:
    pool = _executor()
    try:
        return pool.submit(fn, *args)
    except BrokenProcessPool:  # a worker died (killed, out of memory): start a new pool once
        return _executor(replace=pool).submit(fn, *args)


def call(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` on a main thread: here if this is the main thread, else in a worker process."""
    if threading.current_thread() is threading.main_thread():
        return fn(*args)
    return _submit(fn, *args).result()


async def acall(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a worker process's main thread, awaited without blocking the event loop."""
    return await asyncio.wrap_future(_submit(fn, *args))
