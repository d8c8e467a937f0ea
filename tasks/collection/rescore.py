"""Rescoring: a batch whose completions an earlier batch already holds (same generation key, other scoring:
a single-turn environment's version, options or code changed, its prompts did not) is scored again from that
batch's file, with no request to any server. The new file is the batch's own, keyed and cached like any."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import pyarrow.parquet as pq

from core.logs import get_logger
from core.reasoning import Split, ThinkTags, split_text
from core.rollout_row import RolloutRow
from core.schema import to_parquet_bytes
from envs.base import Env, SingleTurnEnv
from tasks.collection.answer_score import opened_by_prompt, score_answer
from tasks.collection.failures import BatchFailed, FailureSummary, RolloutFailed
from tasks.collection.plan import Batch, BatchResult, batch_url
from tasks.collection.rollout import CollectContext


def stored_split(record: Mapping[str, Any], tags: ThinkTags, opened: bool) -> tuple[Split, dict[str, Any]]:
    """A stored rollout's completion as reasoning and answer, and its token fields. Files of rollout schema 3 keep
    them apart; in older ones (no `ended_in_reasoning`) the completion is the whole text, think block included,
    and is split here (its token counts do not say which were reasoning)."""
    if record.get("ended_in_reasoning") is not None:
        ended = bool(record["ended_in_reasoning"])
        split = Split(record.get("reasoning"), record.get("completion") or "", ended, tagged=not opened)
        fields = {k: record.get(k) for k in ("reasoning", "reasoning_tokens", "answer_tokens", "ended_in_reasoning")}
        return split, fields
    split = split_text(record.get("completion") or "", tags, opened)
    total = record.get("completion_tokens")
    fields = {
        "completion": split.answer,
        "reasoning": split.reasoning,
        "reasoning_tokens": 0 if split.reasoning is None else None,
        "answer_tokens": total if split.reasoning is None else None,
        "ended_in_reasoning": split.ended_in_reasoning,
    }
    return split, fields


async def rescore_batch_impl(ctx: CollectContext, env: Env, batch: Batch, source: BatchResult) -> BatchResult:
    """The batch's rollouts: `source`'s completions (every one of the batch's prompts and repeats, or this
    raises), scored by `env` now, written to the run folder."""
    assert isinstance(env, SingleTurnEnv), "only single-turn batches are rescored"
    started = time.perf_counter()
    with ctx.store.open(source.url, "rb") as f:
        old = {(r["prompt_id"], r["repeat"]): r for r in pq.read_table(f).to_pylist()}
    wanted = [(env.prompt_id(row), repeat, row) for row in batch.rows for repeat in batch.repeats]
    missing = [f"{pid}#{repeat}" for pid, repeat, _ in wanted if (pid, repeat) not in old]
    if missing:
        raise RuntimeError(f"{source.url} lacks {len(missing)} rollouts of batch {batch.index} (e.g. {missing[0]})")
    opened = opened_by_prompt(ctx.reasoning, (batch.sampling or ctx.sampling).extra_body)

    async def one(pid: str, repeat: int, row: dict[str, Any]) -> RolloutRow:
        record: RolloutRow = old[(pid, repeat)]
        split, fields = stored_split(record, ctx.reasoning, opened)
        score = await score_answer(env, row, split, ctx.reasoning, ctx.collection.env_timeout_s)
        if record.get("completion") is not None:  # a failed request's row (no completion) keeps its nulls
            record.update(**fields)  # the token fields, by their RolloutRow names
        record.update(
            run_id=ctx.run_id, benchmark=batch.benchmark, env_version=env.version, batch_key=batch.key,
            reference=env.reference(row), reward=score.reward, success=score.success,
            parsed_answer=score.parsed_answer, info=score.info,
        )  # fmt: skip
        ctx.progress.add_scored(batch.key)
        return record

    # a judge is asked for every rollout at once (its client limits the requests in flight); other scorers (a
    # sandbox, math-verify's worker) one rollout at a time, as they always were
    if env.uses_judge:
        outcomes = await asyncio.gather(*(one(*w) for w in wanted), return_exceptions=True)
    else:
        outcomes = []
        for w in wanted:
            try:
                outcomes.append(await one(*w))
            except Exception as exc:
                outcomes.append(exc)
    records: list[RolloutRow] = [o for o in outcomes if isinstance(o, dict)]
    failures: list[RolloutFailed] = []
    for o in outcomes:  # an environment or judge error: counted, never part of a result
        if isinstance(o, RolloutFailed):
            failures.append(o)
        elif isinstance(o, BaseException):
            raise o
    if failures:
        raise BatchFailed(FailureSummary.of(batch.benchmark, batch.index, batch.size, failures))
    url = batch_url(ctx.run_dir, batch)
    ctx.store.write_bytes(url, to_parquet_bytes(records))  # atomic; created_at stays the completion's
    get_logger().info(
        "%s batch %d: %d rollouts rescored from %s (no requests)", batch.benchmark, batch.index, len(records),
        source.url,
    )  # fmt: skip
    return BatchResult(
        url=url,
        rollouts=len(records),
        errors=sum(r.get("error") is not None for r in records),
        completion_tokens=sum(r.get("completion_tokens") or 0 for r in records),
        seconds=time.perf_counter() - started,
    )
