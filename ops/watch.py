"""A training run on Prefect: the `eval/watch` deployment (an interval schedule and an event trigger) and the
event a trainer sends when a checkpoint is saved (`evalflow notify`).

Both ends agree here on the event: `evalflow.checkpoint.saved`, its resource labelled with the training run's
id (so a deployment reacts only to its own run's checkpoints) and the step's path (which the trigger passes to
the flow run as `step_path`). The deployment's code is this checkout (`flow.from_source` on the repo folder,
as prefect.yaml's deployments): a worker on another node needs the repo at the same path.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from core.config import REPO_ROOT, EvalConfig
from core.secrets import redact
from ops.local import POOLS, OpsError, api_url, pools, ui_url
from tasks.checkpoints.errors import CheckpointError
from tasks.checkpoints.training_run import Step, list_steps, same_source, training_run_id
from tasks.prefect_sync import sync_call

EVENT = "evalflow.checkpoint.saved"
RUN_LABEL = "evalflow.training-run"
PATH_LABEL = "evalflow.step-path"
STEP_LABEL = "evalflow.step"
ENTRYPOINT = "flows/watch.py:watch_deployment"


@dataclass(frozen=True)
class Deployed:
    name: str  # eval/<name>
    url: str
    training_run: str


def _needs_server() -> None:
    if not os.environ.get("PREFECT_API_URL"):
        raise OpsError(
            "no Prefect server: set PREFECT_API_URL to the server the workers use "
            "(`evalflow local server` starts one here: export PREFECT_API_URL=http://127.0.0.1:4200/api)"
        )


def deployment_parameters(config: EvalConfig) -> dict[str, Any]:
    """The config as the deployment keeps it (what was set, nothing defaulted), refused if it holds a credential:
    deployment parameters are readable by anyone with the UI, so keys belong in blocks or the environment."""
    data = config.model_dump(mode="json", exclude_unset=True)
    if redact(data) != data:
        raise OpsError(
            "the config holds a credential (server.api_key or a storage option key); a deployment's parameters "
            "are shown in the UI: put it in a block (server.block / store.block) or the workers' environment"
        )
    return data


def deploy_watch(config: EvalConfig, name: str, pool: str, interval_s: float) -> Deployed:
    """Create (or update) `eval/<name>`: a poll of the config's training run every `interval_s` seconds on
    `pool`, and a run for each `evalflow.checkpoint.saved` event of that training run."""
    from prefect.events import DeploymentEventTrigger

    from flows.watch import watch_deployment

    _needs_server()
    run = config.model.training_run or training_run_id(config.model.source)
    params = deployment_parameters(config)
    trigger = DeploymentEventTrigger(
        name=f"{run}: checkpoint saved",
        expect={EVENT},
        match={RUN_LABEL: run},
        parameters={"config": params, "step_path": f"{{{{ event.resource['{PATH_LABEL}'] }}}}"},
    )
    if pool in POOLS:
        pools()  # evalflow's own pools are created as `make deploy` creates them; another must exist
    source = sync_call(watch_deployment.from_source, source=str(REPO_ROOT), entrypoint=ENTRYPOINT)
    try:
        deployment_id = source.deploy(
            name=name,
            work_pool_name=pool,
            interval=timedelta(seconds=interval_s),
            parameters={"config": params},
            triggers=[trigger],
            description=f"Each ready checkpoint of {config.model.source} evaluated once (training run {run}).",
            tags=["evalflow", "training-run"],
            print_next_steps=False,
        )
    except ValueError as exc:
        if "work pool" not in str(exc):
            raise
        raise OpsError(f"work pool {pool!r} not found on {api_url()}: create it first, or use --pool") from exc
    return Deployed(f"eval/{name}", ui_url(f"/deployments/deployment/{deployment_id}"), run)


def saved_step(step_path: str, run_source: str | None = None) -> tuple[Step, str]:
    """The step `step_path` names, complete (a checkpoint half written is refused here, before any event), and
    the training run's folder: `run_source` (the watcher's model.source, a pattern too) or the step's parent.
    A URL is opened with the environment's credentials (AWS_*), as the trainer that wrote it has them."""
    folder = run_source or step_path.rstrip("/").rsplit("/", 1)[0]
    steps = list_steps(folder, settle_s=0.0)  # its writer says the save is finished: no settle time
    found = [s for s in steps if same_source(s.source, step_path)]
    if not found:
        raise CheckpointError(f"{step_path} is not a step folder of {folder} (give the training run with --run)")
    if not found[0].ready:
        raise CheckpointError(f"{step_path} is not a finished checkpoint yet: {found[0].reason}")
    return found[0], folder


def notify(step_path: str, run_source: str | None = None, training_run: str | None = None) -> str:
    """Send `evalflow.checkpoint.saved` for a finished step to the Prefect server; return the event's id."""
    from prefect.events import Event, Resource
    from prefect.events.clients import get_events_client

    _needs_server()
    step, folder = saved_step(step_path, run_source)
    run = training_run or training_run_id(folder)
    event = Event(
        event=EVENT,
        resource=Resource(
            {
                "prefect.resource.id": f"evalflow.checkpoint.{run}.{step.step}",
                "prefect.resource.name": step.source,
                RUN_LABEL: run,
                STEP_LABEL: str(step.step),
                PATH_LABEL: step.source,
            }
        ),
        payload={"layout": step.layout},
    )

    async def send() -> None:
        async with get_events_client(reconnection_attempts=2) as client:
            await client.emit(event)

    try:
        asyncio.run(send())
    except Exception as exc:  # websockets/httpx errors: the server is down or the URL is wrong
        raise OpsError(f"cannot send the event to {api_url()}: {type(exc).__name__}: {exc}") from exc
    return str(event.id)
