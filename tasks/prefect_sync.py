"""Prefect's dual sync/async calls (`async_dispatch`: artifacts, blocks, `Flow.from_source`) made synchronously.

Such a call returns a coroutine wherever an event loop runs (inside an async flow, say), which a synchronous
caller would never await; `_sync=True` makes it run there and then. Prefect's signatures do not declare that
keyword, nor that the result is then the value itself: `sync_call` passes it and gives the result its type.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar, cast

P = ParamSpec("P")
R = TypeVar("R")


def sync_call(fn: Callable[P, R | Coroutine[Any, Any, R]], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """`fn(*args, **kwargs, _sync=True)`: the synchronous implementation of a Prefect `async_dispatch` call."""
    return cast("Callable[..., R]", fn)(*args, _sync=True, **kwargs)
