"""GSM8K-style grade-school math: chat prompt with optional few-shot turns, lm-eval-compatible scoring."""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

from envs.base import REPO_ROOT, DatasetError, Score, SingleTurnEnv
from envs.extract import (
    answers_equal,
    flexible_extract,
    last_boxed,
    normalize_number,
    strict_match,
    to_number,
)

FEWSHOT_PATH = REPO_ROOT / "data" / "gsm8k" / "fewshot.jsonl"
# Asks for lm-eval's strict format. Measured with greedy SmolLM2-135M-Instruct on the shipped set: about a
# quarter of answers end `#### N`, as with other wordings tried; the rest are caught by flexible-extract.
INSTRUCTION = 'Solve the problem step by step. Then write the final answer on the last line as "#### <number>".'


def _reference_of(answer: Any) -> str | None:
    """The reference number of an `answer` field (plain number or worked solution ending `#### N`)."""
    if isinstance(answer, int) and not isinstance(answer, bool):
        return str(answer)
    if not isinstance(answer, str):
        return None
    text = answer.rsplit("####", 1)[1] if "####" in answer else answer
    ref = normalize_number(text)
    return ref if to_number(ref) is not None else None


@cache
def _load_fewshot(path: Path) -> tuple[dict[str, Any], ...]:
    """The shipped worked examples, read once per process."""
    rows = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if line.strip():
                row = json.loads(line)
                GSM8KEnv.check_row(row, f"{path}:{lineno}")
                rows.append(row)
    return tuple(rows)


class GSM8KEnv(SingleTurnEnv):
    """Rows: `{"id", "question", "answer"}` with answer a number, or original GSM8K (no id, `#### N`)."""

    name: ClassVar[str] = "gsm8k"
    version: ClassVar[str] = "1"
    default_dataset: ClassVar[str] = "data/gsm8k/test.jsonl"

    def __init__(self, fewshot: int = 0, system_prompt: str | None = None) -> None:
        super().__init__(fewshot=fewshot, system_prompt=system_prompt)
        available = _load_fewshot(FEWSHOT_PATH)
        if isinstance(fewshot, bool) or not isinstance(fewshot, int) or not 0 <= fewshot <= len(available):
            raise ValueError(f"gsm8k: fewshot must be an integer from 0 to {len(available)}, got {fewshot!r}")
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise ValueError(f"gsm8k: system_prompt must be a string or None, got {system_prompt!r}")
        self.fewshot_rows = available[:fewshot]
        self.system_prompt = system_prompt

    @staticmethod
    def check_row(row: dict[str, Any], where: str) -> None:
        """Row checks, also applied to the shipped few-shot file."""
        if "id" in row and (not isinstance(row["id"], str) or not row["id"].strip()):
            raise DatasetError(f"{where}: 'id' must be a non-empty string, got {row['id']!r}")
        question = row.get("question")
        if not isinstance(question, str) or not question.strip():
            raise DatasetError(f"{where}: missing or empty 'question' (a non-empty string)")
        if "answer" not in row:
            raise DatasetError(f"{where}: missing 'answer'")
        if _reference_of(row["answer"]) is None:
            raise DatasetError(
                f"{where}: 'answer' must be a number or a worked solution ending in '#### <number>', "
                f"got {str(row['answer'])[-60:]!r}"
            )

    def validate_row(self, row: dict[str, Any], where: str) -> None:
        self.check_row(row, where)

    def prompt_id(self, row: dict[str, Any]) -> str:
        if "id" in row:
            return row["id"]
        # The original GSM8K files have no ids; a content hash keeps cache keys stable across copies.
        return "gsm8k-" + hashlib.sha256(row["question"].strip().encode()).hexdigest()[:16]

    def reference(self, row: dict[str, Any]) -> str:
        ref = _reference_of(row["answer"])
        if ref is None:
            raise DatasetError(f"row {self.prompt_id(row)}: no reference number in 'answer'")
        return ref

    def prompt_templates(self) -> dict[str, Any]:
        return {
            "instruction": INSTRUCTION,
            "fewshot": [[ex["question"], ex["answer"]] for ex in self.fewshot_rows],
        }

    @staticmethod
    def _user_turn(question: str) -> str:
        return f"{question.strip()}\n\n{INSTRUCTION}"

    def messages(self, row: dict[str, Any]) -> list[dict[str, str]]:
        msgs: list[dict[str, str]] = []
        if self.system_prompt:
            msgs.append({"role": "system", "content": self.system_prompt})
        for ex in self.fewshot_rows:
            msgs.append({"role": "user", "content": self._user_turn(ex["question"])})
            msgs.append({"role": "assistant", "content": ex["answer"].strip()})
        msgs.append({"role": "user", "content": self._user_turn(row["question"])})
        return msgs

    def stop(self) -> list[str] | None:
        return None

    def score(self, row: dict[str, Any], completion: str) -> Score:
        ref = self.reference(row)
        strict, flexible = strict_match(completion), flexible_extract(completion)
        boxed = last_boxed(completion)
        correct = {
            "strict": answers_equal(strict, ref),
            "flexible": answers_equal(flexible, ref),
            "boxed": answers_equal(boxed, ref),
        }
        if boxed is not None:
            parsed, success = boxed, correct["boxed"]
        elif strict is not None:
            parsed, success = strict, correct["strict"]
        else:
            parsed, success = flexible, correct["flexible"]
        info = {
            "strict_correct": correct["strict"],
            "flexible_correct": correct["flexible"],
            "boxed_correct": correct["boxed"],
            "strict_answer": strict,
            "flexible_answer": flexible,
            "boxed_answer": boxed,
            "parse_error": parsed is None,
        }
        return Score(reward=1.0 if success else 0.0, success=success, parsed_answer=parsed, info=info)
