"""The rollout row while it is collected: core.schema.RolloutRecord's fields as a TypedDict (no validation on
the collection's hot path; `core.schema.to_table` validates each row when its batch is written)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Required, TypedDict


class AssistantMessage(TypedDict, total=False):
    """An assistant turn as the chat API takes it back (tool calls kept, so the next request carries them)."""

    role: str
    content: str | None
    tool_calls: list[dict[str, Any]]


class RolloutRow(TypedDict, total=False):
    """A rollout row while it is collected (before its JSON columns are encoded): RolloutRecord's fields, in
    a plain dict so the collection's hot path costs no validation; `to_table` validates it when written.
    tests/core/test_schema.py checks that the two declare the same keys."""

    run_id: str
    benchmark: str
    env_version: str
    batch_key: str
    prompt_id: Required[str]  # the rollout's identity: set when the record is made
    repeat: Required[int]
    seed: int
    model: str
    model_fingerprint: str
    sampling: dict[str, Any]
    messages: list[dict[str, Any]] | str
    completion: str | None
    reasoning: str | None
    transcript: list[dict[str, Any]] | str | None
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    reasoning_tokens: int | None
    answer_tokens: int | None
    ended_in_reasoning: bool | None
    turns: int
    tool_calls: int
    latency_s: float | None
    reward: float
    success: bool
    parsed_answer: str | None
    reference: str | None
    error: str | None
    info: dict[str, Any]
    created_at: datetime
