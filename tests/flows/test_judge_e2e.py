"""LLM judges end to end, on the real vLLM CPU server: the default model is the policy and the judge (a poor judge,
but real mechanics), each behind a fault proxy of its own that counts its requests. A YAML task with a judge rubric
runs; a scoring change that leaves the judge's questions alone sends no request at all; a rubric edit sends judge
requests only; a judge that dies mid-phase loses no verdict it gave and caches none it did not."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from core.config import EvalConfig
from core.record import RunRecord
from flows.eval import eval_flow
from tasks.collection.failures import RunFailed
from tasks.judging import client as judge_client
from tasks.serving.server import Endpoint
from tests.conftest import REPO_ROOT
from tests.faultproxy import FaultProxy

pytestmark = pytest.mark.e2e
N = 8  # rollouts: 4 prompts x 2 repeats


def run(data: dict) -> RunRecord:
    return asyncio.run(eval_flow(EvalConfig.model_validate(data)))


def cached_answers(store: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((store / "cache" / "judge").glob("*/*.json"))]


def test_a_judged_task_runs_rescores_for_free_and_survives_its_judge_dying(
    proxy: FaultProxy, endpoint: Endpoint, prefect_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(judge_client, "BACKOFF_S", 0.05)  # a dead judge is given up on sooner
    judge_proxy = FaultProxy(endpoint.base_url.removesuffix("/v1")).start()
    try:
        task = tmp_path / "tasks" / "judged_qa.yaml"
        task.parent.mkdir()
        shutil.copy(REPO_ROOT / "examples/tasks/judged_qa.yaml", task)
        shutil.copy(REPO_ROOT / "examples/tasks/judged_qa.jsonl", task.parent)
        monkeypatch.chdir(tmp_path / "tasks")  # the task is named relative to the working directory
        store = tmp_path / "store"
        served = {"source": endpoint.model, "served_name": endpoint.model}
        data = {
            "run_name": "judged",  # a run's baseline: the latest complete earlier run of the same name
            "model": served,
            "server": {"mode": "external", "base_url": proxy.base_url},
            "sampling": {"temperature": 0.8, "max_tokens": 40},
            "benchmarks": [{"task": "judged_qa.yaml", "limit": 4, "repeats": 2}],
            "collection": {"batch_size": 4, "batch_retries": 0},
            "store": {"url": str(store)},
            "judge": {"model": served, "server": {"mode": "external", "base_url": judge_proxy.base_url}},
        }
        first = run(data)
        assert first.run_info.status.state == "complete"
        assert proxy.counts.forwarded == N + 1  # N rollouts and the endpoint check
        # one greedy judge answer per question: rollouts with the same answer to the same prompt share one
        questions = len(cached_answers(store))
        assert judge_proxy.counts.forwarded == questions and N // 2 <= questions <= N
        judge = first.run_info.judge
        assert judge is not None and (judge.asked, judge.requests, judge.failed) == (N, questions, 0)
        assert judge.cached == N - questions
        [stats] = judge.metrics
        assert (stats.benchmark, stats.metric, stats.judged, stats.labelled) == ("judged_qa", "judge_correct", N, N)
        assert stats.both_pass + stats.judge_only + stats.label_only + stats.both_fail == N
        bench = first.benchmarks["judged_qa"]
        metrics = {m.key: m.value for m in bench.env_metrics}
        assert metrics["judge_correct"] == stats.passed / N == bench.accuracy
        assert "judge_correct_unparsed" in metrics and "contains_reference" in metrics
        report = (Path(first.collection.run_dir) / "report.md").read_text()
        assert "## Judge" in report and f"| judged_qa | judge_correct | {N} |" in report

        # a scoring change the judge's questions do not see (the rule metric's case): rescored, the judge's answers
        # all from its cache: not one request to either server
        task.write_text(task.read_text().replace("ignore_case: true", "ignore_case: false"))
        second = run(data)
        assert (proxy.counts.forwarded, judge_proxy.counts.forwarded) == (N + 1, questions)
        assert second.run_info.judge is not None and second.run_info.judge.cached == N
        assert second.benchmarks["judged_qa"].accuracy == bench.accuracy

        # a rubric edit asks the judge again (and only the judge); the judge dies after 5 answers
        task.write_text(task.read_text().replace("You grade answers", "You grade short answers"))
        answered = judge_proxy.counts.answered
        judge_proxy.die_after = answered + 5
        with pytest.raises(RunFailed, match="judge errors"):
            run(data)
        given = judge_proxy.counts.answered - answered
        assert proxy.counts.forwarded == N + 1 and given >= 5
        # every answer the judge gave is cached, and nothing else is
        assert len(cached_answers(store)) == questions + given
        assert all(a["text"] and a["finish_reason"] for a in cached_answers(store))

        # the judge is back: the rerun asks only for the verdicts it never gave
        judge_proxy.refuse, judge_proxy.die_after = False, None
        before = judge_proxy.counts.forwarded
        fourth = run(data)
        assert fourth.run_info.status.state == "complete" and proxy.counts.forwarded == N + 1
        assert judge_proxy.counts.forwarded - before == questions - given
        assert fourth.run_info.judge is not None and fourth.run_info.judge.requests == questions - given
        assert len(cached_answers(store)) == 2 * questions

        # pairwise against the baseline (the run above): other samples of the policy, each pair asked in both orders
        data["sampling"]["seed"] = 7
        data["judge"]["pairwise"] = {}
        before_judge, before_policy = judge_proxy.counts.forwarded, proxy.counts.forwarded
        fifth = run(data)
        assert proxy.counts.forwarded - before_policy == N + 1
        info = fifth.run_info.judge
        assert info is not None and len(info.pairwise) == 1
        [pairs] = info.pairwise
        assert (pairs.benchmark, pairs.baseline_run_id, pairs.pairs, pairs.failed) == (
            "judged_qa", fourth.run_info.run_id, N, 0,
        )  # fmt: skip
        assert pairs.wins + pairs.ties + pairs.losses + pairs.unparsed == N and 0 <= pairs.flips <= pairs.ties
        assert info.asked == N + 2 * N and judge_proxy.counts.forwarded - before_judge == info.requests > 0
        report = (Path(fifth.collection.run_dir) / "report.md").read_text()
        assert (
            "## Judge: pairwise against the baseline" in report
            and f"| judged_qa | {fourth.run_info.run_id} | {N} |" in report
        )
    finally:
        judge_proxy.stop()
