"""Where the completions of a generation key were written (tasks.collection.plan.generation_key): one small
JSON record per key in the run store, `cache/generations/<key>.json`, written when a batch finishes, so a later
run whose scoring changed but whose requests did not rescores those completions instead of generating them."""

from __future__ import annotations

import json
from typing import TypedDict, cast

from core.store import Store


class BatchRecord(TypedDict):
    """A finished batch as its cache record stores it (BatchResult's fields; a test pins that they agree)."""

    url: str
    rollouts: int
    errors: int
    completion_tokens: int
    seconds: float


def generation_url(store: Store, generation: str) -> str:
    return store.path("cache", "generations", generation[:2], f"{generation}.json")


def record_generation(store: Store, generation: str, record: BatchRecord) -> None:
    """Note where a finished batch's completions are (its BatchRecord); the newest batch wins."""
    store.write_bytes(generation_url(store, generation), json.dumps(dict(record), sort_keys=True).encode())


def find_generation(store: Store, generation: str) -> BatchRecord | None:
    """The BatchRecord of finished completions for `generation`, or None (never written, or unreadable)."""
    url = generation_url(store, generation)
    if not store.exists(url):
        return None
    try:
        record = json.loads(store.read_bytes(url))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or set(record) != set(BatchRecord.__annotations__):
        return None
    return cast(BatchRecord, record)  # a record this module wrote: BatchRecord's keys, checked above
