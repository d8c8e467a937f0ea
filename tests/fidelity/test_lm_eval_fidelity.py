"""evalflow's lm-eval-named metrics against lm-evaluation-harness 0.4.13 itself, on generated corpora.

lm-eval runs from a throwaway environment (lm_eval_env.py: lm-eval without its dependencies, beside
evalflow's own versions of nltk, sympy, math-verify, ...) and scores every item with its task utilities;
evalflow scores the same items with its envs. Slow (minutes of sympy and langdetect), so it runs in the
e2e lane; lm-eval's verdicts are kept by the corpus's hash, so a rerun scores evalflow's side only. The
fast lane checks a few hundred recorded verdicts (tests/envs/test_math_lm_eval.py, test_ifeval_lm_eval.py).
"""

from __future__ import annotations

import pytest

from tests.fidelity import ifeval_corpus, math_corpus
from tests.fidelity.evalflow_side import timed_evalflow
from tests.fidelity.ifeval_agreement import LEVELS, agreement, explain, random_in_lm_eval
from tests.fidelity.lm_eval_env import timed_lm_eval
from tests.fidelity.math_agreement import compare, disagreements

pytestmark = pytest.mark.e2e


def test_math_equals_lm_eval_on_2000_pairs_in_every_answer_format() -> None:
    items = math_corpus.build(2_000)
    lm, _ = timed_lm_eval(items)
    ev, _ = timed_evalflow(items)
    n, exact_agree, verify_agree, verify_accepted, reward_accepted, exact_accepted = compare(items, lm, ev)["groups"][
        "all"
    ]
    assert disagreements(items, lm, ev) == []
    assert (n, exact_agree, verify_agree) == (2_000, 2_000, 2_000)
    assert reward_accepted == verify_accepted
    # both verdicts occur often enough for the agreement to mean something
    assert 400 < exact_accepted < 1_600 and 400 < verify_accepted < 1_600


def test_ifeval_equals_lm_eval_on_10000_edge_responses_but_where_lm_eval_is_random() -> None:
    items = ifeval_corpus.build(10_000)
    as_run, _ = timed_lm_eval(items)  # langdetect unseeded, as lm-eval runs
    seeded, _ = timed_lm_eval(items, seed_langdetect=True)
    ev, _ = timed_evalflow(items)
    assert len(items) >= 10_000
    causes = [d["cause"] for d in explain(items, as_run, seeded, ev)]
    assert "UNEXPLAINED" not in causes, [d for d in explain(items, as_run, seeded, ev) if d["cause"] == "UNEXPLAINED"]
    # with langdetect seeded as evalflow seeds it, only the docs where lm-eval draws a random letter differ
    pinned = agreement(items, seeded, ev)
    assert all(random_in_lm_eval(d["doc"]) for d in pinned["disagreements"])
    everything = pinned["groups"]["all"]
    for level in LEVELS:
        total = everything["prompts" if level.startswith("prompt") else "instructions"]
        assert everything[level] / total >= 0.999, (level, everything[level], total)
    # every instruction id is covered, on both verdicts
    assert len(pinned["groups"]) == 26
    assert 0.2 < sum(bool(v["prompt_level_strict_acc"]) for v in as_run) / len(items) < 0.8
