"""A request failure is never a result: what counts as the model's outcome, what fails a batch (and is
retried, never cached), what a failed batch keeps, and what Prefect may write about it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pyarrow.parquet as pq
import pytest

from core.config import CollectionConfig, SamplingConfig
from core.store import Store
from envs.registry import get_env
from tasks.collection.batch import collect_batch_impl, partial_url
from tasks.collection.failures import (
    BatchFailed,
    FailureSummary,
    RolloutFailed,
    classify,
    describe,
    persisted_form,
)
from tasks.collection.plan import Batch, batch_url
from tasks.collection.rollout import CollectContext
from tasks.collection.schedule import Collected
from tasks.serving.server import Endpoint

KEY = "sk-evalflow-test-0123456789abcdef"
URL = "http://127.0.0.1:1/v1"


def status_error(status: int, message: str) -> openai.APIStatusError:
    request = httpx.Request("POST", f"{URL}/chat/completions", headers={"authorization": f"Bearer {KEY}"})
    response = httpx.Response(status, json={"object": "error", "message": message}, request=request)
    client = openai.OpenAI(base_url=URL, api_key=KEY)
    return client._make_status_error_from_response(response)


@pytest.mark.parametrize(
    ("status", "message", "kind"),
    [
        (404, "The model `tiny` does not exist.", "configuration"),
        (401, "Unauthorized", "configuration"),
        (403, "Forbidden", "configuration"),
        (400, "This model's maximum context length is 2048 tokens. However, you requested 2100", "outcome"),
        (400, "'max_tokens' or 'max_completion_tokens' is too large: 320.", "outcome"),
        (400, '"auto" tool choice requires --enable-auto-tool-choice', "configuration"),
        (422, "top_k: Input should be a valid integer", "configuration"),
        (429, "slow down", "transient"),
        (500, "boom", "transient"),
        (503, "overloaded", "transient"),
    ],
)
def test_classify_status_errors(status: int, message: str, kind: str) -> None:
    assert classify(status_error(status, message)) == kind


def test_connection_and_timeout_errors_are_transient() -> None:
    request = httpx.Request("POST", URL)
    assert classify(openai.APIConnectionError(request=request)) == "transient"
    assert classify(openai.APITimeoutError(request=request)) == "transient"


def test_describe_names_the_server_and_masks_the_key() -> None:
    line = describe(status_error(404, f"model x not found (key {KEY})"), URL, (KEY,))
    assert line.startswith(f"HTTP 404 NotFoundError from {URL}: model x not found")
    assert KEY not in line and "***" in line


def test_prefect_writes_only_evalflow_lines_for_a_failed_batch() -> None:
    summary = FailureSummary.of("gsm8k", 3, 8, [RolloutFailed("configuration", "HTTP 404 from x")])
    assert persisted_form(BatchFailed(summary)) == {"failed": "BatchFailed", "message": summary.line()}
    assert persisted_form(status_error(404, "nope")) == {"failed": "NotFoundError"}  # not the request
    with pytest.raises(TypeError):
        persisted_form(object())


def failed(kind: str, n: int, size: int = 10) -> BatchFailed:
    return BatchFailed(FailureSummary.of("gsm8k", 0, size, [RolloutFailed(kind, "x")] * n))  # type: ignore[arg-type]


def test_run_status_from_its_failures() -> None:
    assert Collected([], [], 100).status(0.05).state == "complete"
    assert Collected([], [failed("transient", 5)], 100).status(0.05).state == "incomplete"
    over = Collected([], [failed("transient", 6)], 100).status(0.05)
    assert over.state == "failed" and "collection.max_failed_share" in over.reason
    one = Collected([], [failed("configuration", 1)], 1000).status(0.05)
    assert one.state == "failed" and one.reason.startswith("configuration failure")
    assert Collected([], [failed("transient", 1)], 100).status(0.0).state == "failed"


class Server:
    """An httpx transport that answers chat completions per prompt: `fail` maps a question to a status
    (unit tests of the batch's bookkeeping; the end-to-end tests use the real vLLM server)."""

    def __init__(self, fail: dict[str, int]) -> None:
        self.fail = fail
        self.requests: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        question = body["messages"][-1]["content"]
        self.requests.append(question)
        for marker, status in self.fail.items():
            if marker in question:
                return httpx.Response(status, json={"object": "error", "message": f"status {status}"})
        answer = {"role": "assistant", "content": "The answer is 42. #### 42"}
        return httpx.Response(200, json={
            "id": "c", "object": "chat.completion", "created": 0, "model": "tiny",
            "choices": [{"index": 0, "message": answer, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
        })  # fmt: skip


def context(tmp_path: Path, server: Server) -> CollectContext:
    ctx = CollectContext(
        run_id="r1",
        run_dir=str(tmp_path / "runs" / "r1"),
        endpoint=Endpoint(URL, "tiny", KEY),
        model_fingerprint="fp",
        sampling=SamplingConfig(max_tokens=8),
        collection=CollectionConfig(concurrency=4, max_request_retries=1),
        store=Store(str(tmp_path)),
    )
    ctx.pool().replicas[0].client = openai.AsyncOpenAI(
        base_url=URL, api_key=KEY, max_retries=0, http_client=httpx.AsyncClient(transport=httpx.MockTransport(server))
    )
    return ctx


def batch(n: int = 4) -> Batch:
    rows = tuple({"id": f"q{i}", "question": f"question {i}?", "answer": "#### 42"} for i in range(n))
    return Batch("gsm8k", 0, "key-0", rows, (0,))


def test_wrong_model_name_fails_the_batch_once_and_writes_nothing(tmp_path: Path) -> None:
    server = Server({"question": 404})
    ctx = context(tmp_path, server)
    with pytest.raises(BatchFailed) as info:
        asyncio.run(collect_batch_impl(ctx, get_env("gsm8k"), batch(4)))
    assert not info.value.transient and info.value.summary.failed == 4
    assert "HTTP 404" in str(info.value) and KEY not in str(info.value)
    assert len(server.requests) <= ctx.collection.concurrency  # the first 404 stops the rest
    assert not Path(batch_url(ctx.run_dir, batch(4))).exists()
    assert info.value.kept_url is None


def test_a_failed_batch_keeps_its_finished_rollouts_and_a_retry_sends_only_the_rest(tmp_path: Path) -> None:
    flaky = Server({"question 1?": 503, "question 3?": 503})
    ctx = context(tmp_path, flaky)
    with pytest.raises(BatchFailed) as info:
        asyncio.run(collect_batch_impl(ctx, get_env("gsm8k"), batch(4)))
    assert info.value.transient and info.value.summary.failed == 2
    kept = pq.read_table(info.value.kept_url).to_pylist()
    assert sorted(r["prompt_id"] for r in kept) == ["q0", "q2"]
    assert not Path(batch_url(ctx.run_dir, batch(4))).exists()  # a finished batch file only when all finished

    healthy = Server({})
    retry = context(tmp_path, healthy)
    result = asyncio.run(collect_batch_impl(retry, get_env("gsm8k"), batch(4)))
    assert sorted(q.split("?")[0] for q in healthy.requests) == ["question 1", "question 3"]
    rows = pq.read_table(result.url).to_pylist()
    assert [r["prompt_id"] for r in rows] == ["q0", "q1", "q2", "q3"] and result.errors == 0
    assert not Path(partial_url(retry.store, batch(4))).exists()


def test_a_prompt_longer_than_the_context_fails_the_batch_and_is_never_a_result(tmp_path: Path) -> None:
    """Managed servers count prompts at plan time; an external one says it with its 400: the run stops
    (the model never saw the prompt, so there is nothing to score) and nothing is cached."""

    class TooLong(Server):
        def __call__(self, request: httpx.Request) -> Any:
            if "question 2?" in json.loads(request.content)["messages"][-1]["content"]:
                message = "This model's maximum context length is 2048 tokens. However, you requested 4000 tokens"
                return httpx.Response(400, json={"object": "error", "message": message})
            return super().__call__(request)

    ctx = context(tmp_path, TooLong({}))
    with pytest.raises(BatchFailed) as info:
        asyncio.run(collect_batch_impl(ctx, get_env("gsm8k"), batch(4)))
    assert not info.value.transient
    assert "the prompt of q2 does not fit the server's context (HTTP 400" in str(info.value)
    assert "set benchmarks.N.on_long_prompt: skip" in str(info.value)
    assert not Path(batch_url(ctx.run_dir, batch(4))).exists()


def test_a_cached_batch_that_recorded_request_failures_is_collected_again(tmp_path: Path) -> None:
    from tasks.collection.batch import write_batch
    from tasks.collection.plan import _holds_failures
    from tests.tasks.conftest import rollout

    store = Store(str(tmp_path))
    old = str(tmp_path / "old.parquet")  # as versions before failures were sorted cached a wrong model name
    write_batch(store, old, [rollout(error="NotFoundError: Error code: 404 - {'message': 'no model'}")])
    too_long = str(tmp_path / "too_long.parquet")
    write_batch(store, too_long, [rollout(error="HTTP 400 BadRequestError: maximum context length is 2048 tokens")])
    assert _holds_failures(store, old) and not _holds_failures(store, too_long)
