"""GSM8K's declared metrics through compute_metrics: lm-eval's exact-match rates beside the numeric ones."""

from __future__ import annotations

import pytest

from envs.gsm8k import LM_EVAL_FLEXIBLE, LM_EVAL_STRICT, GSM8KEnv


def test_lm_eval_rates_are_reported_under_their_names(make_rollout, metrics_of) -> None:
    env = GSM8KEnv()
    row = {"id": "p", "question": "6 * 7?", "answer": "6 * 7 = 42.\n#### 42"}
    completions = ["#### 42", "#### 42.0", "It is 42.0", "#### 12..34"]
    rows = []
    for i, completion in enumerate(completions):
        s = env.score(row, completion)
        rows.append(
            make_rollout(
                prompt_id="p",
                repeat=i,
                completion=completion,
                success=s.success,
                reward=s.reward,
                parsed_answer=s.parsed_answer,
                reference=env.reference(row),
                info=s.info,
            )
        )
    bm = metrics_of(rows, {"gsm8k": env.metrics})["benchmarks"]["gsm8k"]
    found = {m["key"]: (m["label"], m["value"], m["n"]) for m in bm["env_metrics"]}
    # exact match: only "#### 42" (and its flexible token "42"); numeric: 42.0 counts too, 12..34 never
    assert found[LM_EVAL_STRICT] == (LM_EVAL_STRICT, 0.25, 4)
    assert found[LM_EVAL_FLEXIBLE] == (LM_EVAL_FLEXIBLE, 0.25, 4)
    assert found["strict_correct"] == ("strict (numeric)", 0.5, 4)
    assert found["flexible_correct"] == ("flexible (numeric)", 0.75, 4)
    assert bm["accuracy"] == pytest.approx(0.75)
    assert [m["key"] for m in bm["env_metrics"]][:4] == [
        LM_EVAL_STRICT,
        LM_EVAL_FLEXIBLE,
        "strict_correct",
        "flexible_correct",
    ]
