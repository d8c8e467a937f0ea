"""A managed judge server SIGKILLed mid-phase (the real process group, not a proxy): the run fails with judge
errors, every answer the judge gave before it died is on disk whole, and the rerun (a new judge server) asks only
for the rest. The policy's completions are never asked for again."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from core.config import EvalConfig
from core.record import RunRecord
from flows.eval import eval_flow
from tasks.collection.failures import RunFailed
from tasks.judging import client as judge_client
from tasks.serving.server import Endpoint, VLLMServer
from tests.conftest import FAST_START, REPO_ROOT, group_alive
from tests.faultproxy import FaultProxy

pytestmark = pytest.mark.e2e


def run(data: dict) -> RunRecord:
    return asyncio.run(eval_flow(EvalConfig.model_validate(data)))


def answers(store: Path) -> list[Path]:
    return sorted((store / "cache" / "judge").glob("*/*.json"))


def test_a_managed_judge_killed_mid_phase_keeps_what_it_gave_and_the_rerun_asks_only_the_rest(
    proxy: FaultProxy, endpoint: Endpoint, prefect_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(judge_client, "BACKOFF_S", 0.05)
    task = tmp_path / "judged_qa.yaml"
    shutil.copy(REPO_ROOT / "examples/tasks/judged_qa.jsonl", tmp_path)
    # three sampled judge answers per rollout: work enough for the kill to land mid-phase
    task.write_text((REPO_ROOT / "examples/tasks/judged_qa.yaml").read_text().replace(
        "      calibrate_with: contains_reference", "      calibrate_with: contains_reference\n      samples: 3"
    ))  # fmt: skip
    store = tmp_path / "store"
    data = {
        "model": {"source": endpoint.model, "served_name": endpoint.model},
        "server": {"mode": "external", "base_url": proxy.base_url},
        "sampling": {"temperature": 0.8, "max_tokens": 40},
        "benchmarks": [{"task": str(task), "repeats": 2}],
        "collection": {"batch_size": 8, "batch_retries": 0},
        "store": {"url": str(store)},
        "judge": {
            "server": {"mode": "managed", "extra_args": FAST_START},
            "sampling": {"temperature": 0.7, "max_tokens": 16},
            "concurrency": 2,
        },
    }
    killed: list[int] = []

    def killer() -> None:  # SIGKILL the judge's server group once it has given a few answers
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline and not killed:
            try:  # the registry is changed by the flow's thread meanwhile
                live = list(VLLMServer._live)
            except RuntimeError:
                continue
            judges = [s for s in live if s.log_path.name == "vllm-judge.log" and tmp_path in s.log_path.parents]
            if judges and judges[0].pid and len(answers(store)) >= 4:
                killed.append(judges[0].pid)
                os.killpg(judges[0].pid, signal.SIGKILL)
            time.sleep(0.05)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    with pytest.raises(RunFailed, match="judge errors"):
        run(data)
    thread.join(5)
    assert killed, "the judge's server was never killed"
    assert not group_alive(killed[0])
    policy = proxy.counts.forwarded
    given = answers(store)
    assert 4 <= len(given) < 24 * 3
    for path in given:  # whole answers only, each as the judge gave it
        record = json.loads(path.read_text())
        assert record["finish_reason"] in ("stop", "length") and isinstance(record["text"], str)

    again = run(data)  # a new judge server; the policy's completions are cached
    assert again.run_info.status.state == "complete" and proxy.counts.forwarded == policy
    judge = again.run_info.judge
    assert judge is not None and judge.started_s is not None and judge.failed == 0
    total = len(answers(store))
    assert judge.requests == total - len(given)  # only what the killed judge never gave
    assert again.benchmarks["judged_qa"].n_rollouts == 24
