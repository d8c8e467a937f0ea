"""`evalflow local deploy`: work pools, blocks and every deployment of prefect.yaml on the Prefect server,
Prefect's boxed output folded to a line per deployment; skipped when nothing it is made from changed. And
`evalflow demo`, which deploys and then runs the smoke deployment."""

from __future__ import annotations

import asyncio
import hashlib
import re
import sys

from core.config import REPO_ROOT
from ops.local import HOME, SMOKE, OpsError, api_url, blocks, pools, prefect_cli, run, server, worker

# what `prefect deploy` says of each deployment (`created` whether it is new or updated)
DEPLOYED = re.compile(r"Deployment '([^']+)' successfully created")


# what `prefect deploy --all` reads: prefect.yaml, and the flows' parameters (their schema comes from the code)
DEPLOY_INPUTS = ("prefect.yaml", "flows", "core", "blocks")


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
    import yaml

    return [d["name"] for d in yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())["deployments"]]


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


def demo() -> int:
    """Everything for the smoke deployment: server, work pools, blocks, deployments, a CPU worker, a run."""
    server()
    deploy()
    worker("evalflow-cpu")
    return run(SMOKE, [])
