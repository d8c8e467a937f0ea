"""evalflow's lm-eval-named metrics against lm-evaluation-harness 0.4.13 itself, on generated corpora.

lm-eval runs from a throwaway environment (lm_eval_env.py: lm-eval without its dependencies, beside
evalflow's own versions of nltk, sympy, math-verify, ...) and scores every item with its task utilities;
evalflow scores the same items with its envs. Slow (minutes of sympy and langdetect), so it runs in the
e2e lane; lm-eval's verdicts are kept by the corpus's hash, so a rerun scores evalflow's side only. The
fast lane checks a few hundred recorded verdicts (tests/envs/test_math_lm_eval.py, test_ifeval_lm_eval.py).
Reasoning models' completions (reasoning_corpus.py) are compared with lm-eval run with `think_end_token`.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from core.reasoning import ThinkTags, split_text
from tests.fidelity import ifeval_corpus, math_corpus, reasoning_corpus
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
    # Where lm-eval draws nothing at random, every verdict agrees at every level. How many of the few random docs
    # happen to disagree is chance (it once took the share over all docs under 99.9%), so it is not counted; the
    # corpus keeps them rare.
    fixed = [i for i, item in enumerate(items) if not random_in_lm_eval(item["doc"])]
    assert len(items) - len(fixed) <= len(items) // 200
    exact = agreement([items[i] for i in fixed], [seeded[i] for i in fixed], [ev[i] for i in fixed])
    assert not exact["disagreements"]
    everything = exact["groups"]["all"]
    for level in LEVELS:
        total = everything["prompts" if level.startswith("prompt") else "instructions"]
        assert everything[level] == total, (level, everything[level], total)
    # every instruction id is covered, on both verdicts
    assert len(pinned["groups"]) == 26
    assert 0.2 < sum(bool(v["prompt_level_strict_acc"]) for v in as_run) / len(items) < 0.8


def _value(v: Any) -> Any:
    """A verdict as a number, or a list of them (lm-eval gives ints, floats and bools; evalflow bools)."""
    return [float(x) for x in v] if isinstance(v, list) else float(v)


def _accepted(verdict: dict) -> bool:
    """Whether one of lm-eval's whole-completion metrics (not the per-instruction lists) is 1."""
    return any(float(v) == 1.0 for v in verdict.values() if isinstance(v, (bool, int, float)))


def test_reasoning_completions_equal_lm_eval_with_think_end_token() -> None:
    items = reasoning_corpus.build()
    tasks = ("gsm8k", "math", "ifeval")
    assert all(Counter(item["task"] for item in items)[task] >= 1_000 for task in tasks)
    for task in tasks:
        assert {item["shape"] for item in items if item["task"] == task} == set(reasoning_corpus.SHAPES)
    # the corpus's answers are what the split documents (after the first end tag, left-stripped; "" when cut off)
    assert [split_text(item["response"], ThinkTags()).answer for item in items] == [item["answer"] for item in items]

    lm, _ = timed_lm_eval(items, seed_langdetect=True)  # langdetect seeded as evalflow seeds it
    ev, _ = timed_evalflow(items)
    differing = [
        (item["task"], item["shape"], key, want.get(key), value, item["response"])
        for item, want, got in zip(items, lm, ev, strict=True)
        for key, value in got.items()
        if key not in ("reward", "ended_in_reasoning") and (key not in want or _value(want[key]) != _value(value))
    ]
    assert differing == []
    published = {
        task: set().union(*(got for item, got in zip(items, ev, strict=True) if item["task"] == task)) for task in tasks
    }
    assert published == {
        "gsm8k": {"exact_match,strict-match", "exact_match,flexible-extract", "reward", "ended_in_reasoning"},
        "math": {"exact_match", "math_verify", "reward", "ended_in_reasoning"},
        "ifeval": {*LEVELS, "reward", "ended_in_reasoning"},
    }

    # cut off while thinking: no answer, so no reward, though lm-eval scores the whole text and often accepts it
    assert [got["ended_in_reasoning"] for got in ev] == [
        item["shape"] in reasoning_corpus.UNTERMINATED for item in items
    ]
    for task in tasks:
        cut = [
            (want, got)
            for item, want, got in zip(items, lm, ev, strict=True)
            if task == item["task"] and got["ended_in_reasoning"]
        ]
        assert len(cut) > 150 and [got["reward"] for _, got in cut] == [0.0] * len(cut)
        assert sum(_accepted(want) for want, _ in cut) > 10, task

    # a right answer only in the thinking (or before it), a wrong one or none after: no reward. Which are right
    # and which wrong is evalflow's verdict on each text alone.
    planted = [(i, item) for i, item in enumerate(items) if item["planted"] in ("thinking", "before", "second block")]
    probes = [
        {k: item[k] for k in ("task", "doc", "row") if k in item} | {"response": text}
        for _, item in planted
        for text in (item["plant"], item["answer"])
    ]
    alone, _ = timed_evalflow(probes)
    only = [
        i for n, (i, _) in enumerate(planted) if alone[2 * n]["reward"] == 1.0 and alone[2 * n + 1]["reward"] == 0.0
    ]
    for task in tasks:
        assert sum(items[i]["task"] == task for i in only) >= 50, task
    assert [(items[i]["shape"], ev[i]["reward"]) for i in only if ev[i]["reward"] != 0.0] == []
