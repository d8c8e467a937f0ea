"""Rescoring without a server, against the real vLLM server behind the fault proxy (which counts requests):
a change of scoring alone rescores the cached completions and sends no generation request; a change of the
prompts generates again."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from cli.main import app
from core.config import EvalConfig
from core.record import RunRecord
from flows.eval import eval_flow
from tasks.serving.server import Endpoint
from tests.conftest import REPO_ROOT
from tests.faultproxy import FaultProxy

pytestmark = pytest.mark.e2e

ENV_FILE = '''
from typing import Any, ClassVar
from envs.base import Score
from envs.gsm8k import GSM8KEnv


class MyGSM(GSM8KEnv):
    """The built-in's prompts, the team's own scoring."""

    name: ClassVar[str] = "mygsm"
    version: ClassVar[str] = "1"

    def score(self, row: dict[str, Any], completion: str) -> Score:
        base = super().score(row, completion)
        return Score(base.reward, base.success, base.parsed_answer, {**base.info, "rule": "SCORING"})
'''


def run(data: dict) -> RunRecord:
    return asyncio.run(eval_flow(EvalConfig.model_validate(data)))


def rollouts(record: RunRecord) -> list[tuple]:
    files = sorted(str(p) for p in Path(record.collection.run_dir).glob("rollouts/*/*.parquet"))
    sql = f"select prompt_id, repeat, completion, reward, info from read_parquet({files}) order by 1, 2"
    return duckdb.sql(sql).fetchall()


def test_a_scoring_change_rescores_the_cached_completions_with_no_request(
    proxy: FaultProxy, endpoint: Endpoint, prefect_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_file = tmp_path / "team" / "mygsm.py"
    env_file.parent.mkdir()
    env_file.write_text(ENV_FILE.replace("SCORING", "as built in"))
    monkeypatch.chdir(tmp_path)  # the reference below is relative to the working directory
    data = {
        "model": {"source": endpoint.model, "served_name": endpoint.model},
        "server": {"mode": "external", "base_url": proxy.base_url},
        "sampling": {"temperature": 0.8, "max_tokens": 64},
        "benchmarks": [{"name": "team/mygsm.py:MyGSM", "limit": 4, "repeats": 2}],
        "collection": {"batch_size": 4, "concurrency": 4},
        "store": {"url": str(tmp_path / "store")},
    }
    first = run(data)
    generated = proxy.counts.forwarded
    assert generated == 8 + 1  # 8 rollouts and the endpoint check
    assert first.benchmarks["mygsm"].n_rollouts == 8 and first.run_info.status.state == "complete"

    # the scoring changes (every answer counts), the prompts do not, and the version is not bumped
    env_file.write_text(ENV_FILE.replace("SCORING", "lenient").replace("base.reward, base.success", "1.0, True"))
    os.utime(env_file, ns=(1, 1))
    second = run(data)
    assert proxy.counts.forwarded == generated  # not one request: the completions were rescored
    before, after = rollouts(first), rollouts(second)
    assert [r[:3] for r in after] == [r[:3] for r in before]  # the same completions
    assert all(r[3] == 1.0 and '"rule":"lenient"' in r[4].replace(" ", "") for r in after)
    assert second.benchmarks["mygsm"].accuracy == 1.0 and second.run_info.status.state == "complete"
    assert (second.collection.batches_total, second.collection.batches_cached) == (2, 2)

    third = run(data)  # the rescored batches are cached results themselves
    assert proxy.counts.forwarded == generated and rollouts(third) == after

    # `evalflow rescore RUN_ID`: a new run from the first one's completions, naming it, from another directory
    monkeypatch.chdir(tmp_path / "team")
    cli = CliRunner()
    result = cli.invoke(app, ["rescore", first.run_info.run_id, "--store", str(tmp_path / "store")])
    assert result.exit_code == 0, result.output
    new_id = result.stdout.split(" as ", 1)[1].split()[0]
    record = RunRecord.model_validate_json((tmp_path / "store" / "runs" / new_id / "metrics.json").read_text())
    assert record.run_info.rescored_from == first.run_info.run_id and record.benchmarks["mygsm"].accuracy == 1.0
    assert proxy.counts.forwarded == generated
    # a rescore whose prompts differ from the run's cannot be one: it fails before any request
    changed = ["rescore", first.run_info.run_id, "--store", str(tmp_path / "store"), "benchmarks.0.options.fewshot=1"]
    result = cli.invoke(app, changed)
    assert result.exit_code == 2 and proxy.counts.forwarded == generated
    assert "rescore of " + first.run_info.run_id + ": 2 of 2 batches have no cached completions" in result.stderr
    monkeypatch.chdir(tmp_path)

    # a prompt change is a new generation
    data["benchmarks"][0]["options"] = {"system_prompt": "Be brief."}
    fourth = run(data)
    assert proxy.counts.forwarded == generated + 8 + 1 and fourth.benchmarks["mygsm"].n_rollouts == 8


def test_the_yaml_twin_of_gsm8k_scores_the_built_ins_completions_as_it_does(
    proxy: FaultProxy, endpoint: Endpoint, prefect_home: Path, tmp_path: Path
) -> None:
    """A declarative task can express a built-in: the twin's requests are the built-in's (so its run rescores
    the built-in's completions, with no request), and every score it shares with the built-in is equal."""
    data = {
        "model": {"source": endpoint.model, "served_name": endpoint.model},
        "server": {"mode": "external", "base_url": proxy.base_url},
        "sampling": {"temperature": 0.8, "max_tokens": 96},
        "benchmarks": [{"name": "gsm8k", "limit": 8, "repeats": 2}],
        "collection": {"batch_size": 8, "concurrency": 8},
        "store": {"url": str(tmp_path / "store")},
    }
    built_in = run(data)
    generated = proxy.counts.forwarded
    data["benchmarks"] = [{"task": str(REPO_ROOT / "tests/envs/data/tasks/gsm8k_twin.yaml"), "limit": 8, "repeats": 2}]
    twin = run(data)
    assert proxy.counts.forwarded == generated  # the same requests: rescored, not generated
    ours, theirs = built_in.benchmarks["gsm8k"], twin.benchmarks["gsm8k_twin"]
    assert (theirs.n_rollouts, theirs.accuracy, theirs.pass_at_k) == (ours.n_rollouts, ours.accuracy, ours.pass_at_k)
    shared = {m.key: m.value for m in ours.env_metrics}
    twin_metrics = {m.key: m.value for m in theirs.env_metrics if m.key in shared}
    assert twin_metrics == {k: v for k, v in shared.items() if k in twin_metrics} and len(twin_metrics) >= 5
    assert [r[:4] for r in rollouts(twin)] == [r[:4] for r in rollouts(built_in)]
