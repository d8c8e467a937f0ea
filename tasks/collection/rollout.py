"""One rollout: requests to the server through the openai async client (retried when transient),
single-turn or a multi-turn episode with tool calls, scored by the environment into one record.

Requests from all batches in flight share one limiter, so the server stays busy while a batch
drains its tail.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack

import openai

from core.config import CollectionConfig, SamplingConfig
from core.logs import get_logger
from core.reasoning import Split, ThinkTags, from_server
from core.rollout_row import AssistantMessage, RolloutRow
from core.schema import to_json
from core.store import Store
from envs.base import Env, MultiTurnEnv, Score, SingleTurnEnv
from tasks.collection.answer_score import opened_by_prompt, score_answer
from tasks.collection.concurrency import Feed, Limiter, make_limiter, request_priority
from tasks.collection.env_calls import checked_score, checked_turn, env_call
from tasks.collection.failures import RolloutFailed, classify, describe
from tasks.collection.plan import Batch, rollout_seed
from tasks.collection.progress import PROGRESS_INTERVAL_S, Progress
from tasks.serving.pool import ReplicaPool, replica_down
from tasks.serving.server import Endpoint

MAX_STOPS = 4  # stop sequences a request may carry (OpenAI's limit, which vLLM enforces)


class ChatRequest(TypedDict, total=False):
    """What a rollout puts in one request beside the model and the sampling parameters: chat messages
    (with tools), or with `plain` a text completion of `prompt`."""

    messages: list[Any]
    prompt: str
    plain: bool
    seed: int
    stop: list[str] | None
    tools: list[dict[str, Any]]
    tool_choice: str | dict[str, Any]


@dataclass
class CollectContext:
    """What every batch of a run shares (not part of any cache key)."""

    run_id: str
    run_dir: str
    endpoint: Endpoint | None  # None when every batch is cached: such a collection sends no request
    model_fingerprint: str
    sampling: SamplingConfig
    collection: CollectionConfig
    store: Store
    # awaited before retrying a failed request: the server watchdog blocks here while it restarts
    # the server, and raises if it cannot
    server_ready: Callable[[], Awaitable[None]] | None = None
    limiter: Limiter | None = None
    # set by the first configuration failure (wrong model name, key, option): every later request of
    # the run fails at once with it instead of asking the server the same wrong question again
    abort: RolloutFailed | None = None
    # rollouts counted as they finish (collect_all reports it); every `progress_interval_s` seconds
    # it is reported and each open batch snapshots its finished rollouts
    progress: Progress = field(default_factory=lambda: Progress(0))
    progress_interval_s: float = PROGRESS_INTERVAL_S
    # which open batches still have rollouts waiting for their first request (the scheduler opens the
    # next batch once none are left)
    feed: Feed = field(default_factory=Feed)
    # how the model marks its reasoning: completions are split at these tags where the server did not split them
    reasoning: ThinkTags = field(default_factory=ThinkTags)
    # whether the server answers /tokenize (vLLM's route: counts the reasoning tokens a server without a reasoning
    # parser does not); False after the first refusal, so a server without the route is asked once
    tokenize: bool = True
    _pool: ReplicaPool | None = None

    @property
    def server(self) -> Endpoint:
        """The endpoint requests go to."""
        if self.endpoint is None:
            raise RuntimeError(f"run {self.run_id}: a collection of cached batches has no endpoint to send requests to")
        return self.endpoint

    def pool(self) -> ReplicaPool:
        """The endpoint's replicas (one for a single server), each with its OpenAI client. The clients do
        not retry: request_with_retries does, also waiting for a server restart or another replica."""
        if self._pool is None:
            self._pool = ReplicaPool(self.server.urls, self.server.api_key, self.collection.request_timeout_s)
        return self._pool

    async def aclose(self) -> None:
        """Close the clients and stop the replica probe (the end of a collection)."""
        if self._pool is not None:
            await self._pool.aclose()
            self._pool = None

    def requests(self) -> Limiter:
        """The run-wide limit on requests in flight (shared by every batch)."""
        if self.limiter is None:
            self.limiter = make_limiter(self.collection.concurrency)
        return self.limiter


async def request_with_retries(ctx: CollectContext, *, plain: bool = False, **kwargs: Any) -> Any:
    """A chat completion, or with `plain` a (legacy) text completion of `prompt`.

    Transient errors (connection, timeout, 429, 5xx) are retried with jittered exponential backoff and
    raise RolloutFailed when they persist; configuration errors (401, 403, 404, a rejected option)
    raise RolloutFailed at once and stop the run's other requests; a prompt that does not fit the
    context raises the openai error itself, for the rollout to record as the model's outcome. With
    several replicas, a request whose replica stopped answering goes to another at once (the replica
    is left out until it answers again); only when none is left does it wait and count a retry."""
    attempt = redirects = 0
    secrets = (ctx.server.api_key,)
    pool = ctx.pool()
    last = None  # the replica that just failed this request: the next try goes elsewhere
    while True:
        if ctx.abort is not None:
            raise ctx.abort
        replica = pool.pick(avoid=last)
        if replica is None:  # every replica is out: wait for one as for a transient error
            attempt += 1
            if attempt > ctx.collection.max_request_retries:
                raise RolloutFailed("transient", f"no replica answers: {pool.down_reasons()}"[:500])
            await pool.wait_for_any(min(20.0, 0.5 * 2**attempt))
            continue
        try:
            with pool.using(replica):
                if plain:
                    return await replica.client.completions.create(**kwargs)
                return await replica.client.chat.completions.create(**kwargs)
        except (openai.APIStatusError, openai.APIConnectionError) as exc:
            kind = classify(exc)
            if kind == "outcome":
                raise
            failure = RolloutFailed(kind, describe(exc, replica.url, secrets))
            if kind == "configuration":
                ctx.abort = ctx.abort or failure
                raise failure from None
            if pool.many and replica_down(exc):
                pool.failed(replica, exc, failure.message[:200])
                last = replica
                redirects += 1
                if redirects <= 2 * len(pool.replicas) and pool.pick() is not None:
                    continue  # at once, on a replica that answers
            attempt += 1
            if attempt > ctx.collection.max_request_retries:
                raise failure from None
        if ctx.server_ready is not None:
            await ctx.server_ready()
        await asyncio.sleep(min(20.0, 0.5 * 2**attempt) * random.uniform(0.5, 1.0))


def cut_at_stops(text: str, stops: list[str]) -> str:
    """The text up to the first of `stops` (the server's own stop handling: the stop string is dropped)."""
    cut = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=len(text))
    return text[:cut]


async def _chat(
    ctx: CollectContext, sampling: SamplingConfig, first: bool = True, **request: Unpack[ChatRequest]
) -> tuple[Any, float]:
    """One request (chat, or a text completion with `plain=True`) under the run's concurrency limit:
    (response, latency in seconds). `first`: the rollout's first request (its batch's feed counts it)."""
    position = request_priority.get()
    async with ctx.requests().slot(position) as ticket:
        if first:
            ctx.feed.admitted(position)
        started = time.perf_counter()
        response = await request_with_retries(ctx, model=ctx.server.model, **request, **sampling.as_request())
        latency = time.perf_counter() - started
        ticket.tokens = response.usage.completion_tokens if response.usage else 0
    return response, latency


def _outcome_error(ctx: CollectContext, exc: openai.APIStatusError) -> str:
    """A request the model could not answer (a conversation grown past the context), as the record's error."""
    return describe(exc, ctx.server.base_url, (ctx.server.api_key,))


def _prompt_too_long(ctx: CollectContext, exc: openai.APIStatusError, prompt_id: str) -> RolloutFailed:
    """The benchmark's own prompt does not fit: a set-up problem (managed servers count prompts at plan
    time; an external endpoint's context is not known then), never the model's answer nor a cached result."""
    failure = RolloutFailed(
        "configuration",
        f"the prompt of {prompt_id} does not fit the server's context ({_outcome_error(ctx, exc)})"[:450]
        + ": raise the server's max_model_len, lower max_tokens, or set benchmarks.N.on_long_prompt: skip",
    )
    ctx.abort = ctx.abort or failure
    return failure


async def rollout(ctx: CollectContext, env: Env, batch: Batch, row: dict[str, Any], repeat: int) -> RolloutRow:
    """One rollout -> one scored record. A conversation that outgrows the context is recorded (the model's
    outcome); any other request failure, the first prompt's not fitting included, raises RolloutFailed
    (see tasks.collection.failures)."""
    prompt_id = env.prompt_id(row)
    sampling = batch.sampling or ctx.sampling  # the benchmark's own max_tokens, where it sets one
    timeout = ctx.collection.env_timeout_s
    seed = rollout_seed(sampling.seed, prompt_id, repeat)
    record: RolloutRow = {
        "run_id": ctx.run_id,
        "benchmark": batch.benchmark,
        "env_version": env.version,
        "batch_key": batch.key,
        "prompt_id": prompt_id,
        "repeat": repeat,
        "seed": seed,
        "model": ctx.server.model,
        "model_fingerprint": ctx.model_fingerprint,
        "sampling": sampling.model_dump(mode="json"),
        "reference": await env_call(env, "reference", timeout, env.reference, row),
        "turns": 0,
        "tool_calls": 0,
        "reward": 0.0,
        "success": False,
        "info": {},
    }
    if isinstance(env, MultiTurnEnv):
        return await _multi_turn(ctx, env, row, seed, record, sampling)
    assert isinstance(env, SingleTurnEnv)
    prompt = await env_call(env, "prompt", timeout, env.prompt, row)
    messages: list[dict[str, str]] = []  # a chat's (a plain completion sends none)
    if prompt is None:
        messages = await env_call(env, "messages", timeout, env.messages, row)
        record["messages"] = messages
        request = ChatRequest(messages=messages)
    else:
        # Plain completion: the prompt string takes the messages column's place (a JSON string, not a list).
        record["messages"] = to_json(prompt)
        request = ChatRequest(prompt=prompt, plain=True)
    try:
        stops = env.stop() or []
        # the OpenAI API (and vLLM) take at most MAX_STOPS stop sequences: the rest are cut here
        request.update(seed=seed, stop=stops[:MAX_STOPS] or None)
        response, latency = await _chat(ctx, sampling, **request)
    except openai.APIStatusError as exc:  # only "too long" gets here: the prompt alone is over the context
        raise _prompt_too_long(ctx, exc, record["prompt_id"]) from None
    choice = response.choices[0]
    opened = opened_by_prompt(ctx.reasoning, sampling.extra_body)
    if prompt is None:
        split = from_server(
            reasoning_of(choice.message), choice.message.content, choice.finish_reason, ctx.reasoning, opened
        )
    else:
        split = from_server(None, choice.text, choice.finish_reason, ctx.reasoning, opened)
    # stop sequences past the API's limit are cut here, from the answer (lm-eval cuts after removing the thinking)
    completion = cut_at_stops(split.answer, stops[MAX_STOPS:])
    finish_reason = "stop" if len(completion) < len(split.answer) else choice.finish_reason
    split = dataclasses.replace(split, answer=completion)
    score = await score_answer(env, row, split, ctx.reasoning, timeout)
    usage = response.usage
    if prompt is None:
        transcript: Any = [*messages, assistant_turn(completion, split.reasoning)]
    else:  # the whole text the model saw and wrote, as a JSON string
        transcript = to_json(prompt + (choice.text or ""))
    return _scored(
        record,
        score,
        completion=completion,
        transcript=transcript,
        finish_reason=finish_reason,
        prompt_tokens=usage.prompt_tokens if usage else None,
        turns=1,
        latency_s=latency,
        **token_split(usage, split, await count_reasoning_tokens(ctx, usage, split)),
    )


def reasoning_of(message: Any) -> str | None:
    """The reasoning a server split off the answer: vLLM's `reasoning` field (`reasoning_content` on older vLLM,
    SGLang and DeepSeek's API); None when the server did not split (no parser, or thinking off)."""
    extra = getattr(message, "model_extra", None) or {}
    for name in ("reasoning", "reasoning_content"):
        value = extra.get(name, getattr(message, name, None))
        if isinstance(value, str):
            return value
    return None


async def count_tokens(ctx: CollectContext, text: str) -> int | None:
    """The tokens of `text` by the server's tokenizer (vLLM's /tokenize), or None: where the server has no such
    route (then it is not asked again), or the request failed. One small request, outside the generation limit."""
    if not ctx.tokenize or not text:
        return 0 if not text else None
    replica = ctx.pool().pick()
    if replica is None:
        return None
    root = replica.url.rstrip("/").removesuffix("/v1")
    body = {"model": ctx.server.model, "prompt": text, "add_special_tokens": False}
    try:
        found = await replica.client.post(f"{root}/tokenize", cast_to=dict, body=body)
        return int(found["count"])
    except openai.APIStatusError as exc:
        if exc.status_code in (404, 405, 501):
            ctx.tokenize = False
            get_logger().info("the server has no /tokenize: reasoning tokens are counted only by a reasoning parser")
        return None
    except (openai.APIError, KeyError, TypeError, ValueError):  # a transient failure: this count is unknown
        return None


async def count_reasoning_tokens(ctx: CollectContext, usage: Any, split: Split) -> int | None:
    """How many generated tokens were reasoning: the server's count where its reasoning parser made one, else the
    reasoning text counted by the server's tokenizer (its tags left out, as vLLM counts); 0 without reasoning."""
    if split.reasoning is None:
        return 0
    details = getattr(usage, "completion_tokens_details", None) if usage else None
    counted = getattr(details, "reasoning_tokens", None) if details is not None else None
    # deepseek_r1's parser counts 0 when the template opened the block: a count of 0 for a reasoning is no count
    if isinstance(counted, int) and (counted > 0 or not split.reasoning):
        return counted
    return await count_tokens(ctx, split.reasoning)


def token_split(usage: Any, split: Split, reasoning: int | None) -> dict[str, Any]:
    """Generated tokens, and how many of them were reasoning (`reasoning`, see count_reasoning_tokens) and answer."""
    total = usage.completion_tokens if usage else None
    if reasoning is not None and total is not None:
        reasoning = min(reasoning, total)
    answer = total - reasoning if total is not None and reasoning is not None else None
    return {
        "completion_tokens": total,
        "reasoning": split.reasoning,
        "reasoning_tokens": reasoning,
        "answer_tokens": answer,
        "ended_in_reasoning": split.ended_in_reasoning,
    }


def assistant_turn(answer: str | None, reasoning: str | None) -> dict[str, Any]:
    """The assistant's turn as the transcript keeps it: the answer as its content, the reasoning beside it."""
    turn: dict[str, Any] = {"role": "assistant", "content": answer}
    if reasoning is not None:
        turn["reasoning"] = reasoning
    return turn


def _scored(record: RolloutRow, score: Score, **fields: Any) -> RolloutRow:
    """The record completed with the request's fields and the env's verdict."""
    record.update(**fields)  # the request's fields, by their RolloutRow names
    record.update(reward=score.reward, success=score.success, parsed_answer=score.parsed_answer, info=score.info)
    return record


def _assistant_message(message: Any, answer: str | None) -> AssistantMessage:
    """The assistant turn as a plain chat message with its answer as the content (tool calls kept, so the next
    request carries them)."""
    out: AssistantMessage = {"role": "assistant", "content": answer if answer or message.content is not None else None}
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in message.tool_calls
        ]
    return out


async def _multi_turn(
    ctx: CollectContext,
    env: MultiTurnEnv,
    row: dict[str, Any],
    seed: int,
    record: RolloutRow,
    sampling: SamplingConfig,
) -> RolloutRow:
    """Play an episode: request, let the env step on the assistant turn, append its replies, repeat.

    Token counts and latency are summed over turns (each turn re-sends the conversation, so prompt
    tokens grow with the number of turns); the concurrency slot is held per request, not per episode.
    """
    timeout = ctx.collection.env_timeout_s
    episode = await env_call(env, "reset", timeout, env.reset, row)
    messages = list(episode.messages)  # the transcript: assistant turns keep their reasoning beside the answer
    record["messages"] = list(episode.messages)
    tools, tool_choice = env.tools(), env.tool_choice()
    opened = opened_by_prompt(ctx.reasoning, sampling.extra_body)
    prompt_tokens = completion_tokens = 0
    thought: int | None = 0  # reasoning tokens over the turns (None once a turn's are unknown)
    latency = 0.0
    finish_reason = None
    completion = ""
    last = Split(None, "", False)
    for turn in range(env.max_turns):
        # earlier reasoning is not sent back: the answers are the conversation (a template that wants the
        # reasoning of earlier turns, as Qwen3's inside a tool loop, gets none)
        sent = [{k: v for k, v in m.items() if k != "reasoning"} for m in messages]
        kwargs: ChatRequest = {"messages": sent, "seed": (seed + turn) & 0x7FFFFFFF}
        if tools:
            kwargs["tools"] = tools
            if tool_choice is not None:
                kwargs["tool_choice"] = tool_choice
        started = time.perf_counter()
        try:
            response, took = await _chat(ctx, sampling, turn == 0, **kwargs)
        except openai.APIStatusError as exc:  # the conversation outgrew the context: the episode ends
            if turn == 0:  # the opening prompt itself: not the model's doing
                raise _prompt_too_long(ctx, exc, record["prompt_id"]) from None
            record["error"] = _outcome_error(ctx, exc)
            latency += time.perf_counter() - started
            break
        latency += took
        record["turns"] = turn + 1
        choice = response.choices[0]
        finish_reason = choice.finish_reason
        last = from_server(reasoning_of(choice.message), choice.message.content, finish_reason, ctx.reasoning, opened)
        counts = token_split(response.usage, last, await count_reasoning_tokens(ctx, response.usage, last))
        if response.usage:
            prompt_tokens += response.usage.prompt_tokens
            completion_tokens += response.usage.completion_tokens
        turn_reasoning = counts["reasoning_tokens"]
        thought = None if thought is None or turn_reasoning is None else thought + turn_reasoning
        assistant = _assistant_message(choice.message, last.answer)
        completion = last.answer or completion
        messages.append({**assistant, **({"reasoning": last.reasoning} if last.reasoning is not None else {})})
        # the environment reads the answer only (tool calls included), never the reasoning
        step = checked_turn(env, await env_call(env, "step", timeout, episode.step, assistant))
        messages.extend(step.messages)
        if step.done:
            break
    score = checked_score(env, "result", await env_call(env, "result", timeout, episode.result))
    return _scored(
        record,
        score,
        completion=completion,
        transcript=messages,
        finish_reason=finish_reason,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        reasoning=last.reasoning,
        reasoning_tokens=thought,
        answer_tokens=None if thought is None else completion_tokens - thought,
        ended_in_reasoning=last.ended_in_reasoning,
        tool_calls=int(score.info.get("tool_calls", 0)),
        latency_s=latency,
    )
