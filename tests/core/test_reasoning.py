"""core.reasoning: a reasoning model's completion split into reasoning and answer, lm-eval's reading of it
(`think_end_token`), and the merged verdict. The e2e lane compares the published metrics with lm-eval itself
on thousands of completions (tests/fidelity/test_lm_eval_fidelity.py); these are the rules, one case each."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from core.reasoning import (
    Split,
    ThinkTags,
    from_server,
    lm_eval_keys,
    lm_eval_text,
    merged_score,
    needs_lm_eval_score,
    split_text,
)
from envs.base import Score
from envs.gsm8k import LM_EVAL_FLEXIBLE, LM_EVAL_STRICT, GSM8KEnv

TAGS = ThinkTags()
ROW = {"id": "x", "question": "q", "answer": "3 + 4 = 7.\n#### 7"}


def postprocess(text: str, end: str = "</think>") -> str:
    """lm-eval 0.4.13's `postprocess_generated_text(text, None, end)` (lm_eval/models/utils.py)."""
    return text.split(end)[-1].lstrip()


@pytest.mark.parametrize(
    ("text", "reasoning", "answer", "ended"),
    [
        # the answer follows the end tag, its leading whitespace dropped
        ("<think>\n3+4 = 7\n</think>\n\n#### 7", "\n3+4 = 7\n", "#### 7", False),
        ("<think></think>#### 7", "", "#### 7", False),
        ("<think>\n\n</think>\n\n#### 7", "\n\n", "#### 7", False),
        # whitespace before the start tag
        ("\n\n  <think>r</think> #### 7", "r", "#### 7", False),
        # a closed block with nothing after it: no answer, but not cut off
        ("<think>r</think>\n\n", "r", "", False),
        # unterminated: all reasoning, no answer, cut off
        (
            "<think>\n3+4 = 7. So the answer is 7. Hmm but maybe",
            "\n3+4 = 7. So the answer is 7. Hmm but maybe",
            "",
            True,
        ),
        ("  <think>r </thi", "r </thi", "", True),
        # no tags: all answer, unchanged (leading whitespace kept)
        ("#### 7", None, "#### 7", False),
        ("  The answer is 7.", None, "  The answer is 7.", False),
        # text before the start tag: dropped with the reasoning when the block closes
        ("Okay. <think>r</think>#### 7", "r", "#### 7", False),
        # ... and without an end tag it is all reasoning, kept as written (vLLM's parsers give no answer either)
        ("Okay. <think>r, 7", "Okay. <think>r, 7", "", True),
        # no start tag (the template opened the block): reasoning up to the end tag
        ("r</think>\n#### 7", "r", "#### 7", False),
        # the FIRST end tag ends the reasoning; a later one stays in the answer
        (
            '<think>r</think>\n#### 7\n```python\ns = "</think>"\n```\n#### 8',
            "r",
            '#### 7\n```python\ns = "</think>"\n```\n#### 8',
            False,
        ),
        # a second block right after the first is reasoning too
        ("<think>a</think>\n<think>b</think>\n#### 7", "a</think><think>b", "#### 7", False),
    ],
)
def test_split_text(text: str, reasoning: str | None, answer: str, ended: bool) -> None:
    split = split_text(text, TAGS)
    assert (split.reasoning, split.answer, split.ended_in_reasoning) == (reasoning, answer, ended)


def test_opened_makes_a_completion_without_an_end_tag_all_reasoning() -> None:
    assert split_text("3+4 = 7, so 7", TAGS, opened=True) == Split("3+4 = 7, so 7", "", True, tagged=False)
    assert split_text("r</think>#### 7", TAGS, opened=True) == Split("r", "#### 7", False)
    assert split_text("3+4 = 7, so 7", TAGS) == Split(None, "3+4 = 7, so 7", False)


def test_other_tags() -> None:
    tags = ThinkTags(start="<reasoning>", end="</reasoning>")
    assert split_text("<reasoning>r</reasoning> 7 </think>", tags) == Split("r", "7 </think>", False)
    assert split_text("<think>r</think> 7", tags) == Split(None, "<think>r</think> 7", False)


@pytest.mark.parametrize("start", ["<think>", "</think>"])
def test_tags_must_differ(start: str) -> None:
    with pytest.raises(ValidationError, match="must differ"):
        ThinkTags(start=start, end=start)
    if start == "<think>":
        assert ThinkTags(start=start).end == "</think>"


@pytest.mark.parametrize(
    "text",
    [
        "<think>\nr\n</think>\n\n#### 7",
        "<think></think>#### 7",
        "\n <think>r</think>#### 7",
        "Okay. <think>r</think>#### 7",
        "<think>r</think>",
        "<think>\n3+4 = 7. So the answer is 7. Hmm but maybe",  # lm-eval scores it whole
        "\n\n<think>r, 7",
        '<think>r</think>\n#### 7\n```python\ns = "</think>"\n```\n#### 8',  # lm-eval: after the LAST end tag
        "<think>a</think>\n<think>b</think>\n#### 7",
        "r</think>\n#### 7",
        "#### 7",
        "Okay. <think>r, 7",
    ],
)
def test_lm_eval_text_is_what_lm_eval_reads(text: str) -> None:
    assert lm_eval_text(split_text(text, TAGS), TAGS) == postprocess(text)


def test_lm_eval_text_of_a_tagless_completion_keeps_its_leading_whitespace() -> None:
    # lm-eval without think_end_token (the completion has no reasoning): the text unchanged
    assert lm_eval_text(split_text("  #### 7", TAGS), TAGS) == "  #### 7"


def test_lm_eval_text_of_an_unterminated_template_opened_completion() -> None:
    text = '"So the answer is 7."'  # the template opened the block; the completion has no tag at all
    assert lm_eval_text(split_text(text, TAGS, opened=True), TAGS) == postprocess(text)


def test_from_server_takes_the_servers_split() -> None:
    assert from_server("r", "\n\n#### 7", "stop", TAGS) == Split("r", "#### 7", False)
    # no reasoning field (no parser, thinking off): the content is split here
    assert from_server(None, "<think>r</think>#### 7", "stop", TAGS) == Split("r", "#### 7", False)
    assert from_server(None, None, "stop", TAGS) == Split(None, "", False)
    assert from_server(None, "r, 7", "length", TAGS, opened=True) == Split("r, 7", "", True, tagged=False)
    # content with a block the parser left: split again, its reasoning joined to the server's
    assert from_server("a", "\n<think>b</think>\n#### 7", "stop", TAGS) == Split("a</think><think>b", "#### 7", False)
    assert from_server("a", "b</think> #### 7", "stop", TAGS) == Split(
        "a", "b</think> #### 7", False
    )  # as vLLM leaves it


@pytest.mark.parametrize(("finish_reason", "ended"), [("length", True), ("stop", False), (None, False)])
def test_from_server_counts_no_answer_cut_off_only_when_the_token_limit_ended_it(
    finish_reason: str | None, ended: bool
) -> None:
    assert from_server("r", "", finish_reason, TAGS) == Split("r", "", ended)
    assert from_server("r", "  \n", finish_reason, TAGS) == Split("r", "", ended)
    assert from_server("r", "#### 7", finish_reason, TAGS) == Split("r", "#### 7", False)


def test_a_second_block_gives_the_same_answer_from_the_text_as_from_the_server() -> None:
    text = "<think>a</think>\n\n<think>b #### 7</think>\n\n#### 8"
    server = from_server("a", "\n\n<think>b #### 7</think>\n\n#### 8", "stop", TAGS)
    assert split_text(text, TAGS).answer == server.answer == "#### 8"


def score(text: str) -> Score:
    """As the collection scores a completion."""
    env, split = GSM8KEnv(), split_text(text, TAGS)
    answer = env.score(ROW, split.answer)
    lm = env.score(ROW, lm_eval_text(split, TAGS)) if needs_lm_eval_score(env, split, TAGS) else None
    return merged_score(env, answer, lm, split)


def test_merged_score_zeroes_a_completion_cut_off_while_thinking_and_keeps_lm_evals_keys() -> None:
    got = score("<think>\n3+4 = 7. So the answer is 7.\n#### 7")
    assert (got.reward, got.success, got.parsed_answer) == (0.0, False, None)
    # lm-eval scores the whole text, so its keys say right; evalflow's own say the (empty) answer is wrong
    assert got.info[LM_EVAL_STRICT] is True and got.info[LM_EVAL_FLEXIBLE] is True
    assert got.info["strict_correct"] is False and got.info["parse_error"] is True


def test_merged_score_takes_lm_evals_keys_from_after_the_last_end_tag() -> None:
    got = score('<think>r</think>\n#### 7\n```python\ns = "</think>"\n```\n#### 8')
    assert (got.reward, got.success, got.parsed_answer) == (1.0, True, "7")  # the answer: the first #### 7
    assert got.info[LM_EVAL_STRICT] is False and got.info[LM_EVAL_FLEXIBLE] is False  # lm-eval: #### 8
    assert got.info["strict_correct"] is True


def test_merged_score_ignores_the_thinking() -> None:
    got = score("<think>so #### 7</think>\n\n#### 8")
    assert got.reward == 0.0 and not got.info[LM_EVAL_STRICT] and not got.info[LM_EVAL_FLEXIBLE]
    got = score("<think>maybe #### 8</think>\n\n#### 7")
    assert got.reward == 1.0 and got.info[LM_EVAL_STRICT] and got.info[LM_EVAL_FLEXIBLE]


def test_no_second_score_where_lm_eval_reads_the_answer() -> None:
    env = GSM8KEnv()
    assert lm_eval_keys(env) == (LM_EVAL_STRICT, LM_EVAL_FLEXIBLE)
    assert not needs_lm_eval_score(env, split_text("<think>r</think>\n#### 7", TAGS), TAGS)
    assert not needs_lm_eval_score(env, split_text("#### 7", TAGS), TAGS)
    assert needs_lm_eval_score(env, split_text("<think>r, 7", TAGS), TAGS)
    answer = env.score(ROW, "#### 7")
    assert merged_score(env, answer, None, Split("r", "#### 7", False)) == answer
