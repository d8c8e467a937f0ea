"""A cached rerun's start-up: the temporary Prefect API keeps one migrated database, and each process
still runs a real flow run with its tasks on it (timings live in bench/resume_overhead.py)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from prefect.results import ResultStore
from prefect.serializers import JSONSerializer

from core.config import EvalConfig
from core.schema import to_parquet_bytes
from flows.plan import preflight
from ops.api import ApiDatabase
from tasks.collection.cache import result_storage
from tasks.collection.plan import BatchResult, batch_url, plan
from tasks.serving.sample_settings import samples_fingerprint
from tests.cli.conftest import EVALFLOW, REPO_ROOT


def cached_config(tmp_path: Path) -> dict[str, Any]:
    """An external-mode config whose batches are all in its store's cache: the run needs no server."""
    data = {
        "model": {"source": "m", "served_name": "m"},
        "server": {"mode": "external", "base_url": "http://127.0.0.1:9/v1"},  # never contacted
        "benchmarks": [{"name": "gsm8k", "limit": 4, "repeats": 2}],
        "collection": {"batch_size": 4},
        "store": {"url": str(tmp_path / "store")},
    }
    config, store, benchmarks, model_plan = preflight(EvalConfig.model_validate(data))
    fingerprint = samples_fingerprint(model_plan.fingerprint, config.server)
    storage = result_storage(store, save=False)
    records = ResultStore(result_storage=storage, serializer=JSONSerializer())
    for item in plan(benchmarks, config, fingerprint, storage, store):
        rows = [
            {
                "run_id": "seed",
                "benchmark": item.batch.benchmark,
                "env_version": "1",
                "batch_key": item.batch.key,
                "prompt_id": item.env.prompt_id(row),
                "repeat": repeat,
                "seed": 1,
                "model": "m",
                "model_fingerprint": fingerprint,
                "sampling": {},
                "messages": [{"role": "user", "content": "q"}],
                "completion": "#### 1",
                "finish_reason": "stop",
                "prompt_tokens": 5,
                "completion_tokens": 3,
                "turns": 1,
                "tool_calls": 0,
                "latency_s": 0.1,
                "reward": 0.0,
                "success": False,
                "parsed_answer": "1",
                "reference": "2",
                "error": None,
                "info": {},
                "created_at": datetime(2025, 1, 1, tzinfo=UTC),
            }
            for row in item.batch.rows
            for repeat in item.batch.repeats
        ]
        url = batch_url(store.path("runs", "seed"), item.batch)
        store.write_bytes(url, to_parquet_bytes(rows))
        records.write(BatchResult(url, len(rows), 0, 3 * len(rows), 0.1).as_record(), key=item.batch.cache_key)
    return data


def test_the_api_database_is_migrated_once_then_reused(tmp_path: Path) -> None:
    first = ApiDatabase(tmp_path, "9.9.9")
    assert first.settings()["PREFECT_SERVER_DATABASE_MIGRATE_ON_START"] == "true"
    first.path.touch()  # what the first server's start-up creates
    first.release(served=True)
    again = ApiDatabase(tmp_path, "9.9.9")
    settings = again.settings()
    assert settings["PREFECT_SERVER_DATABASE_MIGRATE_ON_START"] == "false"
    assert settings["PREFECT_SERVER_DATABASE_CONNECTION_URL"] == f"sqlite+aiosqlite:///{first.path}"
    other_version = ApiDatabase(tmp_path, "9.9.10")  # never a database another Prefect version migrated
    assert other_version.settings()["PREFECT_SERVER_DATABASE_MIGRATE_ON_START"] == "true"
    other_version.release(served=False)  # its server failed: the next start migrates again
    assert not other_version.migrated


def test_a_second_process_reuses_the_api_database_and_still_records_its_flow_run(tmp_path: Path) -> None:
    config = tmp_path / "eval.yaml"
    config.write_text(yaml.safe_dump(cached_config(tmp_path)))
    home = tmp_path / "prefect-home"
    drop = ("PREFECT_API_URL", "PREFECT_SERVER_DATABASE_CONNECTION_URL", "PREFECT_API_DATABASE_CONNECTION_URL")
    env = {k: v for k, v in os.environ.items() if k not in drop} | {"PREFECT_HOME": str(home)}
    database = ApiDatabase(home, _prefect_version())
    flow_runs, stamps = [], []
    for _ in range(2):
        done = subprocess.run(
            [EVALFLOW, "run", "--config", str(config)], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
            timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        metrics = Path(next(line.split(": ", 1)[1] for line in done.stdout.splitlines() if line.startswith("metrics:")))
        flow_runs.append(json.loads(metrics.read_text())["run_info"]["flow_run_id"])
        stamps.append((database.marker.stat().st_mtime_ns, database.path.stat().st_ino))
    assert stamps[0] == stamps[1]  # the same file, marked migrated by the first process only
    with sqlite3.connect(database.path) as db:
        for flow_run in flow_runs:
            flow = db.execute(
                "SELECT flow.name, flow_run.state_type FROM flow_run JOIN flow ON flow.id = flow_run.flow_id "
                "WHERE flow_run.id = ?",
                (flow_run,),
            ).fetchall()
            assert flow == [("eval", "COMPLETED")]
            tasks = db.execute(
                "SELECT task_key, state_type FROM task_run WHERE flow_run_id = ?", (flow_run,)
            ).fetchall()
            assert {(key.split("-")[0], state) for key, state in tasks} >= {
                ("analyze_task", "COMPLETED"),
                ("report_task", "COMPLETED"),
            }


def _prefect_version() -> str:
    from importlib.metadata import version

    return version("prefect")


def test_a_running_local_server_is_used_instead_of_a_temporary_api(
    prefect_server: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make server` / `make demo` leave this checkout's server up: `evalflow run` then records its runs
    there (they show in the UI the user has open) and starts no temporary API."""
    from ops import api, local

    api_url, _home = prefect_server
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setattr(local, "HOME", tmp_path)
    monkeypatch.setattr(local, "DEFAULT_API", api_url)
    assert api.running_local_server() is None  # no pid file: not started here
    (tmp_path / "server.pid").write_text(str(os.getpid()))
    assert api.running_local_server() == api_url
    try:
        with api.started_api() as temporary:
            assert temporary is None and os.environ["PREFECT_API_URL"] == api_url
    finally:
        os.environ.pop("PREFECT_API_URL", None)  # set by started_api for this process's flow runs
    monkeypatch.setattr(local, "DEFAULT_API", "http://127.0.0.1:9/api")  # the pid is alive, nothing answers
    assert api.running_local_server() is None
