"""Results you can trust, against the real vLLM server: a wrong endpoint fails in seconds naming the
field, failed rollouts are never cached or counted, a failed run is never a baseline, no file a run
leaves holds the API key, and nothing a killed run started outlives it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from core.config import EvalConfig
from core.record import IndexEntry
from flows.eval import eval_flow
from tasks.collection.failures import RunFailed
from tasks.reporting.index import read_entries
from tasks.serving.preflight import EndpointError
from tasks.serving.server import Endpoint
from tests.conftest import REPO_ROOT, wait_for
from tests.faultproxy import FaultProxy, Faults
from tests.secretscan import find_secret

pytestmark = pytest.mark.e2e

SECRET = "sk-evalflow-e2e-7f3a9c1d5b2e8f40"


def config(store: Path, base_url: str, model: str, **overrides: object) -> dict:
    data = {
        "run_name": "trust",
        "model": {"source": model, "served_name": model},
        "server": {"mode": "external", "base_url": base_url, "api_key": SECRET},
        "sampling": {"temperature": 0.8, "max_tokens": 32},
        "benchmarks": [{"name": "gsm8k", "limit": 10, "repeats": 2}],
        "collection": {"batch_size": 4, "concurrency": 4, "max_request_retries": 0, "batch_retries": 0},
        "store": {"url": str(store)},
    }
    data.update(overrides)
    return data


def evalflow(args: list[str], **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("evalflow")), "run", *args], cwd=REPO_ROOT, capture_output=True, text=True,
        env={**os.environ, **env}, timeout=300,
    )  # fmt: skip
    return proc, time.monotonic() - started


def test_wrong_model_name_or_dead_url_fail_before_the_engine_naming_the_field(
    endpoint: Endpoint, prefect_home: Path, tmp_path: Path
) -> None:
    path = tmp_path / "eval.yaml"
    path.write_text(yaml.safe_dump(config(tmp_path / "store", endpoint.base_url, "not-the-model")))
    proc, seconds = evalflow(["--config", str(path)])
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "model.served_name 'not-the-model' is not served" in lines[0], proc.stderr
    assert repr(endpoint.model) in lines[0]  # the names the server does offer
    assert seconds < 30, seconds  # imports included; the check itself is one request

    proc, seconds = evalflow(["--config", str(path), "server.base_url=http://127.0.0.1:9/v1"])
    assert proc.returncode == 2 and "server.base_url http://127.0.0.1:9/v1: unreachable" in proc.stderr
    assert not (tmp_path / "store" / "cache").exists()  # nothing cached, nothing collected

    with pytest.raises(EndpointError, match=r"model\.served_name 'not-the-model'"):  # a deployment run: same check
        asyncio.run(eval_flow(EvalConfig.model_validate(config(tmp_path / "s2", endpoint.base_url, "not-the-model"))))


def test_failed_rollouts_fail_the_run_are_never_cached_and_a_rerun_sends_only_them(
    endpoint: Endpoint, prefect_home: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    # seed 0: the first draw (the 1-token endpoint check) passes, then about 30% of rollouts get a 503
    proxy = FaultProxy(endpoint.base_url.removesuffix("/v1"), Faults(error_rate=0.3, seed=0)).start()
    try:
        data = config(store, proxy.base_url, endpoint.model)
        with pytest.raises(RunFailed, match=r"failed transiently, more than collection\.max_failed_share"):
            asyncio.run(eval_flow(EvalConfig.model_validate(data)))
        injected = proxy.counts.errors
    finally:
        proxy.stop()
    assert injected > 0
    (entry,) = read_entries_local(store)
    assert entry.status == "failed"
    report = (store / entry.markdown).read_text()
    assert "**FAILED:" in report.split("## Headline")[0]  # said at the top
    records = [p.read_text() for p in (store / "cache" / "batches").iterdir() if p.is_file()]
    finished = [r for r in records if "completion_tokens" in r]  # batch records (url, rollouts, ...)
    failures = [r for r in records if "BatchFailed" in r]  # what Prefect keeps of a failed task: our line only
    batch_files = list((store / entry.report).parent.glob("rollouts/*/*.parquet"))
    assert len(finished) == len(batch_files) < 5 and len(failures) == 5 - len(finished)
    assert not any("__exc_type__" in r or "Traceback" in r for r in records)

    healthy = FaultProxy(endpoint.base_url.removesuffix("/v1")).start()
    try:
        result = asyncio.run(eval_flow(EvalConfig.model_validate(config(store, healthy.base_url, endpoint.model))))
        sent = healthy.counts.forwarded
    finally:
        healthy.stop()
    assert result.state == "complete"
    assert sent == injected + 1  # the failed rollouts only (their batches kept the rest), plus the 1-token check
    bench = result.model_dump(mode="json")["benchmarks"]["gsm8k"]
    assert bench["n_rollouts"] == 20 and bench["error_count"] == 0
    assert result.comparison is None  # the failed run is never a baseline

    # no file the runs left (store, Prefect home with its database and logs) holds the API key
    assert find_secret([store, prefect_home], [SECRET]) == []


def read_entries_local(store: Path) -> list[IndexEntry]:
    from core.store import Store

    return read_entries(Store(str(store)))


def _api_servers(parent: int) -> list[int]:
    """PIDs of temporary Prefect API servers (uvicorn running create_app) descended from `parent`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if "prefect.server.api.server:create_app" in cmdline and "reaper.py" not in cmdline:
            found.append((int(proc.name), int(stat[1]), int(stat[2])))  # pid, ppid, pgid
    return [pid for pid, _ppid, _pgid in found if _descends(pid, parent)]


def _descends(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            return False
    return False


def test_a_sigkilled_run_leaves_no_prefect_api_and_analytics_are_off(endpoint: Endpoint, tmp_path: Path) -> None:
    path = tmp_path / "eval.yaml"
    path.write_text(yaml.safe_dump(config(tmp_path / "store", endpoint.base_url, endpoint.model)))
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "PREFECT_SERVER_ANALYTICS_ENABLED")}
    env.update(PREFECT_HOME=str(tmp_path / "home"), PREFECT_SERVER_ANALYTICS_ENABLED="true")  # the user's choice
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "run", "--config", str(path)], cwd=REPO_ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        (server,) = wait_for(lambda: _api_servers(proc.pid), 180, "the run's temporary Prefect API")
        environ = dict(
            item.split("=", 1) for item in Path(f"/proc/{server}/environ").read_text().split("\0") if "=" in item
        )
        assert environ["PREFECT_SERVER_ANALYTICS_ENABLED"] == "false"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        wait_for(lambda: not Path(f"/proc/{server}").exists(), 30, "the temporary API to go with its run")
    finally:
        proc.kill()
