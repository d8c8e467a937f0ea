"""The event path of a training run, on the session's real Prefect server: `evalflow watch --deploy` creates
`eval/watch` (an interval schedule and a trigger on this run's `evalflow.checkpoint.saved` events), and
`evalflow notify STEP` makes the server's trigger create a flow run of it for that step, with no polling.
No worker runs here: the runs are read as the server created them (tests/flows/test_watch_e2e.py runs them)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.main import app
from tests.conftest import wait_for

RUNNER = CliRunner()


def write_step(run: Path, step: int, finished: bool = True) -> Path:
    weights = run / f"step_{step}" / "policy" / "weights"
    weights.mkdir(parents=True)
    (weights / "__0_0.distcp").write_bytes(b"x" * 16)
    if finished:
        (weights / ".metadata").write_bytes(b"m")  # torch writes it last
    return run / f"step_{step}"


def flow_runs(deployment_id: Any) -> list[Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    async def go() -> list[Any]:
        async with get_client() as client:
            flt = DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id]))
            return await client.read_flow_runs(deployment_filter=flt)

    return asyncio.run(go())


def read_deployment(name: str) -> Any:
    from prefect.client.orchestration import get_client

    async def go() -> Any:
        async with get_client() as client:
            return await client.read_deployment_by_name(name)

    return asyncio.run(go())


@pytest.fixture
def api_env(prefect_home: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    from prefect.settings import PREFECT_API_URL

    monkeypatch.setenv("PREFECT_API_URL", PREFECT_API_URL.value())
    return PREFECT_API_URL.value()


def test_notify_runs_the_watch_deployment_for_that_step_and_only_its_own_runs(api_env: str, tmp_path: Path) -> None:
    run = tmp_path / "results" / "grpo-qwen"
    write_step(run, 10)
    config = tmp_path / "watch.yaml"
    config.write_text(
        f"model:\n  source: {run}\n  steps: all\nbenchmarks:\n  - name: gsm8k\n    limit: 4\n"
        f"store:\n  url: {tmp_path / 'store'}\n"
    )
    out = RUNNER.invoke(
        app, ["watch", "--config", str(config), "--deploy", "--pool", "evalflow-gpu", "--interval", "900"]
    )
    assert out.exit_code == 0, out.output
    assert "deployment eval/watch (training run grpo-qwen-" in out.output
    deployment = read_deployment("eval/watch")
    assert deployment.work_pool_name == "evalflow-gpu" and deployment.entrypoint == "flows/watch.py:watch_deployment"
    (schedule,) = deployment.schedules
    assert schedule.schedule.interval.total_seconds() == 900 and schedule.active
    assert deployment.parameters["config"]["model"] == {"source": str(run), "steps": "all"}

    # a half-written step is refused before any event, in one line
    write_step(run, 20, finished=False)
    half = RUNNER.invoke(app, ["notify", str(run / "step_20")])
    assert half.exit_code == 2 and "no .metadata yet" in half.output and len(half.output.splitlines()) == 1
    # another training run's step: an event the trigger does not match
    other = tmp_path / "results" / "other-run"
    sent_other = RUNNER.invoke(app, ["notify", str(write_step(other, 5))])
    assert sent_other.exit_code == 0, sent_other.output
    sent = RUNNER.invoke(app, ["notify", str(run / "step_10") + "/"])
    assert sent.exit_code == 0 and "event evalflow.checkpoint.saved sent" in sent.output, sent.output

    runs = wait_for(lambda: [r for r in flow_runs(deployment.id) if r.parameters.get("step_path")], 60,
                    "the trigger to create a flow run of eval/watch")  # fmt: skip
    assert [r.parameters["step_path"] for r in runs] == [str(run / "step_10")]
    assert runs[0].parameters["config"]["model"]["source"] == str(run)
    assert runs[0].state_name == "Scheduled"  # waiting for a worker of evalflow-gpu


def test_a_config_with_a_credential_is_not_deployed_and_notify_needs_a_server(
    api_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "grpo"
    write_step(run, 1)
    args = ["watch", f"model.source={run}", "server.api_key=sk-live-123", "--deploy"]
    out = RUNNER.invoke(app, args)
    assert out.exit_code == 1 and "holds a credential" in out.output and "sk-live-123" not in out.output
    monkeypatch.delenv("PREFECT_API_URL")
    out = RUNNER.invoke(app, ["notify", str(run / "step_1")])
    assert out.exit_code == 1 and "set PREFECT_API_URL" in out.output
    missing = RUNNER.invoke(app, ["notify", str(run / "step_7")])
    assert missing.exit_code == 1  # the server is checked first: nothing else is useful without it
