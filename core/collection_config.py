"""CollectionConfig: how a run's rollouts are collected (batches, concurrency, retries, shards, progress)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from core.config_base import Strict as _Strict


class CollectionConfig(_Strict):
    batch_size: int = Field(default=64, ge=1, description="rollouts per batch (the unit of work, caching and loss)")
    concurrency: int | None = Field(
        default=None, ge=1, description="requests in flight; empty: found while collecting (adaptive)"
    )
    batches_in_flight: int | None = Field(
        default=None,
        ge=1,
        description=(
            "batches collected at once, a hard cap; empty: enough to fill the concurrency limit, plus one, a batch "
            "whose rollouts all sent their first request no longer counting"
        ),
    )
    request_timeout_s: float = Field(default=300.0, gt=0, description="one request's wait (s); past it: transient")
    env_timeout_s: float = Field(
        default=120.0,
        gt=0,
        description="how long an environment from outside evalflow may take for one call (a score, an episode "
        "step); one that takes longer, raises or returns a bad value is an environment error on that rollout",
    )
    max_request_retries: int = Field(default=4, ge=0, description="retries of a transient request error, with backoff")
    batch_retries: int = Field(
        default=2,
        ge=0,
        description="retries of a batch whose rollouts failed transiently (each redoes only the failed ones)",
    )
    max_failed_share: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="share of rollouts that may fail transiently (after retries) before the run ends Failed; "
        "any configuration failure (401, 404, a rejected option) always fails the run",
    )
    shards: int | Literal["auto"] = Field(
        default=1,
        description="split the batches to collect over this many child flow runs of the run's deployment, each "
        "with its own server on a worker of the work pool; auto: one per free server slot in the pool",
    )
    shard_retries: int = Field(
        default=1,
        ge=0,
        description="resubmissions of a shard whose flow run failed or crashed (each collects what is left)",
    )
    shard_deployment: str | None = Field(
        default=None,
        description="the deployment ('flow/name') shards run as; default: the deployment this run belongs to",
    )
    progress_interval_s: float = Field(
        default=10.0,
        gt=0,
        description="seconds between progress reports (log line, artifact, terminal) and snapshots of each "
        "open batch's finished rollouts",
    )

    @field_validator("shards")
    @classmethod
    def _positive_shards(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 1:
            raise ValueError(f"collection.shards {value}: use 1 (no sharding), a number of shards, or auto")
        return value
