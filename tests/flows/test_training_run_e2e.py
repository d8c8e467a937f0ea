"""A simulated NeMo RL training run on S3, evaluated as its checkpoints land, by the README's "Training runs"
walk-through run line by line (test scale), on the lane's real Prefect server, its deployed project and
workers, a moto S3 server, and managed vLLM CPU servers of each step's converted weights.

The trainer: three DCP steps (bf16) of the default model (SmolLM2-135M-Instruct) each with a small change to
one tensor (hf_to_dcp.py's --noise-seed), uploaded one at a time as torch writes them (shards, then `.metadata`
last), with step 200 left half written for a while. The watcher:
- `evalflow watch` (polling every 2 s) evaluates step 100, reports step 200 as not ready while it is half
  written, starts step 200 once it is complete, and is SIGKILLed (its process group) during step 200;
- `evalflow watch --once` goes on: step 100 is done, step 200 is evaluated;
- `evalflow watch --deploy` makes eval/watch, `evalflow local worker` runs it, and `evalflow notify` of step 300
  has the server's trigger run eval/watch for that step alone.
Each step has exactly one complete run (counted in the index and in Prefect's eval flow runs), no step is
started while half written, and the curve's three points equal the three step runs' metrics.json.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest

from core.store import Store
from tasks.checkpoints.prepare import PreparedModel
from tasks.reporting.index import read_entries
from tasks.runtime.venv import Runtime, ensure_runtime
from tests.checkpoints.conftest import build_dcp
from tests.cli.conftest import EVALFLOW
from tests.conftest import REPO_ROOT, wait_for
from tests.examples.test_readme_own_benchmark_e2e import walk_through
from tests.flows.conftest import Deployed

pytestmark = pytest.mark.e2e

BUCKET, RUN = "team-checkpoints", "nemo-rl/grpo-qwen3-4b"
STEPS = (100, 200, 300)
CONFIG = "examples/configs/training_run.yaml"
# the README config at test scale: the CPU server block, a short settle time, and a benchmark the 135M model
# answers in a few tokens with a score that moves from step to step (GSM8K at this scale is 0 at every step,
# which would make the curve's values equal to the reports' whatever the curve read)
SCALE = [
    "server.block=cpu-smoke",
    "benchmarks=[{task: examples/tasks/science_mc.yaml, limit: 12, repeats: 2}]",
    "sampling.max_tokens=48",
    "collection.batch_size=8",
    "model.settle_s=1",
]


class Trainer:
    """Writes the run's steps to S3 as a trainer's save does: every file but `.metadata`, then `.metadata`."""

    def __init__(self, s3_url: str, staging: Path) -> None:
        self.s3 = boto3.client("s3", endpoint_url=s3_url, region_name="us-east-1", aws_access_key_id="testing",
                               aws_secret_access_key="testing")  # fmt: skip
        self.staging = staging
        self.s3.create_bucket(Bucket=BUCKET)

    def build(self, runtime: Runtime, hf_dir: str, step: int) -> None:
        # a bf16 trainer's save: half the bytes of fp32 to upload, download and convert
        step_dir = self.staging / f"step_{step}"
        build_dcp(runtime, hf_dir, step_dir, "nemo-rl", model_name=hf_dir, noise_seed=step, dtype="bfloat16")

    def upload(self, step: int, metadata: bool = True, shards: bool = True) -> None:
        root = self.staging / f"step_{step}"
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            if path.name != ".metadata" and shards:
                self.s3.upload_file(str(path), BUCKET, f"{RUN}/step_{step}/{path.relative_to(root)}")
        if metadata:  # `.metadata` last, as torch writes it
            self.s3.upload_file(
                str(root / "policy/weights/.metadata"), BUCKET, f"{RUN}/step_{step}/policy/weights/.metadata"
            )


@pytest.fixture(scope="module")
def dcp_runtime() -> Runtime:
    return ensure_runtime("auto")


def command(line: str, *extra: str) -> list[str]:
    words = shlex.split(line, comments=True)
    assert words[:3] == ["uv", "run", "evalflow"], line
    return [EVALFLOW, *words[3:], *extra]


def eval_runs_by_step(project: Deployed, since: datetime, training_run: str) -> dict[int, list[Any]]:
    """The `eval` flow runs of this training run's steps (each step's run is one), by step."""
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName, FlowRunFilter, FlowRunFilterStartTime

    runs = project.call(lambda c: c.read_flow_runs(
        flow_filter=FlowFilter(name=FlowFilterName(any_=["eval"])),
        flow_run_filter=FlowRunFilter(start_time=FlowRunFilterStartTime(after_=since)),
    ))  # fmt: skip
    found: dict[int, list[Any]] = {}
    for run in runs:
        model = run.parameters.get("config", {}).get("model", {})
        if model.get("training_run") == training_run:
            found.setdefault(model["step"], []).append(run)
    return found


def test_a_training_run_on_s3_is_evaluated_step_by_step_as_the_readme_says(
    deployed: Deployed,
    s3_url: str,
    dcp_runtime: Runtime,
    smollm2: PreparedModel,
    tmp_path: Path,
) -> None:
    lines = walk_through(REPO_ROOT / "docs" / "guides" / "training-runs.md", "## Walk-through")
    assert [shlex.split(line)[3] for line in lines] == ["watch", "watch", "watch", "local", "notify"], lines
    polling, once, deploy, worker, notify = lines
    assert "--once" in once and "--deploy" in deploy and "worker" in worker
    endpoint = f"model.storage_options.client_kwargs.endpoint_url={s3_url}"  # the fixture's workers: no AWS_* URL
    env = {**deployed.env, "AWS_ENDPOINT_URL": s3_url, "EVALFLOW_PREFECT_HOME": str(tmp_path / "prefect-home")}
    trainer = Trainer(s3_url, tmp_path / "staging")
    started = datetime.now(UTC)
    trainer.build(dcp_runtime, smollm2.path, 100)
    trainer.upload(100)

    # 1. the polling watcher: step 100; step 200 half written, then complete; killed during step 200
    log = (tmp_path / "watch.log").open("wb")
    proc = subprocess.Popen(command(polling, *SCALE, endpoint, "--interval", "2"), cwd=REPO_ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    output = lambda: (tmp_path / "watch.log").read_text(errors="replace")  # noqa: E731
    try:
        trainer.build(dcp_runtime, smollm2.path, 200)
        trainer.build(dcp_runtime, smollm2.path, 300)
        trainer.upload(200, metadata=False)
        wait_for(lambda: "step 100: evaluated" in output(), 400, "watch to evaluate step 100", interval=1)
        wait_for(lambda: "step 200 not ready:" in output(), 60, "watch to see the half-written step 200", interval=1)
        assert "no .metadata yet" in output().split("step 200 not ready:")[1].splitlines()[0]
        completed_at = datetime.now(UTC)
        trainer.upload(200, shards=False)
        wait_for(lambda: "step 200: evaluating" in output(), 60, "watch to start step 200", interval=0.5)
        time.sleep(3)  # into the step's run: its checkpoint conversion
        assert proc.poll() is None, output()[-3000:]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    training_run = _training_run(output())
    index = Store(str(deployed.store))
    mine = lambda: [e for e in read_entries(index) if e.training_run == training_run]  # noqa: E731
    assert [(e.step, e.status) for e in mine()] == [(100, "complete")]  # step 200 was killed before its end

    # 2. one poll goes on where the killed watcher was
    done = subprocess.run(command(once, *SCALE, endpoint), cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "step 100: done" in done.stdout and "step 200: evaluated" in done.stdout, done.stdout

    # 3. the deployment, a worker for it, then a notified step
    deployed_out = subprocess.run(command(deploy, *SCALE, endpoint), cwd=REPO_ROOT, env=env, capture_output=True,
                                  text=True, timeout=300)  # fmt: skip
    assert deployed_out.returncode == 0, deployed_out.stdout + deployed_out.stderr
    assert f"deployment eval/watch (training run {training_run})" in deployed_out.stdout
    started_worker = subprocess.run(command(worker), cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                                    timeout=120)  # fmt: skip
    assert started_worker.returncode == 0, started_worker.stdout + started_worker.stderr
    try:
        deployment = deployed.deployment("eval/watch")
        (schedule,) = deployment.schedules
        assert schedule.schedule.interval.total_seconds() == 600
        for run in _deployment_runs(deployed, deployment.id):  # a poll the schedule put at "now": let it pass
            if run.expected_start_time <= datetime.now(UTC) + (schedule.schedule.interval / 60):
                deployed.finished(run.id, 300)
        trainer.upload(300)
        sent = subprocess.run(command(notify), cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert sent.returncode == 0, sent.stdout + sent.stderr
        step_url = f"s3://{BUCKET}/{RUN}/step_300"
        notified = wait_for(
            lambda: [r for r in _deployment_runs(deployed, deployment.id) if r.parameters.get("step_path") == step_url],
            60, "the trigger to run eval/watch for step 300",
        )  # fmt: skip
        assert deployed.finished(notified[0].id, 500).state.is_completed()
    finally:
        pid_file = tmp_path / "prefect-home" / "worker-evalflow-gpu.pid"
        if pid_file.exists():
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)

    # each step evaluated once: one complete run each, and only step 200 (killed) started twice
    entries = mine()
    assert sorted((e.step, e.status) for e in entries) == [(100, "complete"), (200, "complete"), (300, "complete")]
    runs = eval_runs_by_step(deployed, started, training_run)
    assert {step: len(found) for step, found in runs.items()} == {100: 1, 200: 2, 300: 1}
    assert {step: sum(r.state.is_completed() for r in found) for step, found in runs.items()} == dict.fromkeys(STEPS, 1)
    assert min(r.start_time for r in runs[200]) > completed_at  # never started while half written
    # the curve: three points, each equal to its step's own metrics.json
    curve = json.loads((deployed.store / "training" / training_run / "curve.json").read_text())
    assert [p["step"] for p in curve["points"]] == list(STEPS)
    by_run = {e.run_id: e for e in entries}
    values = []
    for point in curve["points"]:
        metrics = json.loads((deployed.store / by_run[point["run_id"]].metrics).read_text())
        assert set(point["benchmarks"]) == set(metrics["benchmarks"]) == {"science_mc"}
        own, shown = metrics["benchmarks"]["science_mc"], point["benchmarks"]["science_mc"]
        for field in ("accuracy", "pass_at_k", "mean_reward", "ci", "tokens", "n_rollouts"):
            assert shown[field] == own[field], field
        values.append((own["accuracy"], own["tokens"]["completion_mean"]))
    assert len(set(values)) > 1, values  # the steps differ: the comparison above could have failed
    page = (deployed.store / "training" / training_run / "index.html").read_text()
    assert all(f"step {s}" in page.lower() or f">{s}<" in page for s in STEPS)
    assert f"training/{training_run}/index.html" in (deployed.store / "index.html").read_text()


def _training_run(output: str) -> str:
    """The training run id the watcher logged (`training run <id> (<source>): ...`)."""
    line = next(line for line in output.splitlines() if "training run " in line and "steps listed" in line)
    return line.split("training run ", 1)[1].split(" ", 1)[0]


def _deployment_runs(project: Deployed, deployment_id: Any) -> list[Any]:
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    flt = DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id]))
    return project.call(lambda c: c.read_flow_runs(deployment_filter=flt))
