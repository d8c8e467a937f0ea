"""The watcher's plan for one poll: which selected ready steps it evaluates, which it leaves (done with this
config, given up after failing, not selected), in which order, and the config of each step's run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.config import EvalConfig
from core.record import IndexEntry
from core.resolve import resolve
from core.secrets import redact
from core.training_steps import config_key
from errors import ConfigError
from flows.plan import preflight
from flows.watch import plan_poll, step_config, watch_key
from tasks.checkpoints.training_run import Step


def steps(*numbers: int, not_ready: tuple[int, ...] = ()) -> list[Step]:
    return [
        Step(n, f"/runs/grpo/step_{n}", "nemo-rl", n not in not_ready, "saving" if n in not_ready else "", 1.0)
        for n in numbers
    ]


def config(tmp_path: Path, **model: object) -> EvalConfig:
    return EvalConfig.model_validate(
        {
            "model": {"source": "/runs/grpo", "steps": "all", **model},
            "benchmarks": [{"name": "gsm8k", "limit": 4, "repeats": 2}],
            "store": {"url": str(tmp_path / "store")},
        }
    )


def entry(step: int, key: str, status: str = "complete", run: str = "grpo-1") -> IndexEntry:
    return IndexEntry(run_id=f"r{step}-{status}", training_run=run, step=step, config_key=key, status=status)


def test_a_poll_evaluates_the_selected_ready_steps_this_config_has_not_done(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    listed = steps(10, 20, 30, 40, not_ready=(40,))
    entries = [entry(10, "k"), entry(20, "k", status="failed"), entry(30, "other-config"), entry(30, "k", run="x")]
    todo, left = plan_poll(listed, cfg, "grpo-1", "k", entries, {})
    assert [s.step for s in todo] == [20, 30]  # a failed run is no result; another config's or run's is not ours
    assert [(s.step, s.state, s.run_id) for s in left] == [(10, "done", "r10-complete")]
    newest = config(tmp_path, step_order="newest", steps="every:20")
    assert [s.step for s in plan_poll(listed, newest, "grpo-1", "k", [], {})[0]] == [20]
    assert [s.step for s in plan_poll(listed, config(tmp_path, step_order="newest"), "grpo-1", "k", [], {})[0]] == [
        30, 20, 10
    ]  # fmt: skip


def test_a_step_that_keeps_failing_is_given_up_after_step_attempts(tmp_path: Path) -> None:
    cfg = config(tmp_path, step_attempts=2)
    todo, left = plan_poll(steps(10, 20), cfg, "grpo-1", "k", [], {"k:10": 2, "k:20": 1, "other:20": 5})
    assert [s.step for s in todo] == [20]
    assert [(s.step, s.state, s.message) for s in left] == [(10, "given_up", "failed 2 times (model.step_attempts)")]


def test_a_steps_run_records_the_key_the_watcher_looks_for(tmp_path: Path) -> None:
    """The index entry's config_key (of the step run's redacted, block-resolved config) equals the watcher's:
    otherwise every poll would evaluate every step again."""
    cfg = config(tmp_path, settle_s=5)
    child = step_config(cfg, steps(20)[0], "grpo-1")
    assert (child.model.source, child.model.training_run, child.model.step, child.model.steps) == (
        "/runs/grpo/step_20", "grpo-1", 20, None
    )  # fmt: skip
    assert child.run_name == "grpo-1 step 20" and child.benchmarks == cfg.benchmarks
    recorded = config_key(redact(resolve(child).config.model_dump(mode="json")))  # what RunInfo.config gives
    assert recorded == watch_key(resolve(cfg).config)
    other = config(tmp_path, settle_s=5).model_copy(update={"sampling": cfg.sampling.model_copy(update={"seed": 7})})
    assert watch_key(resolve(other).config) != recorded


def test_an_api_key_given_in_the_parameters_reaches_each_step_and_a_blocks_stays_in_the_block(tmp_path: Path) -> None:
    given = EvalConfig.model_validate({**json.loads(config(tmp_path).model_dump_json()), "server": {"api_key": "sk-1"}})
    assert step_config(given, steps(10)[0], "r").server.api_key.get_secret_value() == "sk-1"
    assert "api_key" not in step_config(config(tmp_path), steps(10)[0], "r").server.model_fields_set


def test_a_training_run_given_to_evalflow_run_points_to_watch(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"model.steps: /runs/grpo is a training run .* `evalflow watch`"):
        preflight(config(tmp_path))


def test_a_poll_with_nothing_ready_writes_the_curve_page_and_its_artifacts(prefect_home: Path, tmp_path: Path) -> None:
    """A real poll (a flow run on the session's Prefect API) of a run whose only step is still being saved:
    nothing is evaluated, the reason is reported, the (empty) curve page and the flow run's artifacts exist."""
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    from flows.watch import watch_flow

    weights = tmp_path / "grpo" / "step_10" / "policy" / "weights"
    weights.mkdir(parents=True)
    (weights / "__0_0.distcp").write_bytes(b"x")  # shards, no .metadata: the save is not finished
    cfg = config(tmp_path, source=str(tmp_path / "grpo"))
    state = asyncio.run(watch_flow(cfg, return_state=True))
    result = state.result()
    assert (result.listed, result.ready, result.steps) == (1, 0, [])
    assert result.not_ready == {10: "step_10: no .metadata yet (the save is not finished)"}
    assert "No step of this training run has a complete evaluation yet" in Path(result.curve["html"]).read_text()
    with get_client(sync_client=True) as client:
        own = ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id])
        keys = {a.key for a in client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=own))}
    assert keys == {f"training-curve-{result.training_run}", f"training-curve-{result.training_run}-html"}


def dcp_step(run: Path, step: int) -> Path:
    weights = run / f"step_{step}" / "policy" / "weights"
    weights.mkdir(parents=True)
    (weights / "__0_0.distcp").write_bytes(b"x")
    (weights / ".metadata").write_bytes(b"m")
    return run / f"step_{step}"


def test_a_step_deleted_during_its_evaluation_fails_in_one_line_and_the_watcher_goes_on(
    prefect_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checkpoint rotation: step 10 is listed, then deleted before its run reads it. Its run fails in one line
    (counted against the step), and the poll goes on with step 20 (whose run fails too here: a DCP step
    that names no model config), and ends normally."""
    import asyncio
    import shutil

    import flows.watch as watch
    from flows.watch import watch_flow

    run = tmp_path / "grpo"
    dcp_step(run, 10), dcp_step(run, 20)
    listed = watch.list_steps

    def rotated(*args: object, **kwargs: object) -> list[Step]:
        found = listed(*args, **kwargs)  # type: ignore[arg-type]
        shutil.rmtree(run / "step_10")
        return found

    monkeypatch.setattr(watch, "list_steps", rotated)
    cfg = config(tmp_path, source=str(run), settle_s=0)
    result = asyncio.run(watch_flow(cfg))
    ten, twenty = result.steps
    assert (ten.step, ten.state, twenty.step, twenty.state) == (10, "failed", 20, "failed")
    assert str(run / "step_10") in ten.message and "\n" not in ten.message
    assert "architecture config is unknown" in twenty.message
    attempts = json.loads((tmp_path / "store" / "training" / result.training_run / "attempts.json").read_text())
    assert attempts == {f"{watch_key(resolve(cfg).config)}:10": 1, f"{watch_key(resolve(cfg).config)}:20": 1}


def test_a_notified_step_is_the_only_one_looked_at_a_stranger_refused(prefect_home: Path, tmp_path: Path) -> None:
    import asyncio

    from flows.watch import watch_flow
    from tasks.checkpoints.errors import CheckpointError

    run = tmp_path / "grpo"
    dcp_step(run, 10)
    weights = run / "step_20" / "policy" / "weights"
    weights.mkdir(parents=True)
    (weights / "__0_0.distcp").write_bytes(b"x")  # being saved
    cfg = config(tmp_path, source=str(run), settle_s=3600)  # a poll would wait an hour; an event does not
    store = tmp_path / "store"
    from core.store import Store
    from tasks.checkpoints.training_run import training_run_id

    key = watch_key(resolve(cfg).config)
    entry_done = IndexEntry(run_id="r10", training_run=training_run_id(str(run)), step=10, config_key=key,
                            status="complete")  # fmt: skip
    from tasks.reporting.index import update_index

    update_index(Store(str(store)), entry_done)
    result = asyncio.run(watch_flow(cfg, step_path=f"{run}/step_10/"))
    assert (result.listed, result.step_path, [(s.step, s.state) for s in result.steps]) == (
        1, f"{run}/step_10/", [(10, "done")]
    )  # fmt: skip
    half = asyncio.run(watch_flow(cfg, step_path=str(run / "step_20")))
    assert half.steps == [] and "no .metadata yet" in half.not_ready[20]
    with pytest.raises(CheckpointError, match="is not a step of the training run"):
        asyncio.run(watch_flow(cfg, step_path=str(tmp_path / "elsewhere" / "step_10")))
