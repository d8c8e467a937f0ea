"""MBPP few-shot and completion modes, HumanEval completion mode: lm-eval's prompts, stops and programs."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from envs.base import Score
from envs.code import HumanEvalEnv, MBPPEnv
from envs.code_prompts import MBPP_FEWSHOT_PATH
from sandbox import runner

NO_SANDBOX = runner._static_problem(runner.default_interpreter()[0])
needs_sandbox = pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no sandbox here: {NO_SANDBOX}")

EXAMPLES = [json.loads(line) for line in MBPP_FEWSHOT_PATH.read_text(encoding="utf-8").splitlines()]
MBPP_ROW = {
    "task_id": 7,
    "text": "Write a function to add two numbers.",
    "code": "def add(a, b):\n    return a + b",
    "test_list": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(0, 0) == 0"],
    "test_setup_code": "",
}
HE_ROW = {
    "task_id": "Test/0",
    "prompt": 'from typing import List\n\n\ndef total(xs: List[int]) -> int:\n    """Sum of xs."""\n',
    "canonical_solution": "    return sum(xs)\n",
    "test": "def check(candidate):\n    assert candidate([1, 2]) == 3\n    assert candidate([]) == 0\n",
    "entry_point": "total",
}


def ascore(env: Any, row: dict[str, Any], completion: str) -> Score:
    return asyncio.run(env.ascore(row, completion))


def lm_eval_text(row: dict[str, Any]) -> str:
    """lm-eval mbpp.yaml's doc_to_text, written out."""
    tests = row["test_list"]
    return (
        f"You are an expert Python programmer, and here is your task: {row['text']} Your code should pass these "
        f"tests:\n\n{tests[0]}\n{tests[1]}\n{tests[2]}\n[BEGIN]\n"
    )


def test_mbpp_fewshot_file_is_lm_evals_three_examples() -> None:
    assert [ex["task_id"] for ex in EXAMPLES] == [2, 3, 4]
    assert [ex["code"].split("def ", 1)[1].split("(")[0] for ex in EXAMPLES] == [
        "similar_elements",
        "is_not_prime",
        "heap_queue_largest",
    ]
    env = MBPPEnv()
    for i, ex in enumerate(EXAMPLES):
        env.validate_row(ex, f"mbpp_fewshot.jsonl:{i + 1}")
        assert len(ex["test_list"]) == 3 and "\r\n" in ex["code"]  # kept byte for byte, as lm-eval has it


def test_mbpp_completion_prompt_is_lm_evals() -> None:
    env = MBPPEnv(fewshot=3, mode="completion")
    shots = "".join(f"{lm_eval_text(ex)}{ex['code']}\n[DONE]\n\n" for ex in EXAMPLES)
    assert env.prompt(MBPP_ROW) == shots + lm_eval_text(MBPP_ROW)
    assert env.stop() == ["[DONE]"]
    assert MBPPEnv(mode="completion").prompt(MBPP_ROW) == lm_eval_text(MBPP_ROW)
    assert MBPPEnv(mode="completion", system_prompt="Be terse.").prompt(MBPP_ROW) == (
        f"Be terse.\n\n{lm_eval_text(MBPP_ROW)}"
    )
    with pytest.raises(ValueError, match="plain-text prompt"):
        env.messages(MBPP_ROW)
    assert MBPPEnv().prompt(MBPP_ROW) is None  # chat stays the default


def test_mbpp_chat_fewshot_turns() -> None:
    msgs = MBPPEnv(fewshot=2, system_prompt="S").messages(MBPP_ROW)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert msgs[1]["content"] == lm_eval_text(EXAMPLES[0])
    assert msgs[2]["content"] == f"{EXAMPLES[0]['code']}\n[DONE]"
    assert msgs[-1]["content"] == lm_eval_text(MBPP_ROW)


def test_mbpp_fewshot_option() -> None:
    prints = {MBPPEnv().fingerprint(), MBPPEnv(fewshot=3).fingerprint(), MBPPEnv(mode="completion").fingerprint()}
    assert len(prints) == 3 and MBPPEnv(fewshot=1).options["fewshot"] == 1
    for bad in (4, -1, True, "3"):
        with pytest.raises(ValueError, match="fewshot must be an integer from 0 to 3"):
            MBPPEnv(fewshot=bad)  # type: ignore[arg-type]


def test_humaneval_completion_mode_is_lm_evals() -> None:
    env = HumanEvalEnv(mode="completion")
    assert env.prompt(HE_ROW) == HE_ROW["prompt"]
    assert env.stop() == ["\nclass", "\ndef", "\n#", "\nif", "\nprint"]
    program, code, fenced = env.program(HE_ROW, "    return sum(xs)")
    assert (program, code, fenced) == (HE_ROW["prompt"] + "    return sum(xs)\n", "    return sum(xs)", False)
    assert HumanEvalEnv().fingerprint() != env.fingerprint()
    with pytest.raises(ValueError, match="plain-text prompt"):
        env.messages(HE_ROW)


@needs_sandbox
def test_mbpp_fewshot_examples_pass_their_own_tests() -> None:
    env = MBPPEnv(mode="completion")
    scores = [ascore(env, ex, ex["code"]) for ex in EXAMPLES]
    assert [s.info["outcome"] for s in scores] == ["pass"] * 3


@needs_sandbox
@pytest.mark.parametrize(
    ("mode", "completion", "success"),
    [
        ("completion", "def add(a, b):\n    return a + b\n", True),
        ("completion", "```python\ndef add(a, b):\n    return a + b\n```", False),  # lm-eval runs the fence too
        ("chat", "```python\ndef add(a, b):\n    return a + b\n```", True),
        ("completion", "def add(a, b):\n    return a - b\n", False),
    ],
)
def test_mbpp_completion_scoring(mode: str, completion: str, success: bool) -> None:
    score = ascore(MBPPEnv(mode=mode, fewshot=3), MBPP_ROW, completion)
    assert score.success is success
    assert score.info["extracted"] is (mode == "chat")


@needs_sandbox
@pytest.mark.parametrize(
    ("mode", "completion", "success"),
    [
        ("completion", "    return sum(xs)\n", True),
        ("completion", "    return sum(xs)", True),  # cut at a stop sequence: no trailing newline
        ("completion", "```python\ndef total(xs):\n    return sum(xs)\n```", False),  # not a body
        ("chat", "```python\ndef total(xs):\n    return sum(xs)\n```", True),
        ("completion", "    return 0\n", False),
    ],
)
def test_humaneval_completion_scoring(mode: str, completion: str, success: bool) -> None:
    assert ascore(HumanEvalEnv(mode=mode), HE_ROW, completion).success is success


def test_lm_eval_metric_names() -> None:
    assert MBPPEnv.lm_eval_metrics == (("pass_at_1,none", "pass@1"),)
    assert HumanEvalEnv.lm_eval_metrics == (("pass@1,create_test", "pass@1"),)
