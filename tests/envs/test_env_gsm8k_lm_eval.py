"""GSM8K's lm-eval exact-match scores against lm-evaluation-harness 0.4.13, beside the numeric variants."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envs.gsm8k import LM_EVAL_FLEXIBLE, LM_EVAL_STRICT, GSM8KEnv

# Completions and `answer` fields scored by lm-eval 0.4.13 itself: its gsm8k.yaml's two RegexFilters
# (lm_eval.filters.extraction.RegexFilter) and exact_match (lm_eval.api.metrics.exact_match_hf_evaluate
# with the yaml's ignore_case/ignore_punctuation/regexes_to_ignore). Picked from 20,000 generated cases
# (all of which this env matched): the 169 where lm-eval and the numeric scores disagree, 100 lm-eval
# hits and 131 others.
LM_EVAL_CASES = Path(__file__).parent / "data" / "gsm8k_lm_eval_cases.jsonl"


def info(completion: str, answer: Any = "42") -> dict[str, Any]:
    return GSM8KEnv().score({"id": "x", "question": "q", "answer": answer}, completion).info


def scores(completion: str, answer: Any = "42") -> tuple[bool, bool, bool, bool]:
    """(lm-eval strict, lm-eval flexible, numeric strict, numeric flexible)."""
    i = info(completion, answer)
    return i[LM_EVAL_STRICT], i[LM_EVAL_FLEXIBLE], i["strict_correct"], i["flexible_correct"]


@pytest.mark.parametrize(
    ("completion", "answer", "expected"),
    [
        ("6 * 7 = 42\n#### 42", "42", (True, True, True, True)),
        # numbers that are equal but not the same string: only the numeric variants count them
        ("#### 42.0", "42", (False, False, True, True)),
        ("#### 042", "42", (False, False, True, True)),
        ("It costs 3.50", "3.5", (False, False, False, True)),
        ("#### .5", "0.5", (False, False, True, True)),
        # lm-eval drops ',', '$' and one trailing '.' from both sides
        ("#### 1,234", "1234", (True, True, True, True)),
        ("The total is $1,234.", "So 1,000 + 234.\n#### 1,234", (False, True, False, True)),
        ("#### 42.", "42", (True, True, True, True)),
        ("#### -7", "Down 7.\n#### -7", (True, True, True, True)),
        # the target is the whole `answer` text up to its last '#### ' (integers as written)
        ("#### 42", 42, (True, True, True, True)),
        ("#### 42", "6 * 7 = 42.\n#### 42", (True, True, True, True)),
        # malformed numbers: math-verify used to read `12..34` as 12
        ("#### 12..34", "12", (False, False, False, False)),
        ("#### 0.0.0", "0", (False, False, False, False)),
        ("no number here", "42", (False, False, False, False)),
    ],
)
def test_lm_eval_exact_match_beside_numeric(completion: str, answer: Any, expected: tuple[bool, ...]) -> None:
    assert scores(completion, answer) == expected


def test_lm_eval_metrics_are_declared_under_lm_eval_names() -> None:
    specs = {m.key: m for m in GSM8KEnv.metrics}
    for key in (LM_EVAL_STRICT, LM_EVAL_FLEXIBLE):
        assert (specs[key].label, specs[key].kind, specs[key].headline) == (key, "rate", True)
    assert (LM_EVAL_STRICT, LM_EVAL_FLEXIBLE) == ("exact_match,strict-match", "exact_match,flexible-extract")
    # the numeric variants stay, described as what they are
    assert "numbers" in specs["strict_correct"].description and "numbers" in specs["flexible_correct"].description
    assert "numeric" in specs["strict_correct"].label and "numeric" in specs["flexible_correct"].label


def test_matches_lm_eval_0_4_13_on_recorded_cases() -> None:
    cases = [json.loads(line) for line in LM_EVAL_CASES.read_text().splitlines()]
    assert len(cases) == 400
    numeric = [scores(c["completion"], c["answer"]) for c in cases]
    assert [n[:2] for n in numeric] == [(c["strict-match"], c["flexible-extract"]) for c in cases]
    # the numeric variants are never below lm-eval's, and above it on the disagreeing cases
    assert all(ns >= s and nf >= f for s, f, ns, nf in numeric)
    assert sum(ns > s or nf > f for s, f, ns, nf in numeric) > 100
