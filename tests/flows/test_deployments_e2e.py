"""Deployments the way operators use them: a real `prefect server start` on loopback, `prefect deploy`
from prefect.yaml (through `evalflow local deploy`), real process workers, runs started with
`evalflow local run` (a flow run of the deployment, its logs followed), state changes and artifacts
read through the Prefect API."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tasks.serving.server import Endpoint
from tests.cli.conftest import EVALFLOW
from tests.conftest import wait_for
from tests.faultproxy import FaultProxy
from tests.flows.conftest import Deployed
from tests.flows.test_resume_e2e import cache_records, config_data, pairs

pytestmark = pytest.mark.e2e


def run_id_of(output: str) -> str:
    line = next(line for line in output.splitlines() if "UUID:" in line)
    return line.split("UUID:")[1].strip()


def test_deploy_registers_every_deployment_with_blocks_and_schedule(deployed: Deployed) -> None:
    from blocks import RunStoreBlock, VLLMServerBlock

    names = {"eval/smoke", "eval/qwen3-4b", "eval/nightly-baseline", "eval/baselines", "sweep/temperature"}
    found = {name: deployed.deployment(name) for name in names}
    # Prefect's boxes and hints folded to a line per deployment (its whole output kept in .prefect/deploy.log)
    lines = [line for line in deployed.deploy_output.splitlines() if line.startswith("deployment ")]
    assert names <= {line.removeprefix("deployment ").removesuffix(": created") for line in lines}
    assert "View Deployment in UI" not in deployed.deploy_output and "╭" not in deployed.deploy_output
    again = deployed.ops("deploy")  # nothing changed: the server has them all, Prefect's deploy is not run again
    assert again.returncode == 0 and f"{len(lines)} deployments: unchanged since the last deploy" in again.stdout
    qwen = found["eval/qwen3-4b"].parameters["config"]
    assert qwen["model"]["source"] == "Qwen/Qwen3-4B" and qwen["server"] == {"block": "qwen3-4b-h100"}
    assert qwen["sampling"] == {"temperature": 0.6, "top_p": 0.95, "max_tokens": 4096, "seed": 1234}
    assert [(b["name"], b["repeats"]) for b in qwen["benchmarks"]] == [("tetris", 16), ("gsm8k", 4)]
    assert qwen["collection"] == {"batch_size": 64}  # concurrency found while collecting
    assert found["eval/qwen3-4b"].work_pool_name == "evalflow-gpu"
    assert found["eval/smoke"].work_pool_name == "evalflow-cpu"
    baselines = found["eval/baselines"].parameters["config"]
    assert [b.get("label", b["name"]) for b in baselines["benchmarks"]] == [
        "gsm8k_0shot", "gsm8k_4shot", "gsm8k_8shot", "math_4shot", "ifeval", "mbpp_3shot", "humaneval",
    ]  # fmt: skip
    (nightly,) = found["eval/nightly-baseline"].schedules
    assert (nightly.schedule.cron, nightly.schedule.timezone, nightly.active) == ("0 2 * * *", "UTC", True)

    async def scheduled(client: Any) -> list[Any]:  # the server's scheduler creates the nightly runs
        from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

        flt = DeploymentFilter(id=DeploymentFilterId(any_=[found["eval/nightly-baseline"].id]))
        return await client.read_flow_runs(deployment_filter=flt)

    runs = wait_for(lambda: deployed.call(scheduled), 120, "the scheduler to create eval/nightly-baseline runs")
    assert all(run.state_name == "Scheduled" and run.expected_start_time.hour == 2 for run in runs)
    # the UI renders EvalConfig as a form from this schema
    schema = found["eval/smoke"].parameter_openapi_schema
    assert {"model", "server", "sampling", "benchmarks", "store"} <= set(
        schema["definitions"]["EvalConfig"]["properties"]
    )

    async def blocks(client: Any) -> tuple[Any, Any]:
        gpu = await VLLMServerBlock.aload("qwen3-4b-h100", client=client)
        runs = await RunStoreBlock.aload("runs", client=client)
        return gpu, runs

    gpu, runs = deployed.call(blocks)
    assert (gpu.settings.tool_call_parser, gpu.settings.tensor_parallel_size) == ("hermes", 1)
    assert (gpu.settings.gpu_memory_utilization, gpu.settings.max_model_len) == (0.85, 32768)
    assert runs.url == str(deployed.store)


def test_smoke_deployment_run_completes_with_report_and_artifacts(deployed: Deployed) -> None:
    """The deployment's config at test scale, plus a user's YAML task from this checkout (the worker's working
    directory: the deployment's pull step sets it), which runs like a built-in."""
    from tests.conftest import REPO_ROOT

    params = deployed.params("eval/smoke")["config"]
    params["benchmarks"][0].update(limit=4, repeats=2)
    task = str(REPO_ROOT / "examples/tasks/science_mc.yaml")
    params["benchmarks"].append({"task": task, "limit": 4, "repeats": 1})
    params["sampling"]["max_tokens"] = 64
    out = deployed.ops("run", "eval/smoke", "--param", f"config={json.dumps(params)}")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "state: Completed" in out.stdout
    assert out.stdout.count("total rollouts: 12") == 1  # the headline table once: the run's own last log line
    report = Path(next(line for line in out.stdout.splitlines() if line.startswith("report: "))[len("report: ") :])
    assert report.is_file() and report.is_relative_to(deployed.store)  # the `runs` store block's folder
    metrics = json.loads((report.parent / "metrics.json").read_text())
    assert metrics["benchmarks"]["gsm8k"]["n_rollouts"] == 8
    assert metrics["benchmarks"]["science_mc"]["n_rollouts"] == 4
    bench = {b["benchmark"]: b for b in metrics["run_info"]["provenance"]["benchmarks"]}["science_mc"]
    assert bench["env_ref"] == task and bench["env_fingerprint"]
    assert metrics["run_info"]["deployment"] == "smoke"
    server = metrics["run_info"]["config"]["server"]  # from the cpu-smoke block
    assert (server["extra_args"][0], server["tool_call_parser"]) == ("--enforce-eager", "hermes")
    assert (report.parent / "logs" / "vllm.log").is_file()  # a managed server was started and logged

    artifacts = deployed.artifacts(run_id_of(out.stdout))
    assert "gsm8k" in artifacts["eval-report"].data
    table = artifacts["eval-report-metrics"].data
    rows = json.loads(table) if isinstance(table, str) else table
    assert [(row["benchmark"], row["rollouts"]) for row in rows] == [("gsm8k", 8), ("science_mc", 4)]
    assert str(report) in artifacts["eval-report-html"].data


def external(params: dict[str, Any], endpoint: Endpoint, **server: Any) -> dict[str, Any]:
    """A deployment's config pointed at the tests' shared vLLM server (no server started)."""
    params = json.loads(json.dumps(params))
    params["model"] = {"source": endpoint.model, "served_name": endpoint.model}
    params["server"] = {"mode": "external", "base_url": endpoint.base_url, **server}
    params["benchmarks"] = [{"name": "gsm8k", "limit": 4, "repeats": 2}]
    params["sampling"]["max_tokens"] = 64
    return params


WORDS = ["apple", "river", "garden", "planet", "silver", "window", "orange", "castle", "pencil", "forest", "rocket",
         "bridge"]  # fmt: skip
ECHO_TASK = """name: echo
version: "1"
description: Repeat a word back (a planted-regression check of the nightly path).
dataset: words.jsonl
id_field: id
fields: [word]
prompt:
  user: "Repeat this word once, and nothing else: {{ word }}"
reference_field: word
scorer: SCORER
"""
LENIENT = "{kind: contains, ignore_case: true}"  # the word anywhere in the answer
STRICT = "{kind: exact_match, ignore_case: true, ignore_punctuation: true}"  # the answer is the word: a subset


def echo_task(folder: Path, scorer: str) -> Path:
    """A small YAML task the default model half solves; its scorer is what the test makes stricter."""
    folder.mkdir(exist_ok=True)
    rows = [json.dumps({"id": f"w{i:02d}", "word": w}) for i, w in enumerate(WORDS)]
    (folder / "words.jsonl").write_text("\n".join(rows) + "\n")
    (folder / "echo.yaml").write_text(ECHO_TASK.replace("SCORER", scorer))
    return folder / "echo.yaml"


def test_nightly_baseline_compares_gates_and_lists_flips(
    deployed: Deployed, endpoint: Endpoint, tmp_path: Path
) -> None:
    """Three nightly runs: the second repeats the first (every batch cached: no regression, the gate passes); before
    the third the echo task's scorer is made stricter, a planted regression: its completions are rescored from the
    cache, its report lists the prompts that flipped, its record and artifact carry the failed gate, and
    `evalflow compare` exits 1 on it (0 on the second)."""
    task = echo_task(tmp_path / "echo", LENIENT)
    params = external(deployed.params("eval/nightly-baseline")["config"], endpoint)
    params["benchmarks"].append({"task": str(task), "repeats": 2})
    params["gate"] = {"rule": "absolute", "max_drop": 0.05}  # the nightly's own threshold: 5 points
    runs, reports, flow_runs = [], [], []
    for night in range(3):
        if night == 2:
            echo_task(tmp_path / "echo", STRICT)
        out = deployed.ops("run", "eval/nightly-baseline", "--param", f"config={json.dumps(params)}")
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]  # a failed gate is no failed run
        report = next(line for line in out.stdout.splitlines() if line.startswith("report: "))[len("report: ") :]
        reports.append(Path(report))
        runs.append(json.loads((Path(report).parent / "metrics.json").read_text()))
        flow_runs.append(run_id_of(out.stdout))
    first, second, third = runs
    assert first["run_info"]["deployment"] == "nightly-baseline" and "comparison" not in first
    comparison = second["comparison"]
    assert comparison["baseline"]["run_id"] == first["run_info"]["run_id"]
    assert comparison["regressions"] == []  # same inputs, every batch cached: identical rollouts
    assert comparison["gate"]["passed"] is True and comparison["gate"]["rules"] == params["gate"]
    assert second["benchmarks"]["gsm8k"]["accuracy"] == first["benchmarks"]["gsm8k"]["accuracy"]
    assert comparison["benchmarks"]["echo"]["accuracy"]["method"] == "paired-clustered"
    assert comparison["pairing"]["echo"]["shared"] == len(WORDS)

    before, after = second["benchmarks"]["echo"], third["benchmarks"]["echo"]
    assert before["accuracy"] > 0.2, "the default model should half solve the lenient echo task"
    assert after["accuracy"] < before["accuracy"] - 0.05  # the stricter scorer on the same completions
    planted = third["comparison"]
    row = planted["benchmarks"]["echo"]["accuracy"]
    assert row["delta"] == pytest.approx(after["accuracy"] - before["accuracy"]) and row["detectable"] > 0
    assert planted["gate"]["passed"] is False
    assert ("echo", "accuracy") in [(f["benchmark"], f["metric"]) for f in planted["gate"]["failures"]]
    assert planted["benchmarks"]["gsm8k"]["accuracy"]["delta"] == 0  # untouched benchmark, cached
    pairing = planted["pairing"]["echo"]
    assert pairing["gained_count"] == 0  # a stricter scorer never makes a prompt right
    page = reports[2].read_text()
    for flip in pairing["lost"]:
        assert f'data-prompt="{flip["prompt_id"]}"' in page
    assert f"{pairing['lost_count']} right → wrong, 0 wrong → right of {len(WORDS)} shared prompts" in page
    assert "gate FAILED" in deployed.artifacts(flow_runs[2])["eval-report"].data
    index = json.loads((deployed.store / "index.json").read_text())
    entry = next(e for e in index if e["run_id"] == third["run_info"]["run_id"])
    assert entry["gate_passed"] is False and "echo: accuracy" in entry["regressions"]

    def compare(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([EVALFLOW, "compare", *args, "--store", str(deployed.store)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)  # fmt: skip

    failing = compare(third["run_info"]["run_id"])
    assert failing.returncode == 1, failing.stdout + failing.stderr
    assert f"flips in echo: {pairing['lost_count']} right → wrong" in failing.stdout
    assert failing.stdout.splitlines()[-1].startswith("gate FAILED") and "echo accuracy delta" in failing.stdout
    passing = compare(second["run_info"]["run_id"], first["run_info"]["run_id"])
    assert passing.returncode == 0 and passing.stdout.splitlines()[-1].startswith("gate passed"), passing.stdout


def test_bad_parameters_fail_before_any_server_naming_the_field(deployed: Deployed) -> None:
    params = deployed.params("eval/smoke")["config"]
    negative = json.loads(json.dumps(params))
    negative["benchmarks"][0]["repeats"] = -1
    out = deployed.ops("run", "eval/smoke", "--param", f"config={json.dumps(negative)}")
    # the API checks the form against the schema: no flow run is created
    assert "config.benchmarks[0].repeats" in out.stdout + out.stderr and "state:" not in out.stdout

    wrong = json.loads(json.dumps(params))
    wrong["benchmarks"][0]["name"] = "gsm9k"
    wrong["store"] = {"url": "s4://bucket/evals"}
    started = time.monotonic()
    out = deployed.ops("run", "eval/smoke", "--param", f"config={json.dumps(wrong)}")
    assert out.returncode == 1 and "state: Failed" in out.stdout, out.stdout[-2000:]
    assert "config.benchmarks.0.name" in out.stdout and "unknown environment 'gsm9k'" in out.stdout
    assert "config.store.url" in out.stdout and "unknown protocol 's4'" in out.stdout
    assert time.monotonic() - started < 120
    assert deployed.task_runs([run_id_of(out.stdout)], "%") == []  # no conversion, no server, no batch


def test_sweep_runs_each_point_through_the_deployment_converting_once(deployed: Deployed, tmp_path: Path) -> None:
    """Two points (the 2 x 2 grid's expansion is tests/flows/test_sweep.py's): each a child flow run of
    eval/smoke with its own managed server; the model is converted once, by the sweep."""
    deployed.second_cpu_worker()  # the points may run on either worker
    params = deployed.params("sweep/temperature")
    config = params["config"]
    config["model"]["cache_dir"] = str(tmp_path / "checkpoints")  # a fresh conversion cache
    config["benchmarks"][0].update(limit=2)
    config["sampling"]["max_tokens"] = 32
    grid = {"benchmarks.0.repeats": [1, 2]}
    out = deployed.ops("run", "sweep/temperature", "--param", f"config={json.dumps(config)}",
                       "--param", f"grid={json.dumps(grid)}", timeout=1500)  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    sweep_run = run_id_of(out.stdout)

    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    children = deployed.call(lambda c: c.read_flow_runs(
        flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[sweep_run]))
    ))  # fmt: skip
    assert len(children) == 2 and all(c.state.is_completed() for c in children)
    assert {c.deployment_id for c in children} == {deployed.deployment("eval/smoke").id}
    # one conversion: the sweep converted, every child found it cached
    prepares = deployed.task_runs([sweep_run, *(c.id for c in children)], "prepare-model%")
    assert sorted(t.state.name for t in prepares) == ["Cached"] * 2 + ["Completed"]
    assert len([p for p in (tmp_path / "checkpoints").iterdir() if p.is_dir() and not p.name.startswith(".")]) == 1

    sweep = json.loads(next((deployed.store / "sweeps").glob("*/sweep.json")).read_text())
    assert sorted(p["values"]["benchmarks.0.repeats"] for p in sweep["points"]) == [1, 2]
    rollouts = {p["values"]["benchmarks.0.repeats"]: p["headline"]["gsm8k"]["rollouts"] for p in sweep["points"]}
    assert rollouts == {1: 2, 2: 4}
    assert all(p["state"] == "Completed" and (deployed.store / p["report"]).is_file() for p in sweep["points"])
    assert "sweep-report" in deployed.artifacts(sweep_run)


def test_retry_of_a_crashed_deployment_run_collects_only_lost_batches(
    deployed: Deployed, endpoint: Endpoint, tmp_path: Path
) -> None:
    """Kill the worker's flow-run process mid-run, mark the run crashed, retry it as the UI does: the
    same flow run id runs again and collects only the batches the crash lost."""
    from prefect.states import Crashed, Scheduled

    proxy = FaultProxy(endpoint.base_url.removesuffix("/v1")).start()
    try:
        store = tmp_path / "store"
        data = config_data(store, proxy.base_url, endpoint.model)
        data["benchmarks"][0]["limit"] = 12  # 6 batches of 4 rollouts, one at a time
        smoke = deployed.deployment("eval/smoke").id
        flow_run = deployed.call(lambda c: c.create_flow_run_from_deployment(smoke, parameters={"config": data}))

        def two_batches_persisted() -> bool:
            if len(cache_records(store)) >= 2:
                return True
            state = deployed.flow_run(flow_run.id).state
            assert not state.is_final(), f"the run ended before it could be killed: {state}"
            return False

        wait_for(two_batches_persisted, 600, "two persisted batches", interval=0.5)
        worker, pid = wait_for(lambda: deployed.flow_run_process(flow_run.id), 30, "the flow-run process")
        worker_log = deployed.worker_log(worker)

        def worker_advice() -> int:
            text = worker_log.read_text(errors="replace")
            return text.count("prefect.flow_runs.worker - Check whether the flow run exceeded its memory")

        advice_before = worker_advice()
        os.kill(pid, signal.SIGKILL)

        # the worker sees its process die and reports the crash (set it, as an operator would, if not: once
        # the worker has had its last word on it, there is nothing more to wait for)
        def crash_handled() -> bool:
            return deployed.flow_run(flow_run.id).state.is_crashed() or worker_advice() > advice_before

        with contextlib.suppress(AssertionError):
            wait_for(crash_handled, 60, "the worker to report the crash")
        if not deployed.flow_run(flow_run.id).state.is_crashed():
            crashed = Crashed(message="killed by the test")
            deployed.call(lambda c: c.set_flow_run_state(flow_run.id, crashed, force=True))
        persisted = len(cache_records(store))
        assert 2 <= persisted < 6

        # The worker proposes Crashed twice, seconds apart: its runner at once, then the worker itself
        # after the crash hooks ran. A retry between the two would be overwritten (as after a very quick
        # click in the UI), so retry once the worker is done: its last word is the SIGKILL advice.
        wait_for(lambda: worker_advice() > advice_before, 120, "the worker to finish handling the crash")

        before = proxy.counts.forwarded
        retry = Scheduled(name="AwaitingRetry")  # what the UI's Retry button does: the same flow run, again
        deployed.call(lambda c: c.set_flow_run_state(flow_run.id, retry, force=True))
        final = deployed.finished(flow_run.id, 600)
        assert final.state.is_completed(), final.state
        assert final.run_count >= 2  # the same flow run id ran again
        assert proxy.counts.forwarded - before == (6 - persisted) * 4 + 1  # and the 1-token endpoint check
        run_dirs = [d for d in (store / "runs").iterdir() if (d / "metrics.json").exists()]
        assert len(run_dirs) == 1
        assert pairs(str(run_dirs[0])) == sorted({(f"gsm-{i:04d}", r) for i in range(12) for r in range(2)})
    finally:
        proxy.stop()


def test_a_benchmark_the_worker_cannot_import_fails_before_anything_runs(
    deployed: Deployed, endpoint: Endpoint
) -> None:
    """A module the worker lacks fails the flow run in one line naming the module and the worker's host,
    before any server starts or batch runs (a user's task running through a deployment: the smoke test)."""
    import socket

    params = external(deployed.params("eval/smoke")["config"], endpoint)
    params["benchmarks"] = [{"name": "team_benchmarks.science:ScienceEnv", "limit": 4}]
    started = time.monotonic()
    out = deployed.ops("run", "eval/smoke", "--param", f"config={json.dumps(params)}")
    assert out.returncode == 1 and "state: Failed" in out.stdout, out.stdout[-2000:]
    assert "config.benchmarks.0.name" in out.stdout
    assert f"module 'team_benchmarks.science' cannot be imported on host {socket.gethostname()}" in out.stdout
    assert time.monotonic() - started < 120
    assert deployed.task_runs([run_id_of(out.stdout)], "%") == []  # no conversion, no server, no batch
