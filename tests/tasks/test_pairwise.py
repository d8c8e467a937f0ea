"""Pairwise judging's arithmetic without a model: how two orders' labels become a win, a tie or a loss (and a flip),
and the win rate's interval clustered by prompt; then a comparison driven by a scripted stand-in judge."""

from __future__ import annotations

import asyncio

import pytest

from core.config import PairwiseConfig
from envs.judge import Judge, JudgeFailed
from tasks.judging.pairwise import compare_pairs, last_user_message, outcome, read_label, win_rate_interval

LABELS = PairwiseConfig().labels


def test_both_orders_decide_a_pair_and_a_disagreement_is_a_flipped_tie() -> None:
    assert outcome("a", "b") == ("this", False)  # this run's answer preferred as A and as B
    assert outcome("b", "a") == ("base", False)
    assert outcome("tie", "tie") == ("tie", False)
    assert outcome("a", "a") == ("tie", True)  # always the first answer: position, not quality
    assert outcome("a", "tie") == ("tie", True)
    assert outcome(None, "a") == (None, False)


def test_labels_are_the_last_word_named() -> None:
    assert read_label("A is longer, but B is right. Answer: B", LABELS) == "b"
    assert read_label("tie", LABELS) == "tie"
    assert read_label("Both are fine", LABELS) is None
    assert read_label("A-grade work", LABELS) is None  # a label inside a word is none


def test_the_win_rate_counts_ties_half_and_its_interval_is_clustered_by_prompt() -> None:
    mean, low, high = win_rate_interval({"p1": [1.0, 1.0], "p2": [0.0, 0.5], "p3": [1.0, 0.5]})
    assert mean == pytest.approx(4 / 6)
    assert low is not None and high is not None and low < mean < high <= 1.0
    # one prompt: no interval (one cluster says nothing about the spread over prompts)
    assert win_rate_interval({"p1": [1.0, 0.0]})[1:] == (None, None)
    assert win_rate_interval({}) == (None, None, None)


def test_last_user_message_reads_stored_messages() -> None:
    messages = '[{"role": "system", "content": "s"}, {"role": "user", "content": "What is 2+2?"}]'
    assert last_user_message(messages) == "What is 2+2?"
    assert last_user_message("plain prompt") == "plain prompt"


class PrefersLonger(Judge):
    """A stand-in judge (the mechanics around it are under test): prefers the longer answer, fails on 'boom'."""

    fingerprint = "scripted"

    async def ask(self, messages: list[dict[str, str]], sample: int = 0) -> str:
        text = messages[0]["content"]
        if "boom" in text:
            raise JudgeFailed("judge request failed (transient): test")
        a = text.split("Answer A:\n", 1)[1].split("\n\nAnswer B:", 1)[0]
        b = text.split("Answer B:\n", 1)[1].split("\n\nWhich", 1)[0]
        return "A" if len(a) > len(b) else "B" if len(b) > len(a) else "TIE"


def test_a_comparison_counts_wins_ties_losses_and_failed_pairs_per_benchmark() -> None:
    def row(answer: str, prompt: str = "q") -> dict:
        return {"messages": [{"role": "user", "content": prompt}], "completion": answer, "reference": "r"}

    this = {("b", "p1", 0): row("a long answer"), ("b", "p1", 1): row("x"), ("b", "p2", 0): row("same"),
            ("b", "p3", 0): row("boom"), ("b", "p4", 0): row("only here")}  # fmt: skip
    base = {("b", "p1", 0): row("short"), ("b", "p1", 1): row("longer one"), ("b", "p2", 0): row("same"),
            ("b", "p3", 0): row("x")}  # fmt: skip
    [result] = asyncio.run(compare_pairs(PrefersLonger(), PairwiseConfig(), this, base, "base-run"))
    assert (result.pairs, result.wins, result.losses, result.ties, result.failed) == (4, 1, 1, 1, 1)
    assert result.flips == 0 and result.win_rate == pytest.approx(0.5)
