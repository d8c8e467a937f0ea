"""MATH-style competition problems: lm-eval 0.4.13 minerva_math's exact_match and math_verify, and a boxed check.

Chat prompts with optional few-shot turns, or lm-eval's minerva_math plain-completion prompt (`mode: completion`).
"""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar, Literal

from envs import main_thread
from envs.base import REPO_ROOT, DatasetError, MetricSpec, Score, SingleTurnEnv
from envs.datasets import read_examples
from envs.extract import answers_equal, last_boxed
from envs.math_minerva import exact_match, final_answer_line, math_verify

INSTRUCTION = "Put your final answer within \\boxed{}."
FEWSHOT_PATH = REPO_ROOT / "data" / "math" / "fewshot.jsonl"
# Plain-completion mode renders lm-evaluation-harness's minerva_math task: `doc_to_text`
# "Problem:\n{problem}\n\nSolution:", each few-shot example followed by " " + its solution (the default
# target delimiter), examples joined by "\n\n"; generation stops at the next "Problem:" or an end-of-sequence
# string.
COMPLETION_PROBLEM = "Problem:\n{problem}\n\nSolution:"
COMPLETION_TARGET_DELIMITER = " "
COMPLETION_FEWSHOT_DELIMITER = "\n\n"
COMPLETION_STOP = ["Problem:", "</s>", "<|im_end|>"]
MODES = ("chat", "completion")
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


class MathEnv(SingleTurnEnv):
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

    def __init__(
        self, fewshot: int = 0, system_prompt: str | None = None, mode: Literal["chat", "completion"] = "chat"
    ) -> None:
        super().__init__(fewshot=fewshot, system_prompt=system_prompt, mode=mode)
        if mode not in MODES:
            raise ValueError(f"math: mode must be one of {', '.join(MODES)}, got {mode!r}")
        available = read_examples(FEWSHOT_PATH, check_row)
        if isinstance(fewshot, bool) or not isinstance(fewshot, int) or not 0 <= fewshot <= len(available):
            raise ValueError(f"math: fewshot must be an integer from 0 to {len(available)}, got {fewshot!r}")
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise ValueError(f"math: system_prompt must be a string or None, got {system_prompt!r}")
        self.fewshot_rows = available[:fewshot]
        self.system_prompt = system_prompt
        self.mode = mode

    def validate_row(self, row: dict[str, Any], where: str) -> None:
        check_row(row, where)

    def prompt_id(self, row: dict[str, Any]) -> str:
        if "id" in row:
            return row["id"]
        # Original MATH rows have no ids; a content hash keeps cache keys stable across copies.
        return "math-" + hashlib.sha256(row["problem"].strip().encode()).hexdigest()[:16]

    def reference(self, row: dict[str, Any]) -> str:
        ref = _reference_of(row)
        if ref is None:
            raise DatasetError(f"row {self.prompt_id(row)}: no reference answer")
        return ref

    def prompt_templates(self) -> dict[str, Any]:
        fewshot = [[ex["problem"], ex["solution"]] for ex in self.fewshot_rows]
        if self.mode == "completion":
            return {
                "mode": "completion",
                "problem": COMPLETION_PROBLEM,
                "target_delimiter": COMPLETION_TARGET_DELIMITER,
                "fewshot_delimiter": COMPLETION_FEWSHOT_DELIMITER,
                "fewshot": fewshot,
                "system_prompt": self.system_prompt,
            }
        return {"instruction": INSTRUCTION, "system_prompt": self.system_prompt, "fewshot": fewshot}

    @staticmethod
    def _user_turn(problem: str) -> str:
        return f"{problem.strip()}\n\n{INSTRUCTION}"

    def messages(self, row: dict[str, Any]) -> list[dict[str, str]]:
        if self.mode == "completion":
            raise ValueError("math: mode 'completion' sends a plain-text prompt (see prompt()), not chat messages")
        msgs = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        for ex in self.fewshot_rows:
            msgs.append({"role": "user", "content": self._user_turn(ex["problem"])})
            msgs.append({"role": "assistant", "content": ex["solution"]})
        return [*msgs, {"role": "user", "content": self._user_turn(row["problem"])}]

    def prompt(self, row: dict[str, Any]) -> str | None:
        """lm-eval's minerva_math prompt in completion mode (a system prompt, if any, first); else None."""
        if self.mode != "completion":
            return None
        # lm-eval inserts the problem and solution text as they are (no stripping), so the examples do too.
        blocks = [
            COMPLETION_PROBLEM.format(problem=ex["problem"]) + COMPLETION_TARGET_DELIMITER + ex["solution"]
            for ex in self.fewshot_rows
        ]
        blocks.append(COMPLETION_PROBLEM.format(problem=row["problem"]))
        if self.system_prompt:
            blocks.insert(0, self.system_prompt.strip())
        return COMPLETION_FEWSHOT_DELIMITER.join(blocks)

    def stop(self) -> list[str] | None:
        return list(COMPLETION_STOP) if self.mode == "completion" else None

    def score(self, row: dict[str, Any], completion: str) -> Score:
        return main_thread.call(score_completion, row, completion)

    async def ascore(self, row: dict[str, Any], completion: str) -> Score:
        """Scored in a worker process, off the event loop (sympy can take seconds)."""
        return await main_thread.acall(score_completion, row, completion)
