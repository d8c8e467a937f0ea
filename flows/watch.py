"""The `watch` flow: a training run's checkpoints, each evaluated once, as they land.

One poll lists the training run (`model.source` with `model.steps`; tasks.checkpoints.training_run), takes the
ready steps the config selects, leaves out those this config already evaluated (a complete run in the store's
index with the training run's id, the step and the same `config_key`) and those whose runs failed
`model.step_attempts` times, and evaluates the others one by one, in `model.step_order`, each as a child flow
run of `eval` (its own model conversion cache entry, server and report). A step is held under a lock while it is
evaluated, so two watchers never evaluate it at once; a watcher killed mid-way leaves the finished steps in the
index, and the next poll goes on from there. After each step the training-curve report is written again.

Given `step_path` (a deployment trigger passes it from an `evalflow.checkpoint.saved` event: `evalflow notify`),
the poll looks at that one step only, with no settle time (its writer said the save is finished); the
content rule still applies. `watch_deployment` is the same flow under the name `eval`, so the deployment reads
`eval/watch` beside the other evals.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from typing import Literal

from prefect import flow
from pydantic import BaseModel, ConfigDict, Field

from core.config import EvalConfig
from core.logs import get_logger
from core.record import IndexEntry
from core.resolve import resolve
from core.secrets import redact
from core.store import Store
from core.training_steps import config_key, parse_steps
from flows.ahead import one_by_one, prepare_ahead, prepare_ahead_wanted
from flows.eval import eval_flow
from tasks.checkpoints.errors import CheckpointError
from tasks.checkpoints.training_run import Step, list_steps, same_source, select_steps, training_run_id
from tasks.collection.lease import lock_manager
from tasks.prefect_sync import sync_call
from tasks.reporting.format import browser_url
from tasks.reporting.index import read_entries
from tasks.reporting.report import artifact_key
from tasks.reporting.training_curve import write_curve_report
from tasks.serving.keeper import keep_servers

StepState = Literal["evaluated", "failed", "done", "given_up", "busy"]


class WatchedStep(BaseModel):
    """What one poll did with one selected step."""

    model_config = ConfigDict(extra="forbid")

    step: int
    source: str
    state: StepState  # done: evaluated before; given_up: failed step_attempts times; busy: another watcher has it
    run_id: str | None = None
    message: str = ""


class WatchResult(BaseModel):
    """One poll of a training run: its steps as listed, what was done with the selected ones, the curve report."""

    model_config = ConfigDict(extra="forbid")

    training_run: str
    source: str
    listed: int
    ready: int
    step_path: str | None = None  # the one step this poll was asked about (an event), if any
    steps: list[WatchedStep] = Field(default_factory=list)
    not_ready: dict[int, str] = Field(default_factory=dict)  # step -> why (a save in progress, say)
    curve: dict[str, str] = Field(default_factory=dict)


def _attempts_url(store: Store, run: str) -> str:
    return store.path("training", run, "attempts.json")


def _attempts(store: Store, run: str) -> dict[str, int]:
    """Failed runs per `<config key>:<step>`: a step that keeps failing (its conversion, say) is tried a
    bounded number of times, not forever."""
    url = _attempts_url(store, run)
    if not store.exists(url):
        return {}
    try:
        data = json.loads(store.read_text(url))
    except (OSError, ValueError):
        return {}
    return {str(k): int(v) for k, v in data.items()} if isinstance(data, dict) else {}


def watch_key(resolved: EvalConfig) -> str:
    """The key a step's run records in its index entry (of its redacted config, blocks applied; see
    core.training_steps.config_key), computed the same way from the watcher's config."""
    return config_key(redact(resolved.model_dump(mode="json")))


def plan_poll(
    steps: list[Step], config: EvalConfig, run: str, key: str, entries: list[IndexEntry], attempts: dict[str, int]
) -> tuple[list[Step], list[WatchedStep]]:
    """(steps to evaluate now, in order; steps left alone and why), before anything runs."""
    selected = select_steps(steps, parse_steps(config.model.steps))
    if config.model.step_order == "newest":
        selected = selected[::-1]
    mine = [e for e in entries if e.training_run == run and e.config_key == key and e.status == "complete"]
    done = {e.step: e.run_id for e in mine}
    todo, left = [], []
    for step in selected:
        if step.step in done:
            left.append(WatchedStep(step=step.step, source=step.source, state="done", run_id=done[step.step]))
        elif attempts.get(f"{key}:{step.step}", 0) >= config.model.step_attempts:
            why = f"failed {attempts[f'{key}:{step.step}']} times (model.step_attempts)"
            left.append(WatchedStep(step=step.step, source=step.source, state="given_up", message=why))
        else:
            todo.append(step)
    return todo, left


def step_config(config: EvalConfig, step: Step, run: str) -> EvalConfig:
    """The config of one step's run: the step's folder as the model, the training run and step recorded."""
    data = config.model_dump(mode="json", exclude_unset=True)
    model = data.setdefault("model", {})
    model.update(source=step.source, training_run=run, step=step.step)
    model.pop("steps", None)
    data["run_name"] = f"{config.run_name or run} step {step.step}"
    if "api_key" in data.get("server", {}):  # given in the parameters (not a block): the child needs it as given
        data["server"]["api_key"] = config.server.api_key.get_secret_value()
    return EvalConfig.model_validate(data)


@flow(name="watch", log_prints=True)
async def watch_flow(config: EvalConfig, step_path: str | None = None) -> WatchResult:
    """One poll of a training run: evaluate each selected ready step that this config has not evaluated yet
    (only `step_path`, if given: the step an `evalflow notify` event names)."""
    logger = get_logger()
    resolved = resolve(config)  # blocks applied, as each step's run applies them
    store, source = resolved.store, config.model.source
    run = config.model.training_run or training_run_id(source)
    key = watch_key(resolved.config)
    model_store = Store(source, config.model.storage_options) if "://" in source else None
    steps = list_steps(source, model_store, settle_s=0.0 if step_path else config.model.settle_s)
    if step_path:
        steps = _notified(steps, step_path, source)
    result = WatchResult(
        training_run=run, source=source, listed=len(steps), ready=sum(s.ready for s in steps), step_path=step_path,
        not_ready={s.step: s.reason for s in steps if not s.ready},
    )  # fmt: skip
    todo, left = plan_poll(steps, config, run, key, read_entries(store), _attempts(store, run))
    result.steps.extend(left)
    logger.info(
        "training run %s (%s): %d steps listed, %d ready, %d to evaluate now%s", run, step_path or source,
        result.listed, result.ready, len(todo),
        "".join(f"; step {n} not ready: {why}" for n, why in result.not_ready.items()),
    )  # fmt: skip
    locks = lock_manager(store)
    holder = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    wanted = prepare_ahead_wanted(resolved.config)
    if wanted and len(todo) > 1:
        logger.info("the server runs on GPUs: each next step is downloaded and converted while this one collects")

    async def evaluate(step: Step) -> None:
        lock = f"watch-{run}-{key}-{step.step}"
        if not locks.acquire_lock(lock, holder, acquire_timeout=0):
            result.steps.append(WatchedStep(step=step.step, source=step.source, state="busy"))
            logger.info("step %d: another watcher is evaluating it", step.step)
            return
        try:
            result.steps.append(await _evaluate(config, step, run, key, store))
        finally:
            locks.release_lock(lock, holder)
        result.curve = write_curve_report(store, run)

    async def ahead(step: Step) -> None:
        await prepare_ahead(step_config(resolved.config, step, run), f"step {step.step}")

    async with keep_servers() as keeper:  # one managed server for the poll's steps, each loaded in place
        await one_by_one(todo, evaluate, ahead if wanted else None)
        if keeper.starts or keeper.swaps:
            logger.info("servers for %d steps: %d started, %d swapped in place", len(todo), keeper.starts, keeper.swaps)
    if not result.curve:
        result.curve = write_curve_report(store, run)
    _publish(result, store)
    return result


# The deployment's flow: the same poll under the name `eval`, so that it is `eval/watch` beside eval/smoke and
# eval/nightly-baseline (Prefect names a deployment after its flow). `evalflow watch` runs show as `watch`.
watch_deployment = watch_flow.with_options(name="eval")


def _notified(steps: list[Step], step_path: str, source: str) -> list[Step]:
    """The one listed step that `step_path` names (any spelling of it); one line if it is none of them."""
    found = [s for s in steps if same_source(s.source, step_path)]
    if not found:
        listed = ", ".join(s.source for s in steps[-3:]) or "none"
        raise CheckpointError(
            f"{step_path} is not a step of the training run {source} (its last steps: {listed}); "
            "check the path `evalflow notify` was given, or the deployment's model.source"
        )
    return found


def _publish(result: WatchResult, store: Store) -> None:
    """The curve as artifacts of the watcher's flow run: its markdown (the steps, the best step, the significant
    changes) and a link to the HTML page."""
    from prefect.artifacts import create_link_artifact, create_markdown_artifact

    key = artifact_key(f"training-curve-{result.training_run}")
    evaluated = [s.step for s in result.steps if s.state == "evaluated"]
    head = f"Poll of {result.source}: {result.listed} steps listed, {result.ready} ready, evaluated now: {evaluated}"
    markdown = f"{head}\n\n{store.read_text(result.curve['markdown'])}"
    sync_call(create_markdown_artifact, markdown=markdown, key=key, description=f"training run {result.training_run}")
    link = browser_url(result.curve["html"])
    sync_call(create_link_artifact, link=link, link_text="training curve", key=f"{key}-html")


async def _evaluate(config: EvalConfig, step: Step, run: str, key: str, store: Store) -> WatchedStep:
    """One step's run (a child flow run of `eval`); a failure is counted against the step and the watcher
    goes on with the next one."""
    logger = get_logger()
    logger.info("step %d: evaluating %s", step.step, step.source)
    try:
        record = await eval_flow(step_config(config, step, run))
    except Exception as exc:  # its run failed (a checkpoint deleted meanwhile, a conversion): one line, go on
        return _failed(store, run, key, step, " ".join(str(exc).split())[:500] or type(exc).__name__)
    status = record.run_info.status
    if status.state != "complete":  # incomplete or failed: not a result, and an attempt used
        message = f"run {record.run_info.run_id} {status.state}: {status.reason or 'see its report'}"
        return _failed(store, run, key, step, message)
    logger.info("step %d: run %s complete", step.step, record.run_info.run_id)
    return WatchedStep(step=step.step, source=step.source, state="evaluated", run_id=record.run_info.run_id)


def _failed(store: Store, run: str, key: str, step: Step, message: str) -> WatchedStep:
    """Count a failed run against its step (model.step_attempts) and say so in one line."""
    attempts = _attempts(store, run)
    attempts[f"{key}:{step.step}"] = attempts.get(f"{key}:{step.step}", 0) + 1
    store.write_text(_attempts_url(store, run), json.dumps(attempts, indent=1, sort_keys=True))
    get_logger().warning("step %d failed (attempt %d): %s", step.step, attempts[f"{key}:{step.step}"], message)
    return WatchedStep(step=step.step, source=step.source, state="failed", message=message)
