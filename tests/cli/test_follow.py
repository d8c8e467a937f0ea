"""`evalflow demo` / `evalflow local run` follow the flow run's logs: against a real Prefect server on loopback,
a flow run that logs while it is followed shows every line once, in order, then its final state."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from prefect import flow, get_run_logger

from ops import local

LINES = 40


@flow(name="chatty")
def chatty(n: int) -> None:
    logger = get_run_logger()
    for i in range(n):
        logger.info("line %03d", i)
        time.sleep(0.05)


def start_run(api: str) -> tuple[Any, threading.Thread]:
    """Create a flow run of `chatty`, then execute it in a thread (as a worker would)."""
    from prefect.client.orchestration import PrefectClient
    from prefect.flow_engine import run_flow
    from prefect.settings import PREFECT_API_URL, temporary_settings

    async def create() -> Any:
        async with PrefectClient(api) as client:
            return await client.create_flow_run(chatty, parameters={"n": LINES})

    flow_run = asyncio.run(create())

    def execute() -> None:
        with temporary_settings(updates={PREFECT_API_URL: api}):
            run_flow(chatty, flow_run=flow_run, parameters={"n": LINES})

    thread = threading.Thread(target=execute)
    thread.start()
    return flow_run, thread


def test_follow_prints_each_log_line_once_in_order_until_the_run_ends(
    prefect_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    api, _ = prefect_server
    monkeypatch.setenv("PREFECT_API_URL", api)
    flow_run, thread = start_run(api)
    out: list[str] = []
    final = asyncio.run(local.follow(flow_run.id, poll_s=0.3, timeout_s=120, out=out.append))
    thread.join(60)
    assert final.state.is_completed()
    ours = [line for line in out if "line 0" in line]
    assert [line.split("line ")[1] for line in ours] == [f"{i:03d}" for i in range(LINES)]
    assert all(re.fullmatch(r"\d\d:\d\d:\d\d INFO    line \d{3}", line) for line in ours)
    states = [line.split("state: ")[1] for line in out if " state: " in line]
    assert states[-1] == "Completed" and len(states) == len(set(states))


def test_the_follower_pages_and_never_repeats_a_line(prefect_server: tuple[str, Path]) -> None:
    api, _ = prefect_server
    flow_run, thread = start_run(api)
    thread.join(60)

    async def read() -> list[list[str]]:
        from prefect.client.orchestration import PrefectClient
        from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

        async with PrefectClient(api) as client:
            log_filter = LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run.id]))
            for _ in range(100):  # until the run's lines reached the API (sent in batches)
                if sum("line 0" in log.message for log in await client.read_logs(log_filter)) == LINES:
                    break
                await asyncio.sleep(0.3)
            follower = local.LogFollower(client, flow_run.id, page=7)
            reads = []
            for _ in range(3):
                reads.append(await follower.new_lines())
            return reads

    reads = asyncio.run(read())
    ours = [line for line in reads[0] if "line 0" in line]
    assert len(ours) == LINES and reads[1:] == [[], []]


def test_parameters_read_json_values_and_fall_back_to_text() -> None:
    assert local.parameters(['config={"sampling": {"max_tokens": 8}}', "run_name=nightly", "n=3"]) == {
        "config": {"sampling": {"max_tokens": 8}},
        "run_name": "nightly",
        "n": 3,
    }
    with pytest.raises(local.OpsError, match="KEY=VALUE"):
        local.parameters(["oops"])


def test_run_of_an_unknown_deployment_says_so_and_creates_nothing(
    prefect_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    api, _ = prefect_server
    monkeypatch.setenv("PREFECT_API_URL", api)
    assert local.run("eval/no-such-deployment", []) == 1
    out = capsys.readouterr().out
    assert "deployment 'eval/no-such-deployment' not found" in out and "state:" not in out
