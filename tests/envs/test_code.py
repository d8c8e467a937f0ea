"""MBPP and HumanEval envs: lm-eval's prompt, code extraction, row checks, and sandboxed scoring."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from envs.base import REPO_ROOT, DatasetError, Score
from envs.code import MAX_PARSED_CHARS, HumanEvalEnv, MBPPEnv, defines, extract_code
from envs.datasets import load_rows
from sandbox import runner

NO_SANDBOX = runner._static_problem(runner.default_interpreter()[0])
needs_sandbox = pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no sandbox here: {NO_SANDBOX}")

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


# --- extraction ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "code", "fenced"),
    [
        ("Here you go:\n```python\ndef f():\n    return 1\n```\nDone.", "def f():\n    return 1", True),
        ("```py\nx = 1\n```", "x = 1", True),
        ("```\nx = 2\n```\n```python\nx = 3\n```", "x = 3", True),  # a python block wins over an earlier bare one
        ("```text\nnot code\n```\n```\nx = 4\n```", "not code", True),  # else the first block of any kind
        ("```python\ndef f():\n    return 5\n", "def f():\n    return 5", True),  # cut off inside the fence
        ("```python\nx = 6\n[DONE]", "x = 6", True),
        ("def f():\n    return 7\n[DONE]\ntrailing chatter", "def f():\n    return 7", False),
        ("[BEGIN]\ndef f():\n    return 8\n[DONE]", "def f():\n    return 8", False),
        ("def f():\n    return 9\n", "def f():\n    return 9", False),
    ],
)
def test_extract_code(completion: str, code: str, fenced: bool) -> None:
    assert extract_code(completion) == (code, fenced)


def test_defines() -> None:
    assert defines("import os\n\ndef total(xs):\n    return 0\n", "total")
    assert not defines("def totally(xs):\n    pass\n", "total")
    assert defines("def total(xs):\n    return (\n", "total")  # unparsable: regex fallback
    assert not defines("    return sum(xs)\n", "total")


# --- MBPP prompt and rows -----------------------------------------------------------------------


def test_mbpp_prompt_matches_lm_eval() -> None:
    # lm-eval's mbpp.yaml doc_to_text, with the row's fields filled in by hand.
    expected = (
        "You are an expert Python programmer, and here is your task: Write a function to add two numbers. "
        "Your code should pass these tests:\n\n"
        "assert add(1, 2) == 3\nassert add(-1, 1) == 0\nassert add(0, 0) == 0\n[BEGIN]\n"
    )
    env = MBPPEnv()
    assert env.messages(MBPP_ROW) == [{"role": "user", "content": expected}]
    assert env.stop() == ["[DONE]"]
    assert env.prompt_id(MBPP_ROW) == "7"
    assert env.reference(MBPP_ROW) == MBPP_ROW["code"]


def test_system_prompt_and_options() -> None:
    msgs = MBPPEnv(system_prompt="Be terse.").messages(MBPP_ROW)
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert MBPPEnv().fingerprint() != MBPPEnv(timeout_s=10).fingerprint()
    with pytest.raises(ValueError, match="mode must be one of"):
        MBPPEnv(mode="base")
    with pytest.raises(ValueError, match="timeout_s"):
        HumanEvalEnv(timeout_s=0)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"text": ""}, "'text'"),
        ({"task_id": None}, "'task_id'"),
        ({"test_list": []}, "'test_list' must be a non-empty list"),
        ({"test_list": "assert True"}, "'test_list' must be a non-empty list"),
        ({"test_list": ["assert True", 3]}, r"test_list\[1\] must be a non-empty string"),
        ({"code": None}, "'code'"),
        ({"test_setup_code": 5}, "'test_setup_code' must be a string"),
    ],
)
def test_mbpp_bad_rows(change: dict[str, Any], message: str) -> None:
    row = {**MBPP_ROW, **change}
    with pytest.raises(DatasetError, match=rf"^data\.jsonl:4: .*{message}"):
        MBPPEnv().validate_row(row, "data.jsonl:4")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"entry_point": ""}, "'entry_point'"),
        ({"entry_point": "not valid"}, "must be a Python identifier"),
        ({"entry_point": "other"}, "does not define entry_point 'other'"),
        ({"prompt": "def total(:\n"}, "the prompt is not valid Python"),
        ({"test": "assert True\n"}, r"must define check\(candidate\)"),
        ({"canonical_solution": 1}, "'canonical_solution'"),
    ],
)
def test_humaneval_bad_rows(change: dict[str, Any], message: str) -> None:
    row = {**HE_ROW, **change}
    with pytest.raises(DatasetError, match=rf"^he\.jsonl:2: .*{message}"):
        HumanEvalEnv().validate_row(row, "he.jsonl:2")


def test_humaneval_prompt() -> None:
    (msg,) = HumanEvalEnv().messages(HE_ROW)
    assert msg["role"] == "user"
    assert msg["content"].endswith(f"```python\n{HE_ROW['prompt'].rstrip()}\n```\n")
    assert "complete function" in msg["content"]
    assert HumanEvalEnv().stop() is None
    assert HumanEvalEnv().reference(HE_ROW) == HE_ROW["prompt"] + HE_ROW["canonical_solution"]


def test_humaneval_program_shapes() -> None:
    env = HumanEvalEnv()
    whole, code, fenced = env.program(HE_ROW, "```python\ndef total(xs):\n    return sum(xs)\n```")
    assert fenced and code.startswith("def total")
    assert whole.startswith(HE_ROW["prompt"].rstrip())  # the prompt's imports come along
    assert whole.rstrip().endswith("return sum(xs)") and "check" not in whole  # the tests stay with the judge
    body, code, fenced = env.program(HE_ROW, "    return sum(xs)\n")
    assert not fenced and body.startswith(HE_ROW["prompt"] + "    return sum(xs)")
    spec = env.tests(HE_ROW)
    assert (spec.tests, spec.remote) == (("check(total)",), ("total",))
    assert spec.setup.startswith(HE_ROW["prompt"]) and HE_ROW["test"] in spec.setup


def test_mbpp_tests_take_only_what_the_reference_defines() -> None:
    row = {
        **MBPP_ROW,
        "code": "import math\n\nclass Pair:\n    pass\n\nLIMIT = 3\n\ndef add(a, b):\n    return a + b",
        "test_list": ["assert math.isclose(add(1, 2), 3)", "assert abs(add(Pair(), LIMIT)) < 1", "assert add("],
    }
    spec = MBPPEnv().tests(row)
    assert spec.tests == tuple(row["test_list"]) and spec.setup == ""
    assert spec.remote == ("LIMIT", "Pair", "add")  # never `math` or `abs`: the judge keeps its own
    assert MBPPEnv().program(row, "def add(a, b):\n    return a + b")[0] == "def add(a, b):\n    return a + b\n"


@needs_sandbox
def test_the_synchronous_score_is_the_awaited_one_run_to_completion() -> None:
    """One protocol: the env defines `ascore` only; `score` gives the same verdict from plain code and from code
    already inside an event loop (where asyncio.run cannot nest)."""
    env, right, wrong = MBPPEnv(), f"```python\n{MBPP_ROW['code']}\n```", "def add(a, b):\n    return a - b"

    async def inside_a_loop() -> tuple[bool, bool]:
        return env.score(MBPP_ROW, right).success, env.score(MBPP_ROW, wrong).success

    assert (env.score(MBPP_ROW, right).success, env.score(MBPP_ROW, wrong).success) == (True, False)
    assert asyncio.run(inside_a_loop()) == (True, False)
    sync, awaited = env.score(MBPP_ROW, right), ascore(env, MBPP_ROW, right)
    assert (sync.reward, sync.parsed_answer, sync.info["outcome"]) == (awaited.reward, awaited.parsed_answer, "pass")


# --- scoring in the sandbox ---------------------------------------------------------------------


@needs_sandbox
def test_mbpp_right_wrong_and_timeout() -> None:
    env = MBPPEnv(timeout_s=1.0)
    right = ascore(env, MBPP_ROW, "```python\ndef add(a, b):\n    return a + b\n```")
    assert (right.reward, right.success) == (1.0, True)
    assert right.info["outcome"] == "pass" and right.info["extracted"] is True
    assert set(right.info) == {"outcome", "duration_s", "stderr_tail", "extracted", "tests_passed"}
    assert right.info["tests_passed"] == 1.0
    wrong = ascore(env, MBPP_ROW, "def add(a, b):\n    return a - b\n[DONE]")
    assert (wrong.reward, wrong.success, wrong.info["outcome"]) == (0.0, False, "fail")
    assert wrong.info["tests_passed"] == round(1 / 3, 4)  # only `add(0, 0) == 0` holds
    assert "AssertionError" in wrong.info["stderr_tail"] and wrong.info["extracted"] is False
    assert wrong.parsed_answer == "def add(a, b):\n    return a - b"
    slow = ascore(env, MBPP_ROW, "```python\ndef add(a, b):\n    while True:\n        pass\n```")
    assert (slow.reward, slow.info["outcome"]) == (0.0, "timeout")
    broken = ascore(env, MBPP_ROW, "```python\ndef add(a, b)\n    return a + b\n```")
    assert broken.info["outcome"] == "fail" and "SyntaxError" in broken.info["stderr_tail"]


@needs_sandbox
def test_mbpp_setup_code_runs_before_the_tests() -> None:
    row = {**MBPP_ROW, "test_setup_code": "OFFSET = 0", "test_list": ["assert add(OFFSET, 2) == 2"]}
    assert ascore(MBPPEnv(), row, "def add(a, b):\n    return a + b").success


@needs_sandbox
def test_parsed_answer_and_stderr_are_clipped() -> None:
    long_code = "def add(a, b):\n    return a + b\n" + "# padding\n" * 1000
    score = ascore(MBPPEnv(), MBPP_ROW, f"```python\n{long_code}```")
    assert score.success and len(score.parsed_answer or "") == MAX_PARSED_CHARS
    noisy = ascore(MBPPEnv(), MBPP_ROW, "import sys\nsys.stderr.write('e' * 5000)\nraise SystemExit(1)")
    assert len(noisy.info["stderr_tail"]) == 500


@needs_sandbox
@pytest.mark.parametrize(
    ("completion", "success"),
    [
        ("```python\ndef total(xs: List[int]) -> int:\n    return sum(xs)\n```", True),  # needs the prompt's import
        ("```python\n    return sum(xs)\n```", True),  # a fenced body
        ("    return sum(xs)\n", True),  # the original completion format
        ("```python\ndef total(xs):\n    return 0\n```", False),
        ("I cannot do that.", False),
    ],
)
def test_humaneval_scoring(completion: str, success: bool) -> None:
    assert ascore(HumanEvalEnv(), HE_ROW, completion).success is success


# --- the shipped offline sets -------------------------------------------------------------------


def test_offline_sets_load() -> None:
    mbpp, he = MBPPEnv(), HumanEvalEnv()
    mbpp_rows = load_rows(str(mbpp.default_dataset_path()), mbpp)
    he_rows = load_rows(str(REPO_ROOT / he.default_dataset), he)  # the shipped set, not the package's
    assert len(mbpp_rows) >= 30 and len(he_rows) >= 10
    assert all(len(row["test_list"]) == 3 for row in mbpp_rows)


async def _score_all(env: Any, rows: list[dict[str, Any]], completions: list[str]) -> list[Score]:
    return await asyncio.gather(*(env.ascore(row, c) for row, c in zip(rows, completions, strict=True)))


@needs_sandbox
def test_every_mbpp_reference_passes_and_a_wrong_solution_fails() -> None:
    env = MBPPEnv()
    rows = load_rows(str(env.default_dataset_path()), env)
    right = asyncio.run(_score_all(env, rows, [f"```python\n{row['code']}\n```" for row in rows]))
    failed = [(row["task_id"], s.info) for row, s in zip(rows, right, strict=True) if not s.success]
    assert not failed
    # A wrong solution: the reference with its return values replaced by None.
    wrong_rows = [copy.deepcopy(row) for row in rows]
    wrong = [row["code"].replace("return ", "return None and ") for row in wrong_rows]
    scores = asyncio.run(_score_all(env, wrong_rows, wrong))
    assert not any(s.success for s in scores)
    assert {s.info["outcome"] for s in scores} == {"fail"}


@needs_sandbox
def test_every_humaneval_reference_passes_and_a_wrong_solution_fails() -> None:
    env = HumanEvalEnv()
    rows = load_rows(str(REPO_ROOT / env.default_dataset), env)
    bodies = asyncio.run(_score_all(env, rows, [row["canonical_solution"] for row in rows]))
    assert [row["task_id"] for row, s in zip(rows, bodies, strict=True) if not s.success] == []
    whole = [f"```python\n{row['prompt']}{row['canonical_solution']}```" for row in rows]
    assert all(s.success for s in asyncio.run(_score_all(env, rows, whole)))
    wrong = asyncio.run(_score_all(env, rows, ["    return None\n"] * len(rows)))
    assert not any(s.success for s in wrong)
