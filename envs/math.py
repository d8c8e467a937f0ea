"""MATH-style competition problems: the answer is the last `\\boxed{}` of the completion, checked with math-verify."""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar

from envs.base import DatasetError, MetricSpec, Score, SingleTurnEnv
from envs.extract import answers_equal, last_boxed

INSTRUCTION = "Put your final answer within \\boxed{}."


def _reference_of(row: dict[str, Any]) -> str | None:
    """`answer` (a string or number), else the last `\\boxed{}` of the original MATH `solution`."""
    answer = row.get("answer")
    if isinstance(answer, int | float) and not isinstance(answer, bool):
        return str(answer)
    if isinstance(answer, str) and answer.strip():
        return answer.strip()
    solution = row.get("solution")
    return last_boxed(solution) if isinstance(solution, str) else None


def math_equal(pred: str | None, ref: str) -> bool:
    """Whether a boxed answer equals the reference (numerically, else symbolically via math-verify)."""
    return pred is not None and answers_equal(pred, ref)


class MathEnv(SingleTurnEnv):
    """Rows: `{"id", "problem", "answer"}`, or original MATH rows (`problem`, `solution`, no id)."""

    name: ClassVar[str] = "math"
    version: ClassVar[str] = "2"  # 2: malformed numbers (12..34) no longer equal a number
    default_dataset: ClassVar[str] = "data/math/test.jsonl"
    metrics: ClassVar[tuple[MetricSpec, ...]] = (
        MetricSpec("parse_error", "no answer", "rate", description="the completion has no \\boxed{} answer"),
    )

    def __init__(self, system_prompt: str | None = None) -> None:
        super().__init__(system_prompt=system_prompt)
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise ValueError(f"math: system_prompt must be a string or None, got {system_prompt!r}")
        self.system_prompt = system_prompt

    def validate_row(self, row: dict[str, Any], where: str) -> None:
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
        return {"instruction": INSTRUCTION, "system_prompt": self.system_prompt}

    def messages(self, row: dict[str, Any]) -> list[dict[str, str]]:
        msgs = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return [*msgs, {"role": "user", "content": f"{row['problem'].strip()}\n\n{INSTRUCTION}"}]

    def stop(self) -> list[str] | None:
        return None

    def score(self, row: dict[str, Any], completion: str) -> Score:
        boxed = last_boxed(completion)
        success = math_equal(boxed, self.reference(row))
        info = {"boxed_answer": boxed, "parse_error": boxed is None}
        return Score(reward=1.0 if success else 0.0, success=success, parsed_answer=boxed, info=info)
