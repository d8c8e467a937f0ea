"""The watcher prepares the next step while this one is evaluated, only where the server's cores are not the
host's, and a preparation that fails is left to the step's own run."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from core.config import EvalConfig
from flows.ahead import one_by_one, prepare_ahead, prepare_ahead_wanted


def test_the_next_step_is_prepared_while_this_one_is_evaluated_one_preparation_at_a_time() -> None:
    events: list[str] = []

    async def evaluate(step: int) -> int:
        events.append(f"eval {step} start")
        await asyncio.sleep(0.05)
        events.append(f"eval {step} end")
        return step * 10

    async def ahead(step: int) -> None:
        events.append(f"ahead {step} start")
        await asyncio.sleep(0.01)
        events.append(f"ahead {step} end")

    assert asyncio.run(one_by_one([1, 2, 3], evaluate, ahead)) == [10, 20, 30]
    # step 2's preparation runs inside step 1's evaluation, step 3's inside step 2's; nothing for a last step
    assert events.index("ahead 2 start") < events.index("eval 1 end")
    assert events.index("ahead 2 end") < events.index("eval 1 end")
    assert events.index("eval 2 start") < events.index("ahead 3 start") < events.index("eval 2 end")
    assert not any(e.startswith("ahead 1") for e in events) and events.count("ahead 3 start") == 1


def test_without_a_preparer_the_steps_are_only_evaluated_and_a_failed_evaluation_stops_the_preparation() -> None:
    assert asyncio.run(one_by_one([1, 2], lambda s: asyncio.sleep(0, result=s))) == [1, 2]
    started: list[int] = []
    cancelled: list[int] = []

    async def slow_ahead(step: int) -> None:
        started.append(step)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(step)
            raise

    async def failing(step: int) -> None:
        await asyncio.sleep(0.05)  # the next step's preparation is under way
        raise RuntimeError(f"step {step} failed")

    with pytest.raises(RuntimeError, match="step 1 failed"):
        asyncio.run(one_by_one([1, 2], failing, slow_ahead))
    assert started == [2] and cancelled == [2]  # not left running after the watcher stopped


def test_only_a_managed_server_on_gpus_leaves_the_cpus_to_preparing(monkeypatch: pytest.MonkeyPatch) -> None:
    base = {"model": {"source": "run/"}, "benchmarks": [{"name": "gsm8k"}]}
    assert prepare_ahead_wanted(EvalConfig.model_validate({**base, "server": {"runtime": "gpu"}}))
    assert not prepare_ahead_wanted(EvalConfig.model_validate({**base, "server": {"runtime": "cpu"}}))
    external = {"runtime": "gpu", "mode": "external", "base_url": "http://127.0.0.1:9/v1"}
    assert not prepare_ahead_wanted(EvalConfig.model_validate({**base, "server": external}))
    monkeypatch.setenv("EVALFLOW_VLLM_FLAVOR", "cpu")  # auto on a host without GPUs
    assert not prepare_ahead_wanted(EvalConfig.model_validate(base))


def test_a_preparation_that_fails_says_so_and_leaves_it_to_the_steps_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = EvalConfig.model_validate(
        {
            "model": {"source": str(tmp_path / "step_200"), "cache_dir": str(tmp_path / "c")},
            "benchmarks": [{"name": "gsm8k"}],
        }
    )
    with caplog.at_level(logging.INFO):
        asyncio.run(prepare_ahead(config, "step 200"))  # no such folder: no exception
    assert "step 200 could not be prepared ahead" in caplog.text and "its run will try" in caplog.text
