"""The next step of a training run prepared while this one is evaluated, where the host has cores to spare.

A step's wait is its download, hashing and conversion, then its server. On a GPU node the server runs on the
GPUs and the node's CPUs idle through the collection, so the watcher prepares step N+1 (tasks.checkpoints,
content-cached and file-locked: the step's own run then finds it ready) while step N collects. On a CPU host the
same work would take the cores the server generates with, so it is not done there.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from core.config import EvalConfig
from core.logs import get_logger
from tasks.checkpoints.prepare import prepare_model_impl
from tasks.runtime.venv import resolve_flavor

S = TypeVar("S")
R = TypeVar("R")


def prepare_ahead_wanted(config: EvalConfig) -> bool:
    """Whether to prepare the next step during this one: a managed server on GPUs (the CPUs are free)."""
    return config.server.mode == "managed" and resolve_flavor(config.server.runtime) == "gpu"


async def prepare_ahead(config: EvalConfig, label: str) -> None:
    """Download, hash and convert the model of `config` now; a failure is left to its own run to report."""
    logger = get_logger()
    try:
        await asyncio.to_thread(prepare_model_impl, config.model, config.server.runtime)
        logger.info("%s prepared ahead (its run will find the conversion cached)", label)
    except Exception as exc:  # its own run tries again and reports it in one line
        logger.info("%s could not be prepared ahead (%s); its run will try", label, " ".join(str(exc).split())[:200])


async def one_by_one(
    steps: Sequence[S],
    evaluate: Callable[[S], Awaitable[R]],
    ahead: Callable[[S], Coroutine[Any, Any, None]] | None = None,
) -> list[R]:
    """`evaluate` each step in turn; with `ahead`, the next step's `ahead` runs while this one is evaluated."""
    results: list[R] = []
    pending: asyncio.Task[None] | None = None
    try:
        for i, step in enumerate(steps):
            if ahead is not None and i + 1 < len(steps):
                if pending is not None:
                    await pending  # one preparation at a time
                pending = asyncio.create_task(ahead(steps[i + 1]))
            results.append(await evaluate(step))
    finally:
        if pending is not None and not pending.done():
            pending.cancel()  # the thread it waits on finishes its file-locked work; nothing half-published
            with contextlib.suppress(asyncio.CancelledError):
                await pending
    return results
