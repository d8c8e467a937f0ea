"""`evalflow local deploy`: work pools, blocks and every deployment of prefect.yaml on the Prefect server,
Prefect's boxed output folded to a line per deployment; skipped when nothing it is made from changed. And
`evalflow demo`, which sets up, deploys and then runs the smoke deployment."""

from __future__ import annotations

import asyncio
import hashlib
import re
import sys
import threading
import time
from typing import Any

from core.config import REPO_ROOT, EvalConfig
from ops import local
from ops.local import HOME, SMOKE, OpsError, api_url, blocks, pools, prefect_cli, run, server, worker

# what `prefect deploy` says of each deployment (`created` whether it is new or updated)
DEPLOYED = re.compile(r"Deployment '([^']+)' successfully created")


# what `prefect deploy --all` reads: prefect.yaml, and the flows' parameters (their schema comes from the code)
DEPLOY_INPUTS = ("prefect.yaml", "flows", "core", "blocks")
BLOCKS_WAIT_S = 600.0  # the demo's preparing thread waits this long for the blocks before planning the run


def deploy_fingerprint() -> str:
    """A hash of what the deployments are made from: prefect.yaml, the code their parameter schemas and pull
    steps come from (flows/, core/, blocks/), the checkout's place, Prefect's version and the server."""
    from importlib.metadata import version

    digest = hashlib.sha256(f"{REPO_ROOT}\0{version('prefect')}\0{api_url()}".encode())
    for top in DEPLOY_INPUTS:
        path = REPO_ROOT / top
        for file in sorted([path] if path.is_file() else path.rglob("*.py")):
            digest.update(f"\0{file.relative_to(REPO_ROOT)}\0".encode() + file.read_bytes())
    return digest.hexdigest()


def yaml_deployments() -> list[str]:
    return [d["name"] for d in _yaml_deployments()]


def _yaml_deployments() -> list[dict[str, Any]]:
    import yaml

    return yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())["deployments"]


async def _deployment_names() -> set[str]:
    from prefect.client.orchestration import PrefectClient

    async with PrefectClient(api_url()) as client:
        return {d.name for d in await client.read_deployments()}


def deploy(force: bool = False) -> None:
    """Work pools, blocks, then every deployment in prefect.yaml (`prefect deploy --all`); skipped (seconds
    instead of tens of them) when the server has them all and nothing they are made from changed since."""
    pools()
    blocks()
    marker = HOME / "deploy.fingerprint"
    fingerprint = deploy_fingerprint()
    names = yaml_deployments()
    unchanged = not force and marker.is_file() and marker.read_text().strip() == fingerprint
    if unchanged and set(names) <= asyncio.run(_deployment_names()):
        print(f"{len(names)} deployments: unchanged since the last deploy (`evalflow local deploy --force` redoes it)")
        return
    marker.unlink(missing_ok=True)
    # Prefect prints a boxed table and hints per deployment: kept in .prefect/deploy.log, folded here to one
    # line each (wide columns: a wrapped box line would split the name from its id)
    done = prefect_cli("deploy", "--all", capture=True, env={"COLUMNS": "500"})
    HOME.mkdir(exist_ok=True)
    log = HOME / "deploy.log"
    log.write_text(done.stdout + done.stderr)
    if done.returncode:
        print(done.stdout + done.stderr, file=sys.stderr)
        raise OpsError(f"`prefect deploy --all` failed (its output is above and in {log})")
    deployed = DEPLOYED.findall(done.stdout)
    if not deployed:  # a Prefect that says it otherwise: show what it said rather than nothing
        print(done.stdout)
    for name in deployed:
        print(f"deployment {name}: created")
    print(f"{len(deployed)} deployments; Prefect's own output: {log}")
    marker.write_text(fingerprint + "\n")


def _served_runtime(config: EvalConfig) -> str:
    """The runtime flavour a run of `config` will prepare its model for: its server block's, as
    blocks/defaults.yaml saves it (read here, before the blocks are saved), else its own."""
    from blocks.defaults import default_blocks

    if not config.server.block:
        return config.server.runtime
    saved = default_blocks().get("evalflow-vllm-server", {}).get(config.server.block, {})
    return saved.get("settings", {}).get("runtime", config.server.runtime)


class _Ahead(threading.Thread):
    """A deployment's model prepared on a thread while the main one starts the Prefect server, deploys and
    starts the run: the conversion goes into the conversion cache, under its lock, where the run's
    prepare_model stage waits for it and then finds it. Once the blocks are saved (`blocks_saved`), the run
    is planned as its dry run does, which counts its prompts' tokens into their cache too. The converter and
    the token counter run in the runtime's own processes. A server block changed since it was saved is not
    seen here: the run then prepares its model itself."""

    def __init__(self, deployment: str) -> None:
        # What both threads import, imported here, on the caller's: two threads importing the same modules for
        # the first time can deadlock on Python's import locks (Prefect's plugins import blocks/, which imports
        # prefect.client.orchestration, which the main thread imports for the work pools meanwhile).
        import prefect.client.orchestration  # noqa: F401  # why: imported before the thread starts

        import blocks.defaults  # noqa: F401  # why: as above
        import flows.plan  # noqa: F401  # why: as above
        import tasks.checkpoints.prepare  # noqa: F401  # why: as above

        super().__init__(name=f"prepare {deployment}", daemon=True)
        self.deployment, self.started, self.outcome = deployment, time.monotonic(), ""
        self.blocks_saved = threading.Event()

    def run(self) -> None:
        from prefect.settings import PREFECT_API_URL, temporary_settings

        from errors import EvalflowError
        from flows.plan import plan_run
        from tasks.checkpoints.prepare import prepare_model_impl

        name = self.deployment.partition("/")[2]
        try:
            params = next(d for d in _yaml_deployments() if d["name"] == name)["parameters"]
            config = EvalConfig.model_validate(params["config"])
            if config.server.mode == "managed":
                prepare_model_impl(config.model, _served_runtime(config))
            self.outcome = f"{self.deployment}: model prepared ahead in {time.monotonic() - self.started:.0f} s"
            if self.blocks_saved.wait(BLOCKS_WAIT_S):
                with temporary_settings(updates={PREFECT_API_URL: api_url()}):  # its blocks, as the run reads them
                    planned = plan_run(config)
                self.outcome += f"; {planned.rollouts.to_generate} of {planned.rollouts.total} rollouts to generate"
        except Exception as exc:  # a head start only: whatever failed here, the run does it again and reports it
            what = str(exc) if isinstance(exc, EvalflowError) else f"{type(exc).__name__}: {exc}"
            self.outcome = f"{self.deployment}: not prepared ahead ({what}); the run prepares it"
        print(self.outcome, flush=True)


def demo() -> int:
    """Everything for the smoke deployment: server, vLLM runtime, work pools, blocks, deployments, a CPU
    worker, a run. Set-up steps that wait on different things go side by side: the Prefect server starts
    while the runtime is created (mostly downloads), and the deployment's model is converted while the
    deployments are made and the run starts (the run waits for the conversion, then finds it cached)."""
    from tasks.runtime.venv import ensure_runtime

    started = None if local.healthy() else local.start_server()
    ensure_runtime("auto")
    ahead = _Ahead(SMOKE)
    ahead.start()
    server(started=started)
    deploy()
    ahead.blocks_saved.set()
    worker("evalflow-cpu")
    return run(SMOKE, [])
