"""MATH env: prompt, references (also from original MATH solutions), boxed extraction and equivalence."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from envs.base import DatasetError
from envs.datasets import load_rows
from envs.math import INSTRUCTION, MathEnv, math_equal

ROW = {"id": "m-1", "problem": "What is $\\frac{2}{4}$ in lowest terms?", "answer": "\\frac{1}{2}"}


def test_prompt() -> None:
    assert INSTRUCTION == "Put your final answer within \\boxed{}."
    assert MathEnv().messages(ROW) == [{"role": "user", "content": f"{ROW['problem']}\n\n{INSTRUCTION}"}]
    msgs = MathEnv(system_prompt="Think step by step.").messages(ROW)
    assert msgs[0] == {"role": "system", "content": "Think step by step."} and len(msgs) == 2
    assert MathEnv().stop() is None
    assert MathEnv().fingerprint() != MathEnv(system_prompt="x").fingerprint()


@pytest.mark.parametrize(
    ("completion", "success", "boxed", "verify", "parsed"),
    [
        ("Halve both: \\boxed{\\frac{1}{2}}.", True, "\\frac{1}{2}", True, "\\frac{1}{2}"),
        ("The answer is $\\boxed{0.5}$", True, "0.5", True, "0.5"),
        ("\\boxed{\\dfrac{1}{2}}", True, "\\dfrac{1}{2}", True, "\\dfrac{1}{2}"),
        # the last box counts for the reward; math-verify's parse of the whole text reads another answer
        ("First \\boxed{2}, no wait: \\boxed{\\frac{2}{4}}", True, "\\frac{2}{4}", False, "\\frac{2}{4}"),
        ("\\boxed{\\frac{1}{3}}", False, "\\frac{1}{3}", False, "\\frac{1}{3}"),
        # no box and no Final Answer line: lm-eval's math_verify still reads an answer, and so does the reward
        ("The answer is 1/2.", True, None, True, "1/2."),  # parsed_answer: the text math-verify read
        ("\\boxed{\\frac{1}{2}", True, None, True, "{\\frac{1}{2}"),  # cut off before the box closed
        ("I could not solve it.", False, None, False, None),
    ],
)
def test_score(completion: str, success: bool, boxed: str | None, verify: bool, parsed: str | None) -> None:
    score = MathEnv().score(ROW, completion)
    assert (score.success, score.reward) == (success, 1.0 if success else 0.0)
    assert score.parsed_answer == parsed
    assert score.info == {
        "exact_match": False,  # no "Final Answer: The final answer is" line
        "math_verify": verify,
        "minerva_answer": None,
        "boxed_answer": boxed,
        "parse_error": parsed is None,
    }


def test_nested_braces_in_the_box() -> None:
    row = {"id": "m-2", "problem": "Compute $\\cos 30^\\circ$.", "answer": "\\frac{\\sqrt{3}}{2}"}
    score = MathEnv().score(row, "So we get $\\boxed{\\frac{\\sqrt{3}}{2}}$ as claimed.")
    assert score.success and score.parsed_answer == "\\frac{\\sqrt{3}}{2}"
    assert MathEnv().score(row, "\\boxed{\\frac{\\sqrt{2}}{2}}").success is False


@pytest.mark.parametrize(
    ("pred", "ref", "equal"),
    [
        ("\\frac{1}{2}", "0.5", True),
        ("0.5", "\\frac{1}{2}", True),
        ("\\frac{2}{4}", "\\frac{1}{2}", True),
        ("\\sqrt{2}+1", "1+\\sqrt{2}", True),
        ("\\left(2, 3\\right)", "(2,3)", True),
        ("[2, 5) \\cup (5, \\infty)", "[2,5)\\cup(5,\\infty)", True),
        ("6\\sqrt{2}", "\\sqrt{72}", True),
        ("1,000", "1000", True),
        ("(2,3]", "(2,3)", False),
        ("1+\\sqrt{2}", "1", False),  # bare math-verify would read only the leading 1
        ("\\left(2, 3\\right)", "3", False),
        ("-\\frac{2}{3}", "\\frac{2}{3}", False),
        ("12..34", "12", False),  # malformed numbers: math-verify alone reads 12..34 as 12
        ("0.0.0", "0", False),
        ("1..5", "1", False),
        (None, "1", False),
    ],
)
def test_math_equal(pred: str | None, ref: str, equal: bool) -> None:
    assert math_equal(pred, ref) is equal


def test_malformed_boxed_number_scores_zero() -> None:
    row = {"id": "m-3", "problem": "Compute 3 * 4.", "answer": "12"}
    assert MathEnv().score(row, "\\boxed{12}").success
    for bad in ("\\boxed{12..34}", "\\boxed{12.0.0}", "$\\boxed{1..2}$"):
        score = MathEnv().score(row, bad)
        assert (score.success, score.reward) == (False, 0.0), bad


def test_original_math_rows() -> None:
    row = {"problem": "Find $x$.", "solution": "We get $\\boxed{3}$, hence $x = \\boxed{\\frac{7}{2}}$.", "level": "3"}
    env = MathEnv()
    env.validate_row(row, "math.jsonl:1")
    assert env.reference(row) == "\\frac{7}{2}"
    assert env.prompt_id(row).startswith("math-") and env.prompt_id(row) == env.prompt_id(dict(row))
    assert env.score(row, "\\boxed{3.5}").success
    assert env.reference({"id": "n", "problem": "p", "answer": 12}) == "12"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"id": "a", "answer": "1"}, "missing or empty 'problem'"),
        ({"id": "a", "problem": "p"}, "missing 'answer'"),
        ({"id": "a", "problem": "p", "answer": ""}, "no reference answer"),
        ({"id": "a", "problem": "p", "solution": "no box here"}, "no reference answer"),
        ({"id": 3, "problem": "p", "answer": "1"}, "'id' must be a non-empty string"),
    ],
)
def test_bad_rows(row: dict, message: str) -> None:
    with pytest.raises(DatasetError, match=rf"^m\.jsonl:9: .*{message}"):
        MathEnv().validate_row(row, "m.jsonl:9")


def test_shipped_set() -> None:
    env = MathEnv()
    rows = load_rows(str(env.default_dataset_path()), env)
    assert len(rows) == 50
    assert [env.prompt_id(r) for r in rows] == [f"math-{i:04d}" for i in range(1, 51)]
    for row in rows:
        ref = env.reference(row)
        right = env.score(row, f"Working... so the answer is $\\boxed{{{ref}}}$.")
        assert right.success and right.info["math_verify"] and not right.info["exact_match"], row
        line = env.score(
            row, f"So $\\boxed{{{ref}}}$.\nFinal Answer: The final answer is ${ref}$. I hope it is correct."
        )
        assert line.success and line.info["exact_match"] and line.info["math_verify"], row
        wrong = env.score(row, "\\boxed{123456789}")
        assert not wrong.success and not wrong.info["exact_match"], row


def test_scores_off_the_main_thread_and_in_an_event_loop_equal_the_main_threads() -> None:
    """sympy's and math-verify's timeouts are SIGALRM, which only a main thread may set: off it, math-verify
    raises and lm-eval's sympy check says "not equal". The env sends such calls to worker processes."""
    completion = "So $x = 0.5$.\nFinal Answer: The final answer is $0.5$. I hope it is correct."
    here = MathEnv().score(ROW, completion)
    assert (here.info["exact_match"], here.info["math_verify"], here.success) == (True, True, True)
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(MathEnv().score, ROW, completion).result() == here
    assert asyncio.run(MathEnv().ascore(ROW, completion)) == here
