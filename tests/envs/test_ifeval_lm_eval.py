"""IFEval's four accuracies equal lm-evaluation-harness 0.4.13's, on recorded verdicts (no lm-eval needed).

The cases come from the edge corpus (tests/fidelity/ifeval_corpus.py, 10,008 responses, seed 0), scored by
lm-eval 0.4.13's own `lm_eval.tasks.ifeval.utils.process_results` in a throwaway environment
(tests/fidelity/lm_eval_env.py) with langdetect seeded 0, as evalflow seeds it; only cases whose verdicts
are the same unseeded are kept, and none with a `letter` lm-eval replaces by a random one. They are the
responses on which evalflow's earlier approximations disagreed (up to 25 per instruction id, shortest
first: 221) and up to 7 agreeing ones per id (175). `uv run python tests/fidelity/ifeval_agreement.py`
compares the whole corpus.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from envs.ifeval import IFEvalEnv
from envs.ifeval_checks import INSTRUCTIONS

pytest.importorskip("langdetect", reason="language checks need langdetect (a project dependency)")

LEVELS = ("prompt_level_strict_acc", "inst_level_strict_acc", "prompt_level_loose_acc", "inst_level_loose_acc")
CASES = [
    json.loads(line)
    for line in (Path(__file__).parent / "data" / "ifeval_lm_eval_cases.jsonl").read_text(encoding="utf-8").splitlines()
]


def test_the_recorded_cases_cover_every_instruction_and_both_verdicts() -> None:
    assert len(CASES) == 396
    assert sum(c["old_code_disagreed"] for c in CASES) == 221
    ids = Counter(i for c in CASES for i in c["doc"]["instruction_id_list"])
    assert set(ids) == set(INSTRUCTIONS) and min(ids.values()) >= 7
    verdicts = Counter(ok for c in CASES for level in LEVELS[1::2] for ok in c["lm_eval"][level])
    assert verdicts[True] >= 100 and verdicts[False] >= 100


def test_every_recorded_case_is_validated_and_scored_as_lm_eval_scores_it() -> None:
    env = IFEvalEnv()
    wrong = []
    for case in CASES:
        env.validate_row(case["doc"], f"key {case['doc']['key']}")
        info = env.score(case["doc"], case["response"]).info
        got = {level: info[level] for level in LEVELS}
        if got != case["lm_eval"]:
            wrong.append((case["edge"], case["response"][:80], case["lm_eval"], got))
    assert not wrong, f"{len(wrong)} cases differ from lm-eval, e.g. {wrong[:3]}"
