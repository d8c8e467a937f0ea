"""MATH-style competition problems: lm-eval 0.4.13 minerva_math's exact_match and math_verify, and a boxed check.

Chat prompts with optional few-shot turns, or lm-eval's minerva_math plain-completion prompt (`mode: completion`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from envs import main_thread
from envs.base import REPO_ROOT, DatasetError, MetricSpec, Score
from envs.extract import answers_equal, last_boxed
from envs.fewshot import FewShotQAEnv
from envs.math_minerva import exact_match, final_answer_line, math_verify

INSTRUCTION = "Put your final answer within \\boxed{}."
FEWSHOT_PATH = REPO_ROOT / "data" / "math" / "fewshot.jsonl"
# Plain-completion mode renders lm-evaluation-harness's minerva_math task: `doc_to_text`
# "Problem:\n{problem}\n\nSolution:", each few-shot example followed by " " + its solution (the default
# target delimiter), examples joined by "\n\n"; generation stops at the next "Problem:" or an end-of-sequence
# string.
COMPLETION_PROBLEM = "Problem:\n{problem}\n\nSolution:"
COMPLETION_STOP = ("Problem:", "</s>", "<|im_end|>")
EXACT_MATCH = "exact_match"
MATH_VERIFY = "math_verify"


def _reference_of(row: dict[str, Any]) -> str | None:
    """`answer` (a string or number), else the last `\\boxed{}` of the original MATH `solution`."""
    answer = row.get("answer")
    if isinstance(answer, int | float) and not isinstance(answer, bool):
        return str(answer)
    if isinstance(answer, str) and answer.strip():
        return answer.strip()
    solution = row.get("solution")
    return last_boxed(solution) if isinstance(solution, str) else None


def lm_eval_solution(row: dict[str, Any]) -> str:
    """The reference solution lm-eval's two metrics read: the row's `solution`, else its answer boxed."""
    solution = row.get("solution")
    if isinstance(solution, str) and solution.strip():
        return solution
    return f"$\\boxed{{{_reference_of(row)}}}$"


def score_completion(row: dict[str, Any], completion: str) -> Score:
    """The three judges' verdicts on one completion (main thread only: see envs.main_thread)."""
    ref = _reference_of(row)
    if ref is None:
        raise DatasetError(f"row {row.get('id', '?')}: no reference answer")
    solution = lm_eval_solution(row)
    boxed, line = last_boxed(completion), final_answer_line(completion)
    answer = boxed if boxed is not None else line
    lm_exact, (lm_verify, extracted) = exact_match(completion, solution), math_verify(completion, solution)
    success = lm_exact or lm_verify or math_equal(answer, ref)
    answer = answer if answer is not None else extracted
    info = {
        EXACT_MATCH: lm_exact,
        MATH_VERIFY: lm_verify,
        "minerva_answer": line,
        "boxed_answer": boxed,
        "parse_error": answer is None,
    }
    return Score(reward=1.0 if success else 0.0, success=success, parsed_answer=answer, info=info)


def math_equal(pred: str | None, ref: str) -> bool:
    """Whether a boxed answer equals the reference (numerically, else symbolically via math-verify)."""
    return pred is not None and answers_equal(pred, ref)


class MathEnv(FewShotQAEnv):
    """Rows: `{"id", "problem", "answer"}`, or original MATH rows (`problem`, `solution`, no id).

    Options: `fewshot` (0-4 of the Minerva examples lm-eval's minerva_math uses, each solution ending "Final
    Answer: The final answer is $X$. I hope it is correct."), `system_prompt`, and `mode`: "chat" (default;
    the examples as user/assistant turns, each user turn asking for a `\\boxed{}` answer) or "completion"
    (lm-eval's plain "Problem:\\n...\\n\\nSolution:" prompt for the completions API, for base models).

    Scores, on the main thread of a process (envs.main_thread: sympy's and math-verify's timeouts are
    SIGALRM): `exact_match` and `math_verify` are lm-evaluation-harness 0.4.13 minerva_math's, by its own
    code (envs.math_minerva), against the row's `solution`, or for a row with only an `answer` the solution
    `$\\boxed{<answer>}$`. The reward is 1 when any of three judges accepts the completion: those two, or
    math-verify equivalence of its last `\\boxed{}` (else its Final Answer line) with the reference answer.
    """

    name: ClassVar[str] = "math"
    version: ClassVar[str] = "4"  # 4: lm-eval 0.4.13's exact_match and math_verify; the reward accepts both
    default_dataset: ClassVar[str] = "data/math/test.jsonl"
    # lm-eval results key (metric,filter): minerva_math has no filter.
    lm_eval_metrics: ClassVar[tuple[tuple[str, str], ...]] = (
        ("exact_match,none", EXACT_MATCH),
        ("math_verify,none", MATH_VERIFY),
    )
    metrics: ClassVar[tuple[MetricSpec, ...]] = (
        MetricSpec(
            EXACT_MATCH,
            "exact_match (lm-eval minerva)",
            "rate",
            headline=True,
            description="lm-evaluation-harness 0.4.13 minerva_math exact_match: the answer after 'Final Answer: "
            "The final answer is', Minerva-normalized, equals the reference solution's normalized last \\boxed{} "
            "as a string or by sympy",
        ),
        MetricSpec(
            MATH_VERIFY,
            "math_verify (lm-eval minerva)",
            "rate",
            headline=True,
            description="lm-evaluation-harness 0.4.13 minerva_math math_verify: math-verify's parse of the whole "
            "completion verifies against its parse of the reference solution",
        ),
        MetricSpec(
            "parse_error",
            "no answer",
            "rate",
            description="the completion has no \\boxed{} answer, no Final Answer line and nothing math-verify "
            "can read as an answer",
        ),
    )

    fewshot_path: ClassVar[Path] = FEWSHOT_PATH
    question_field: ClassVar[str] = "problem"
    target_field: ClassVar[str] = "solution"
    instruction: ClassVar[str] = INSTRUCTION
    completion_template: ClassVar[str] = COMPLETION_PROBLEM
    completion_stop: ClassVar[tuple[str, ...]] = COMPLETION_STOP
    # lm-eval inserts the problem and solution text as they are (no stripping), so the examples do too.
    strip_text: ClassVar[bool] = False

    @staticmethod
    def check_row(row: dict[str, Any], where: str) -> None:
        """Row checks, also applied to the shipped few-shot file."""
        if "id" in row and (not isinstance(row["id"], str) or not row["id"].strip()):
            raise DatasetError(f"{where}: 'id' must be a non-empty string, got {row['id']!r}")
        problem = row.get("problem")
        if not isinstance(problem, str) or not problem.strip():
            raise DatasetError(f"{where}: missing or empty 'problem' (a non-empty string)")
        if "answer" not in row and "solution" not in row:
            raise DatasetError(f"{where}: missing 'answer' (or an original MATH 'solution' with a \\boxed{{}} answer)")
        if _reference_of(row) is None:
            raise DatasetError(
                f"{where}: no reference answer: 'answer' must be a non-empty string or a number, or "
                f"'solution' must contain a \\boxed{{}} answer"
            )

    def reference(self, row: dict[str, Any]) -> str:
        ref = _reference_of(row)
        if ref is None:
            raise DatasetError(f"row {self.prompt_id(row)}: no reference answer")
        return ref

    def score(self, row: dict[str, Any], completion: str) -> Score:
        return main_thread.call(score_completion, row, completion)

    async def ascore(self, row: dict[str, Any], completion: str) -> Score:
        """Scored in a worker process, off the event loop (sympy can take seconds)."""
        return await main_thread.acall(score_completion, row, completion)
