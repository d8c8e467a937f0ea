"""The judge a run's scorers ask (envs.judge.Judge): answers cached by content in the run store, requests to the
judge's server (started on the first answer not cached), transient failures retried, the rest a JudgeFailed.

A judge answer's key is the judge's identity (its model fingerprint and server settings), the chat messages (the
rendered rubric) and the sampling, with the sample's number: rescoring with the same judge sends no request, and
a rubric change sends only the new questions. Only an answer the judge gave is ever written, one small JSON file
per answer the moment it arrives (`cache/judge/<key[:2]>/<key>.json`), so a judge that dies mid-phase loses none it
had given and a failed request leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

import openai
from openai.types.chat import ChatCompletionMessageParam

from core.config import JudgeSampling
from core.logs import get_logger
from core.reasoning import ThinkTags, split_text
from core.store import Store
from envs.base import canonical_json
from envs.judge import Judge, JudgeFailed
from tasks.collection.failures import classify, describe
from tasks.serving.server import Endpoint

RETRIES = 3  # of a transient judge request failure (connection, timeout, 429, 5xx), with backoff
BACKOFF_S = 1.0


@dataclass
class JudgeCounts:
    """What the judge did in a phase: answers asked for, found cached (or shared with the same question asked at
    the same time), requested (sent, retries included), failed."""

    asked: int = 0
    cached: int = 0
    requests: int = 0
    failed: int = 0
    completion_tokens: int = 0


def judge_identity(model_fingerprint: str, sampling: JudgeSampling) -> str:
    """What makes a judge's answers the ones they are, besides the question: its samples fingerprint (model and
    server settings) and its sampling. Enters the cache key of judged batches and of every judge answer."""
    payload = {"model": model_fingerprint, "sampling": sampling.key_fields()}
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def answer_url(store: Store, key: str) -> str:
    return store.path("cache", "judge", key[:2], f"{key}.json")


@dataclass
class JudgeClient(Judge):
    """The run's judge for its judging phase. `endpoint` is awaited on the first answer not cached (a managed
    judge's server starts then, so a phase whose answers are all cached starts none)."""

    fingerprint: str
    sampling: JudgeSampling
    store: Store
    endpoint: Callable[[], Awaitable[Endpoint]]
    concurrency: int = 32
    timeout_s: float = 300.0
    tags: ThinkTags = field(default_factory=ThinkTags)
    counts: JudgeCounts = field(default_factory=JudgeCounts)
    _loop: asyncio.AbstractEventLoop | None = field(default=None, init=False, repr=False)
    _client: openai.AsyncOpenAI | None = field(default=None, init=False, repr=False)
    _served: Endpoint | None = field(default=None, init=False, repr=False)
    _limit: asyncio.Semaphore | None = field(default=None, init=False, repr=False)
    _starting: asyncio.Lock | None = field(default=None, init=False, repr=False)
    _inflight: dict[str, asyncio.Future[str]] = field(default_factory=dict, init=False, repr=False)
    _broken: str | None = field(default=None, init=False, repr=False)

    def key(self, messages: list[dict[str, str]], sample: int) -> str:
        payload = {"judge": self.fingerprint, "messages": messages, "sample": sample}
        return hashlib.sha256(canonical_json(payload).encode()).hexdigest()

    async def ask(self, messages: list[dict[str, str]], sample: int = 0) -> str:
        """The judge's answer (cached, or asked now). A scorer on another event loop (an environment from outside
        evalflow runs in a thread of its own) is answered through this one's loop, where the client lives."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        if asyncio.get_running_loop() is not self._loop:
            future = asyncio.run_coroutine_threadsafe(self._ask(messages, sample), self._loop)
            return await asyncio.wrap_future(future)
        return await self._ask(messages, sample)

    async def _ask(self, messages: list[dict[str, str]], sample: int) -> str:
        self.counts.asked += 1
        key = self.key(messages, sample)
        url = answer_url(self.store, key)
        if key in self._inflight:  # the same question asked by another rollout (an identical answer): one request
            self.counts.cached += 1
            return await asyncio.shield(self._inflight[key])
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            text = await self._answer(messages, key, sample, url)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: a question nobody else asked logs no "never retrieved"
            raise
        finally:
            del self._inflight[key]
        future.set_result(text)
        return text

    async def _answer(self, messages: list[dict[str, str]], key: str, sample: int, url: str) -> str:
        cached = await asyncio.to_thread(self._read, url)
        if cached is not None:
            self.counts.cached += 1
            return cached
        if self._limit is None:
            self._limit = asyncio.Semaphore(self.concurrency)
        async with self._limit:
            text, record = await self._request(messages, key, sample)
        await asyncio.to_thread(self.store.write_bytes, url, json.dumps(record, sort_keys=True).encode())
        return text

    def _read(self, url: str) -> str | None:
        if not self.store.exists(url):
            return None
        try:
            record = json.loads(self.store.read_bytes(url))
        except (OSError, ValueError):
            return None
        return record.get("text") if isinstance(record, dict) and isinstance(record.get("text"), str) else None

    async def _connect(self) -> tuple[openai.AsyncOpenAI, Endpoint]:
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._broken is not None:  # the judge's server did not start: no second start per question
                raise JudgeFailed(self._broken)
            if self._client is None or self._served is None:
                try:
                    served = await self.endpoint()
                except Exception as exc:
                    self._broken = " ".join(f"the judge's server did not start: {type(exc).__name__}: {exc}".split())
                    raise JudgeFailed(self._broken[:500]) from None
                self._client = openai.AsyncOpenAI(
                    base_url=served.base_url, api_key=served.api_key, timeout=self.timeout_s, max_retries=0
                )
                self._served = served
        return self._client, self._served

    async def _request(self, messages: list[dict[str, str]], key: str, sample: int) -> tuple[str, dict[str, Any]]:
        client, served = await self._connect()
        seed = int.from_bytes(hashlib.sha256(f"{self.sampling.seed}:{key}".encode()).digest()[:4], "big") & 0x7FFFFFFF
        for attempt in range(RETRIES + 1):
            self.counts.requests += 1
            try:
                response = await client.chat.completions.create(
                    model=served.model, messages=cast("list[ChatCompletionMessageParam]", messages),
                    temperature=self.sampling.temperature,
                    top_p=self.sampling.top_p, max_tokens=self.sampling.max_tokens, seed=seed,
                    extra_body=self.sampling.extra_body or None,
                )  # fmt: skip
            except Exception as exc:
                kind = classify(exc)
                line = describe(exc, served.base_url, (served.api_key,))
                if kind == "transient" and attempt < RETRIES:
                    get_logger().warning("judge request failed (%s), retrying: %s", kind, line)
                    await asyncio.sleep(BACKOFF_S * 2**attempt * (0.5 + random.random()))
                    continue
                self.counts.failed += 1
                raise JudgeFailed(f"judge request failed ({kind}): {line}") from None
            choice = response.choices[0]
            text = choice.message.content or ""
            split = split_text(text, self.tags)
            answer = "" if split.ended_in_reasoning else split.answer  # a judge cut off while thinking gave no verdict
            tokens = response.usage.completion_tokens if response.usage else 0
            self.counts.completion_tokens += tokens
            record = {"text": answer, "finish_reason": choice.finish_reason, "completion_tokens": tokens,
                      "sample": sample, "judge": self.fingerprint}  # fmt: skip
            return answer, record
        raise AssertionError("unreachable")  # the loop returns or raises

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
