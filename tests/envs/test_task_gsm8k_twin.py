"""The proof that task files can express a real benchmark: a YAML twin of the built-in gsm8k env.

tests/envs/data/tasks/gsm8k_twin.yaml (chat mode, no few-shot) must give GSM8KEnv's prompts for every shipped
row and its reward, success, parsed answer and lm-eval scores for real model completions and for the cases
scored by lm-evaluation-harness itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envs.base import REPO_ROOT
from envs.datasets import load_rows
from envs.gsm8k import LM_EVAL_FLEXIBLE, LM_EVAL_STRICT, GSM8KEnv
from envs.task_env import TaskEnv, task_env_class
from envs.task_spec import load_task_spec

DATA = Path(__file__).parent / "data"
TWIN = DATA / "tasks" / "gsm8k_twin.yaml"
KEYS = (LM_EVAL_STRICT, LM_EVAL_FLEXIBLE, "strict_correct", "flexible_correct", "boxed_correct", "parse_error")


@pytest.fixture(scope="module")
def twin() -> TaskEnv:
    return task_env_class(load_task_spec(TWIN, where="twin"))()


def verdict(env: Any, row: dict[str, Any], completion: str) -> tuple[Any, ...]:
    score = env.score(row, completion)
    return score.reward, score.success, score.parsed_answer, *(score.info[k] for k in KEYS)


def test_the_twin_reads_the_shipped_dataset(twin: TaskEnv) -> None:
    assert twin.default_source() == str(REPO_ROOT / "data" / "gsm8k" / "test.jsonl")
    assert [m.key for m in twin.metrics] == [m.key for m in GSM8KEnv.metrics]
    assert twin.lm_eval_metrics == GSM8KEnv.lm_eval_metrics
    assert [m.headline for m in twin.metrics] == [m.headline for m in GSM8KEnv.metrics]


def test_messages_equal_gsm8k_for_every_row(twin: TaskEnv) -> None:
    gsm8k = GSM8KEnv()
    rows = load_rows(twin.default_source(), twin)
    assert rows == load_rows(str(GSM8KEnv.default_dataset_path()), gsm8k)
    assert len(rows) == 200
    for row in rows:
        assert twin.messages(row) == gsm8k.messages(row), row["id"]
        assert twin.prompt(row) is None and twin.stop() == gsm8k.stop() is None
        assert twin.prompt_id(row) == gsm8k.prompt_id(row)
        assert twin.reference(row) == row["answer"]


def test_real_completions_score_as_gsm8k(twin: TaskEnv) -> None:
    """160 completions of a small model (4 per row of the first 40): every verdict equal, of every kind."""
    gsm8k = GSM8KEnv()
    rows = {row["id"]: row for row in load_rows(twin.default_source(), twin)}
    records = [json.loads(line) for line in (DATA / "gsm8k_demo_completions.jsonl").read_text().splitlines()]
    assert len(records) == 160 and len({r["prompt_id"] for r in records}) == 40
    successes = strict_found = parse_errors = 0
    for record in records:
        row, completion = rows[record["prompt_id"]], record["completion"]
        ours, theirs = verdict(twin, row, completion), verdict(gsm8k, row, completion)
        assert ours == theirs, (record["prompt_id"], record["repeat"])
        score = twin.score(row, completion)
        successes += score.success
        strict_found += score.info["answers"]["strict_correct"] is not None
        parse_errors += score.info["parse_error"]
    # what these completions exercise: right and wrong answers, `#### N` and the last-number fall-back, none
    assert (successes, strict_found, parse_errors) == (3, 28, 1)


def test_lm_eval_cases_score_as_gsm8k_and_lm_eval(twin: TaskEnv) -> None:
    """The 400 cases lm-evaluation-harness 0.4.13 scored (rows with worked-solution or integer answers)."""
    gsm8k = GSM8KEnv()
    cases = [json.loads(line) for line in (DATA / "gsm8k_lm_eval_cases.jsonl").read_text().splitlines()]
    assert len(cases) == 400
    for case in cases:
        row = {"id": "x", "question": "q", "answer": case["answer"]}
        twin.validate_row(row, "case")
        ours = verdict(twin, row, case["completion"])
        assert ours == verdict(gsm8k, row, case["completion"]), case
        assert ours[3:5] == (case["strict-match"], case["flexible-extract"]), case


@pytest.mark.parametrize(
    "completion",
    [
        "6 * 7 = 42\n#### 42",
        "#### 42.0",
        "The total is $1,234.",
        "so \\boxed{41} but #### 42",
        "#### 12..34",
        "#### ,",
        "no number here",
        "#### 42.\n\\boxed{\\frac{84}{2}}",
    ],
)
@pytest.mark.parametrize("answer", ["42", 42, "Work: 6*7=42.\n#### 42", "So 1,000 + 234.\n#### 1,234"])
def test_edge_cases_score_as_gsm8k(twin: TaskEnv, completion: str, answer: Any) -> None:
    row = {"id": "x", "question": "q", "answer": answer}
    assert verdict(twin, row, completion) == verdict(GSM8KEnv(), row, completion)
