"""MATH's lm-eval-named scores equal lm-evaluation-harness 0.4.13's, on recorded verdicts (no lm-eval needed).

The cases come from the generated corpus (tests/fidelity/math_corpus.py, 2,000 pairs in 17 answer formats
and 26 references of 21 kinds), scored by lm-eval 0.4.13's own minerva_math `process_docs`/`process_results` in a
throwaway environment (tests/fidelity/lm_eval_env.py): 200 of the 852 pairs on which evalflow disagreed before
it scored by lm-eval's definitions (every fourth), and every 20th pair (7 are both). The whole corpus is
compared in the e2e lane (tests/fidelity/test_lm_eval_fidelity.py).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from envs.math import MathEnv

CASES = [
    json.loads(line)
    for line in (Path(__file__).parent / "data" / "math_lm_eval_cases.jsonl").read_text(encoding="utf-8").splitlines()
]


def test_the_recorded_cases_cover_every_format_and_both_verdicts() -> None:
    assert len(CASES) == 293
    assert len({c["format"] for c in CASES}) == 17 and len({c["answer_kind"] for c in CASES}) == 21
    verdicts = Counter((c["exact_match"], c["math_verify"]) for c in CASES)
    assert all(verdicts[v] >= 20 for v in [(True, True), (True, False), (False, True), (False, False)]), verdicts


@pytest.mark.parametrize("case", CASES, ids=[f"{c['row']['id']}-{c['format']}" for c in CASES])
def test_equals_lm_eval_0_4_13(case: dict) -> None:
    score = MathEnv().score(case["row"], case["completion"])
    assert (score.info["exact_match"], score.info["math_verify"]) == (case["exact_match"], case["math_verify"])
    # the reward accepts every completion either lm-eval metric accepts
    assert score.success or not (case["exact_match"] or case["math_verify"])
