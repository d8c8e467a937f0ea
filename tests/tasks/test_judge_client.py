"""The judge client without a model: its cache keys, that an answer on disk is used with no server, that a failed
request writes nothing and fails as a judge error, and that a run with a judged task but no judge fails at once."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from pathlib import Path

import pytest

from core.config import EvalConfig, JudgeSampling
from core.store import Store
from envs.judge import JudgeFailed
from errors import ConfigError
from flows.plan import preflight
from tasks.judging import client as judge_client
from tasks.judging.client import JudgeClient, answer_url, judge_identity
from tasks.serving.preflight import EndpointError
from tasks.serving.server import Endpoint

REPO_ROOT = Path(__file__).resolve().parents[2]
MESSAGES = [{"role": "user", "content": "Is 4 right? CORRECT or INCORRECT"}]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def client(store: Store, url: str = "http://127.0.0.1:9/v1", calls: list[int] | None = None) -> JudgeClient:
    async def endpoint() -> Endpoint:
        if calls is not None:
            calls.append(1)
        return Endpoint(url, "judge", "secret-key")

    return JudgeClient(judge_identity("model-fp", JudgeSampling()), JudgeSampling(), store, endpoint, timeout_s=5)


def test_the_identity_and_keys_follow_the_judge_the_question_and_the_sample(tmp_path: Path) -> None:
    base = judge_identity("fp", JudgeSampling())
    assert base == judge_identity("fp", JudgeSampling())
    assert base != judge_identity("other", JudgeSampling())
    assert base != judge_identity("fp", JudgeSampling(max_tokens=100))
    c = client(Store(str(tmp_path)))
    assert c.key(MESSAGES, 0) == c.key([dict(m) for m in MESSAGES], 0)
    assert len({c.key(MESSAGES, 0), c.key(MESSAGES, 1), c.key([{"role": "user", "content": "x"}], 0)}) == 3


def test_a_cached_answer_is_used_without_starting_or_asking_any_server(tmp_path: Path) -> None:
    store, calls = Store(str(tmp_path)), []
    c = client(store, calls=calls)
    store.write_bytes(answer_url(store, c.key(MESSAGES, 0)), json.dumps({"text": "CORRECT"}).encode())
    assert asyncio.run(c.ask(MESSAGES, 0)) == "CORRECT"
    assert calls == [] and (c.counts.asked, c.counts.cached, c.counts.requests) == (1, 1, 0)


def test_a_judge_that_cannot_be_reached_fails_as_a_judge_error_and_caches_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(judge_client, "BACKOFF_S", 0.01)
    store = Store(str(tmp_path))
    c = client(store, f"http://127.0.0.1:{closed_port()}/v1")
    with pytest.raises(JudgeFailed, match=r"judge request failed \(transient\): APIConnectionError") as info:
        asyncio.run(c.ask(MESSAGES, 0))
    assert "secret-key" not in str(info.value)
    assert c.counts.requests == judge_client.RETRIES + 1 and c.counts.failed == 1
    assert not (tmp_path / "cache" / "judge").exists()


def test_a_scorer_on_another_event_loop_is_answered_through_the_clients_loop(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    c = client(store)
    store.write_bytes(answer_url(store, c.key(MESSAGES, 0)), json.dumps({"text": "INCORRECT"}).encode())
    found: list[str] = []

    async def main() -> None:
        await c.ask(MESSAGES, 0)  # the client's loop is this one
        thread = threading.Thread(target=lambda: found.append(asyncio.run(c.ask(MESSAGES, 0))))
        thread.start()
        while thread.is_alive():
            await asyncio.sleep(0.01)

    asyncio.run(main())
    assert found == ["INCORRECT"] and c.counts.asked == 2


def test_a_judged_task_without_a_judge_fails_before_anything_starts(tmp_path: Path) -> None:
    config = EvalConfig.model_validate({
        "benchmarks": [{"task": str(REPO_ROOT / "examples/tasks/judged_qa.yaml")}],
        "store": {"url": str(tmp_path / "store")},
        "server": {"mode": "external", "base_url": "http://127.0.0.1:9/v1"},
    })  # fmt: skip
    with pytest.raises(ConfigError, match=r"benchmarks\.0 \(judged_qa\) is scored by a judge model: set `judge:`"):
        preflight(config, probe=False)


def test_an_unreachable_external_judge_fails_before_anything_starts_naming_its_field(tmp_path: Path) -> None:
    config = EvalConfig.model_validate({
        "benchmarks": [{"task": str(REPO_ROOT / "examples/tasks/judged_qa.yaml")}],
        "store": {"url": str(tmp_path / "store")},
        "server": {"mode": "external", "base_url": "http://127.0.0.1:9/v1"},
        "judge": {"server": {"mode": "external", "base_url": f"http://127.0.0.1:{closed_port()}/v1"}},
    })  # fmt: skip
    with pytest.raises(
        EndpointError, match=r"^judge\.server\.base_url http://127\.0\.0\.1:\d+/v1: .*fix judge\.server"
    ):
        preflight(config, probe=False)


def test_a_judge_server_that_does_not_start_is_started_once_and_every_question_fails_as_a_judge_error(
    tmp_path: Path,
) -> None:
    starts: list[int] = []

    async def endpoint() -> Endpoint:
        starts.append(1)
        raise RuntimeError("vLLM exited during start-up; its log: ...")

    c = JudgeClient("judge", JudgeSampling(), Store(str(tmp_path)), endpoint)

    async def main() -> list[BaseException | str]:
        questions = [[{"role": "user", "content": f"q{i}"}] for i in range(5)]
        return await asyncio.gather(*(c.ask(q) for q in questions), return_exceptions=True)

    outcomes = asyncio.run(main())
    assert starts == [1] and all(isinstance(o, JudgeFailed) for o in outcomes)
    assert "the judge's server did not start: RuntimeError: vLLM exited during start-up" in str(outcomes[0])
