"""A user's benchmark code that fails on some rollouts, on the real vLLM server: each failure is an
environment error on its rollout (counted apart, in the record and the report), its batch is never cached,
and once the code is fixed a rerun generates only what failed (the rest is rescored from its completions)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from core.config import EvalConfig
from core.record import RunRecord
from flows.eval import eval_flow
from tasks.serving.server import Endpoint
from tests.faultproxy import FaultProxy

pytestmark = pytest.mark.e2e

ENV_FILE = """
import time
from typing import Any, ClassVar
from envs.base import Score
from envs.gsm8k import GSM8KEnv


class Moody(GSM8KEnv):
    name: ClassVar[str] = "moody"
    version: ClassVar[str] = "1"

    def score(self, row: dict[str, Any], completion: str) -> Any:
        if BROKEN and row["id"] == "gsm-0000":
            raise KeyError("no such field")
        if BROKEN and row["id"] == "gsm-0001":
            time.sleep(30)  # longer than collection.env_timeout_s
        if BROKEN and row["id"] == "gsm-0002":
            return {"reward": 1.0}
        return super().score(row, completion)
"""


def test_a_failing_scorer_is_an_environment_error_and_its_batches_are_not_cached(
    proxy: FaultProxy, endpoint: Endpoint, prefect_home: Path, tmp_path: Path
) -> None:
    env_file = tmp_path / "moody.py"
    env_file.write_text("BROKEN = True\n" + ENV_FILE)
    data = {
        "model": {"source": endpoint.model, "served_name": endpoint.model},
        "server": {"mode": "external", "base_url": proxy.base_url},
        "sampling": {"temperature": 0.8, "max_tokens": 48},
        "benchmarks": [{"name": f"{env_file}:Moody", "limit": 4, "repeats": 2}],
        # a batch per prompt; up to 80% of the rollouts may fail before the run does
        "collection": {"batch_size": 2, "concurrency": 8, "max_failed_share": 0.8, "env_timeout_s": 1.0},
        "store": {"url": str(tmp_path / "store")},
    }
    first = asyncio.run(eval_flow(EvalConfig.model_validate(data)))
    status = first.run_info.status
    assert (status.state, status.failed_rollouts, status.environment_errors) == ("incomplete", 6, 6)
    reasons = " ".join(reason for batch in status.failed_batches for reason, _ in batch.reasons)
    assert "environment 'moody' score: raised KeyError: 'no such field'" in reasons
    assert "did not return within 1 s (collection.env_timeout_s)" in reasons
    assert "returned dict, not an envs.base.Score" in reasons
    assert {b.kind for b in status.failed_batches} == {"environment"}
    assert first.benchmarks["moody"].n_rollouts == 2  # only gsm-0003's rollouts are results
    report = Path(first.collection.reports["markdown"]).read_text()
    assert "incomplete (6 of 8 rollouts failed, 6 of them environment errors)" in report
    requests = proxy.counts.forwarded

    env_file.write_text("BROKEN = False\n" + ENV_FILE)  # fixed, without a version bump
    os.utime(env_file, ns=(1, 1))
    second = asyncio.run(eval_flow(EvalConfig.model_validate(data)))
    assert second.run_info.status.state == "complete" and second.benchmarks["moody"].n_rollouts == 8
    # the 6 failed rollouts are generated again (their batches were never cached); gsm-0003's are rescored
    assert proxy.counts.forwarded - requests == 6 + 1  # and the endpoint check
    assert isinstance(second, RunRecord)
