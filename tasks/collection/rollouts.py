"""Rollout collection: plan (prompt, repeat) pairs into batches, collect each batch concurrently
with the openai async client, and persist each batch as one parquet file in the run store.

The batch is the unit of work: one Prefect task, one file. Requests from all batches in flight
share one semaphore, so the server stays busy while a batch drains its tail.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import openai
import pyarrow.parquet as pq
from prefect import task
from prefect.cache_policies import CachePolicy
from prefect.context import TaskRunContext

from core import store
from core.config import CollectionConfig, SamplingConfig
from core.schema import to_json, to_table
from envs.base import Env, MultiTurnEnv, Score, SingleTurnEnv, canonical_json
from tasks.collection.concurrency import Limiter, make_limiter, request_priority
from tasks.serving.server import Endpoint


def rollout_seed(base_seed: int, prompt_id: str, repeat: int) -> int:
    """Stable per-rollout seed: a rerun asks the server for the same samples, and repeats differ."""
    digest = hashlib.sha256(f"{base_seed}:{prompt_id}:{repeat}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


@dataclass(frozen=True)
class Batch:
    """A slice of prompts x all their repeats: changing one row touches one batch."""

    benchmark: str
    index: int
    key: str
    rows: tuple[dict[str, Any], ...] = field(repr=False)
    repeats: tuple[int, ...]

    @property
    def size(self) -> int:
        return len(self.rows) * len(self.repeats)


def batch_key(
    env: Env,
    rows: list[dict[str, Any]],
    repeats: list[int],
    model_fingerprint: str,
    sampling: SamplingConfig,
) -> str:
    """Content key: env (name, version, options, templates), rows, repeats, model, sampling. Never the run."""
    payload = {
        "env": env.fingerprint(),
        "rows": hashlib.sha256(canonical_json(rows).encode()).hexdigest(),
        "repeats": repeats,
        "model": model_fingerprint,
        "sampling": sampling.model_dump(mode="json"),
    }
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def plan_batches(
    benchmark: str,
    env: Env,
    rows: list[dict[str, Any]],
    repeats: int,
    batch_size: int,
    model_fingerprint: str,
    sampling: SamplingConfig,
) -> list[Batch]:
    per_batch = max(1, batch_size // repeats)
    reps = list(range(repeats))
    batches = []
    for index, start in enumerate(range(0, len(rows), per_batch)):
        chunk = rows[start : start + per_batch]
        key = batch_key(env, chunk, reps, model_fingerprint, sampling)
        batches.append(Batch(benchmark, index, key, tuple(chunk), tuple(reps)))
    return batches


@dataclass(frozen=True)
class BatchResult:
    url: str
    rollouts: int
    errors: int
    completion_tokens: int
    seconds: float


@dataclass
class CollectContext:
    """What every batch of a run shares (not part of any cache key)."""

    run_id: str
    run_dir: str
    endpoint: Endpoint
    model_fingerprint: str
    sampling: SamplingConfig
    collection: CollectionConfig
    storage_options: dict[str, Any]
    # awaited before retrying a failed request: the server watchdog blocks here while it restarts
    # the server, and raises if it cannot
    server_ready: Callable[[], Awaitable[None]] | None = None
    limiter: Limiter | None = None
    _client: openai.AsyncOpenAI | None = None

    def client(self) -> openai.AsyncOpenAI:
        if self._client is None:
            self._client = openai.AsyncOpenAI(
                base_url=self.endpoint.base_url,
                api_key=self.endpoint.api_key,
                timeout=self.collection.request_timeout_s,
                max_retries=0,  # retries are ours (request_with_retries): they also wait for a server restart
            )
        return self._client

    def requests(self) -> Limiter:
        """The run-wide limit on requests in flight (shared by every batch)."""
        if self.limiter is None:
            self.limiter = make_limiter(self.collection.concurrency)
        return self.limiter


TRANSIENT = (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError, openai.InternalServerError)
PERMANENT = (openai.BadRequestError, openai.UnprocessableEntityError, openai.NotFoundError)


async def request_with_retries(ctx: CollectContext, *, plain: bool = False, **kwargs: Any) -> Any:
    """Retry transient errors (connection reset, timeout, 429, 5xx) with jittered exponential backoff.

    A chat completion, or with `plain` a (legacy) text completion of `prompt`."""
    attempt = 0
    while True:
        try:
            if plain:
                return await ctx.client().completions.create(**kwargs)
            return await ctx.client().chat.completions.create(**kwargs)
        except TRANSIENT:
            attempt += 1
            if attempt > ctx.collection.max_request_retries:
                raise
            if ctx.server_ready is not None:
                await ctx.server_ready()
            await asyncio.sleep(min(20.0, 0.5 * 2**attempt) * random.uniform(0.5, 1.0))


async def _chat(ctx: CollectContext, **kwargs: Any) -> tuple[Any, float]:
    """One request (chat, or a text completion with `plain=True`) under the run's concurrency limit:
    (response, latency in seconds)."""
    async with ctx.requests().slot(request_priority.get()) as ticket:
        started = time.perf_counter()
        response = await request_with_retries(ctx, model=ctx.endpoint.model, **kwargs, **ctx.sampling.as_request())
        latency = time.perf_counter() - started
        ticket.tokens = response.usage.completion_tokens if response.usage else 0
    return response, latency


def _permanent_error(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"[:2000]


async def rollout(ctx: CollectContext, env: Env, batch: Batch, row: dict[str, Any], repeat: int) -> dict:
    """One rollout -> one scored record. Permanent request errors (4xx) are recorded, not raised."""
    prompt_id = env.prompt_id(row)
    seed = rollout_seed(ctx.sampling.seed, prompt_id, repeat)
    record: dict[str, Any] = {
        "run_id": ctx.run_id,
        "benchmark": batch.benchmark,
        "env_version": env.version,
        "batch_key": batch.key,
        "prompt_id": prompt_id,
        "repeat": repeat,
        "seed": seed,
        "model": ctx.endpoint.model,
        "model_fingerprint": ctx.model_fingerprint,
        "sampling": ctx.sampling.model_dump(mode="json"),
        "reference": env.reference(row),
        "turns": 0,
        "tool_calls": 0,
        "reward": 0.0,
        "success": False,
        "info": {},
    }
    if isinstance(env, MultiTurnEnv):
        return await _multi_turn(ctx, env, row, seed, record)
    assert isinstance(env, SingleTurnEnv)
    prompt = env.prompt(row)
    if prompt is None:
        messages: list[dict[str, str]] = env.messages(row)
        record["messages"] = messages
        request: dict[str, Any] = {"messages": messages}
    else:
        # Plain completion: the prompt string takes the messages column's place (a JSON string, not a list).
        record["messages"] = to_json(prompt)
        request = {"prompt": prompt, "plain": True}
    started = time.perf_counter()
    try:
        response, latency = await _chat(ctx, **request, seed=seed, stop=env.stop())
    except PERMANENT as exc:  # e.g. a prompt longer than the context: recorded and counted, not retried
        record.update(error=_permanent_error(exc), latency_s=time.perf_counter() - started)
        return record
    choice = response.choices[0]
    completion = (choice.message.content if prompt is None else choice.text) or ""
    ascore = getattr(env, "ascore", None)  # envs that score asynchronously (sandboxed code)
    score = await ascore(row, completion) if ascore else env.score(row, completion)
    usage = response.usage
    if prompt is None:
        transcript: Any = [*messages, {"role": "assistant", "content": completion}]
    else:  # the whole text the model saw and wrote, as a JSON string
        transcript = to_json(prompt + completion)
    return _scored(
        record,
        score,
        completion=completion,
        transcript=transcript,
        finish_reason=choice.finish_reason,
        prompt_tokens=usage.prompt_tokens if usage else None,
        completion_tokens=usage.completion_tokens if usage else None,
        turns=1,
        latency_s=latency,
    )


def _scored(record: dict[str, Any], score: Score, **fields: Any) -> dict[str, Any]:
    """The record completed with the request's fields and the env's verdict."""
    record.update(fields)
    record.update(reward=score.reward, success=score.success, parsed_answer=score.parsed_answer, info=score.info)
    return record


def _assistant_message(message: Any) -> dict[str, Any]:
    """The assistant turn as a plain chat message (tool calls kept, so the next request carries them)."""
    out: dict[str, Any] = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in message.tool_calls
        ]
    return out


async def _multi_turn(
    ctx: CollectContext, env: MultiTurnEnv, row: dict[str, Any], seed: int, record: dict[str, Any]
) -> dict:
    """Play an episode: request, let the env step on the assistant turn, append its replies, repeat.

    Token counts and latency are summed over turns (each turn re-sends the conversation, so prompt
    tokens grow with the number of turns); the concurrency slot is held per request, not per episode.
    """
    episode = env.reset(row)
    messages = list(episode.messages)
    record["messages"] = list(episode.messages)
    tools = env.tools()
    prompt_tokens = completion_tokens = 0
    latency = 0.0
    finish_reason = None
    completion = ""
    for turn in range(env.max_turns):
        kwargs: dict[str, Any] = {"messages": messages, "seed": (seed + turn) & 0x7FFFFFFF}
        if tools:
            kwargs["tools"] = tools
        started = time.perf_counter()
        try:
            response, took = await _chat(ctx, **kwargs)
        except PERMANENT as exc:
            record["error"] = _permanent_error(exc)
            latency += time.perf_counter() - started
            break
        latency += took
        record["turns"] = turn + 1
        if response.usage:
            prompt_tokens += response.usage.prompt_tokens
            completion_tokens += response.usage.completion_tokens
        choice = response.choices[0]
        finish_reason = choice.finish_reason
        assistant = _assistant_message(choice.message)
        completion = assistant["content"] or completion
        messages.append(assistant)
        step = episode.step(assistant)
        messages.extend(step.messages)
        if step.done:
            break
    score = episode.result()
    return _scored(
        record,
        score,
        completion=completion,
        transcript=messages,
        finish_reason=finish_reason,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        tool_calls=int(score.info.get("tool_calls", 0)),
        latency_s=latency,
    )


def batch_url(run_dir: str, batch: Batch) -> str:
    return store.join(run_dir, "rollouts", batch.benchmark, f"{batch.index:05d}-{batch.key[:16]}.parquet")


def write_batch(url: str, records: list[dict[str, Any]], storage_options: dict[str, Any]) -> None:
    now = datetime.now(UTC)
    for record in records:
        record["created_at"] = now
    buffer = io.BytesIO()
    pq.write_table(to_table(records), buffer, compression="zstd")
    store.write_bytes(url, buffer.getvalue(), storage_options)  # atomic: never a half-written batch


async def collect_batch_impl(ctx: CollectContext, env: Env, batch: Batch) -> BatchResult:
    started = time.perf_counter()
    records = await asyncio.gather(*(rollout(ctx, env, batch, row, r) for row in batch.rows for r in batch.repeats))
    records.sort(key=lambda rec: (rec["prompt_id"], rec["repeat"]))
    url = batch_url(ctx.run_dir, batch)
    write_batch(url, records, ctx.storage_options)
    return BatchResult(
        url=url,
        rollouts=len(records),
        errors=sum(rec.get("error") is not None for rec in records),
        completion_tokens=sum(rec.get("completion_tokens") or 0 for rec in records),
        seconds=time.perf_counter() - started,
    )


class BatchKeyPolicy(CachePolicy):
    """Cache key = the batch's content key: a new run, a UI retry or a sweep point with the same
    inputs hits it; any change of model, rows, sampling or prompt template misses."""

    def compute_key(
        self, task_ctx: TaskRunContext, inputs: dict[str, Any], flow_parameters: dict[str, Any], **kwargs: Any
    ) -> str | None:
        return self.key_for(inputs["batch"])

    @staticmethod
    def key_for(batch: Batch) -> str:
        return f"batch-{batch.key}"


@task(
    name="collect-batch",
    task_run_name="{batch.benchmark}-batch-{batch.index}",
    retries=2,
    retry_delay_seconds=10,
    persist_result=True,
    cache_policy=BatchKeyPolicy(),
)
async def collect_batch(ctx: CollectContext, env: Env, batch: Batch) -> BatchResult:
    """Prefect task: one batch of rollouts, written as one parquet file. Retried as a whole; its
    result (where the file is) is persisted, so a finished batch is never collected again."""
    return await collect_batch_impl(ctx, env, batch)
