"""GSM8K-style grade-school math: lm-eval's exact-match scores plus numeric-equality variants.

Chat prompts with optional few-shot turns, or lm-eval's plain-completion prompt (`mode: completion`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from envs.base import REPO_ROOT, DatasetError, MetricSpec, Score
from envs.extract import (
    answers_equal,
    last_boxed,
    lm_eval_exact_match,
    lm_eval_flexible,
    lm_eval_strict,
    normalize_answer,
    normalize_number,
    to_number,
)
from envs.fewshot import FewShotQAEnv

FEWSHOT_PATH = REPO_ROOT / "data" / "gsm8k" / "fewshot.jsonl"
# Asks for lm-eval's strict format. Measured with greedy SmolLM2-135M-Instruct on the shipped set: about a
# quarter of answers end `#### N`, as with other wordings tried; the rest are caught by flexible-extract.
INSTRUCTION = 'Solve the problem step by step. Then write the final answer on the last line as "#### <number>".'

# Plain-completion mode renders lm-evaluation-harness's gsm8k task: `doc_to_text` "Question: {q}\nAnswer:",
# each few-shot example followed by " " + its worked solution, examples joined by "\n\n"; generation stops
# at the next "Question:", an end-of-sequence string, or a blank line (the solutions have none).
COMPLETION_QUESTION = "Question: {question}\nAnswer:"
COMPLETION_STOP = ("Question:", "</s>", "<|im_end|>", "\n\n")
# lm-eval's result names (metric,filter), used as the info keys and labels of its exact-match scores.
LM_EVAL_STRICT = "exact_match,strict-match"
LM_EVAL_FLEXIBLE = "exact_match,flexible-extract"


def _reference_of(answer: Any) -> str | None:
    """The reference number of an `answer` field (plain number or worked solution ending `#### N`)."""
    if isinstance(answer, int) and not isinstance(answer, bool):
        return str(answer)
    if not isinstance(answer, str):
        return None
    text = answer.rsplit("####", 1)[1] if "####" in answer else answer
    ref = normalize_number(text)
    return ref if to_number(ref) is not None else None


class GSM8KEnv(FewShotQAEnv):
    """Rows: `{"id", "question", "answer"}` with answer a number, or original GSM8K (no id, `#### N`).

    Options: `fewshot` (0-8 shipped worked examples), `system_prompt`, and `mode`: "chat" (default; chat
    turns with an instruction asking for `#### N`) or "completion" (lm-eval's plain "Question: ...\nAnswer:"
    prompt sent to the completions API, for base models). Scoring is the same in both.

    Scores: lm-evaluation-harness's own `exact_match,strict-match` and `exact_match,flexible-extract`
    (its filters, then a string match against the `answer` text: `42.0` is not `42`), and the looser
    numeric variants `strict_correct` / `flexible_correct` / `boxed_correct`, where the same extracted
    answer counts when it equals the reference as a number (`42.0` = `042` = `42`) or, failing that, by
    math-verify. The numeric ones are never below lm-eval's. The reward follows `boxed`, else `strict`,
    else `flexible` (numeric).
    """

    name: ClassVar[str] = "gsm8k"
    version: ClassVar[str] = "2"  # 2: lm-eval exact-match scores; malformed numbers no longer equal
    default_dataset: ClassVar[str] = "data/gsm8k/test.jsonl"
    lm_eval_metrics: ClassVar[tuple[tuple[str, str], ...]] = (
        (LM_EVAL_STRICT, LM_EVAL_STRICT),
        (LM_EVAL_FLEXIBLE, LM_EVAL_FLEXIBLE),
    )
    metrics: ClassVar[tuple[MetricSpec, ...]] = (
        MetricSpec(
            LM_EVAL_STRICT,
            LM_EVAL_STRICT,
            "rate",
            headline=True,
            description="lm-evaluation-harness gsm8k exact_match, strict-match filter: the first '#### <number>' "
            "matches the reference as a string (after dropping ',', '$' and a trailing '.'; case ignored)",
        ),
        MetricSpec(
            LM_EVAL_FLEXIBLE,
            LM_EVAL_FLEXIBLE,
            "rate",
            headline=True,
            description="lm-evaluation-harness gsm8k exact_match, flexible-extract filter: the completion's last "
            "number matches the reference as a string (after dropping ',', '$' and a trailing '.')",
        ),
        MetricSpec(
            "strict_correct",
            "strict (numeric)",
            "rate",
            headline=True,
            description="lm-eval's strict-match extraction, compared as numbers (42.0 = 42; at least lm-eval's score)",
        ),
        MetricSpec(
            "flexible_correct",
            "flexible (numeric)",
            "rate",
            headline=True,
            description="lm-eval's flexible-extract extraction, compared as numbers (42.0 = 42; at least lm-eval's "
            "score)",
        ),
        MetricSpec("boxed_correct", "boxed", "rate", description="the last \\boxed{} answer equals the reference"),
        MetricSpec("parse_error", "no answer", "rate", description="no \\boxed{}, '#### ' or other number found"),
    )

    fewshot_path: ClassVar[Path] = FEWSHOT_PATH
    question_field: ClassVar[str] = "question"
    target_field: ClassVar[str] = "answer"
    instruction: ClassVar[str] = INSTRUCTION
    completion_template: ClassVar[str] = COMPLETION_QUESTION
    completion_stop: ClassVar[tuple[str, ...]] = COMPLETION_STOP
    # `mode` enters the options (so the fingerprint) only when it is not the default: chat-mode fingerprints,
    # and so the cached chat rollouts, stay what they were before the option existed. The templates leave
    # out the system prompt (the options hold it).
    default_mode_in_options: ClassVar[bool] = False
    system_prompt_in_templates: ClassVar[bool] = False

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

    def reference(self, row: dict[str, Any]) -> str:
        ref = _reference_of(row["answer"])
        if ref is None:
            raise DatasetError(f"row {self.prompt_id(row)}: no reference number in 'answer'")
        return ref

    def score(self, row: dict[str, Any], completion: str) -> Score:
        ref = self.reference(row)
        strict_raw, flexible_raw = lm_eval_strict(completion), lm_eval_flexible(completion)
        strict, flexible = normalize_answer(strict_raw), normalize_answer(flexible_raw)
        boxed = last_boxed(completion)
        # lm-eval's target is the `answer` field itself (a worked solution or a number).
        target = str(row["answer"])
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
            LM_EVAL_STRICT: lm_eval_exact_match(strict_raw, target),
            LM_EVAL_FLEXIBLE: lm_eval_exact_match(flexible_raw, target),
            "strict_correct": correct["strict"],
            "flexible_correct": correct["flexible"],
            "boxed_correct": correct["boxed"],
            "strict_answer": strict,
            "flexible_answer": flexible,
            "boxed_answer": boxed,
            "parse_error": parsed is None,
        }
        return Score(reward=1.0 if success else 0.0, success=success, parsed_answer=parsed, info=info)
