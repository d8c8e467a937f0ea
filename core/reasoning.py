"""Reasoning and answer apart: a reasoning model's completion split at its think tags.

Qwen3, DeepSeek-R1 and their kin write `<think>...</think>` before the answer. Scoring reads the answer
only; the reasoning is kept beside it in the rollout record. Where the server splits the two (vLLM's
`--reasoning-parser`), its split is taken; otherwise `split_text` does the same here, so either way a
completion gives the same record:

- the reasoning ends at the FIRST end tag (as vLLM's parsers do); the answer is what follows, with its
  leading whitespace dropped (as lm-eval's `think_end_token` does);
- a completion that opens the block (it starts with the start tag, or the chat template opened it in the
  prompt) and never closes it is all reasoning: it has no answer, and `ended_in_reasoning` is true (cut off
  while thinking: no correct answer, whatever the thinking says). vLLM's parsers return no answer both for
  that and for a block closed with nothing after it; their split counts it cut off when the token limit
  ended it (finish_reason length);
- a completion with no tags at all (a model that does not think, or thinking turned off) is all answer.

`lm_eval_text` gives what lm-eval 0.4.13 scores with `think_end_token` set (`postprocess_generated_text`:
the text after the LAST end tag, left-stripped, or the whole text when there is none), rebuilt from the
record alone, so the metrics published under lm-eval's names equal lm-eval's on the same completions,
including its reading of a completion cut off while thinking (scored whole, thinking included).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, model_validator

from envs.base import Env, Score

THINK_START = "<think>"
THINK_END = "</think>"


class ThinkTags(BaseModel):
    """How a model marks its reasoning in text (`model.reasoning` in the config)."""

    model_config = ConfigDict(extra="forbid")

    start: str = Field(default=THINK_START, min_length=1, description="the tag that opens the reasoning")
    end: str = Field(default=THINK_END, min_length=1, description="the tag that closes it (lm-eval's think_end_token)")
    switch: str = Field(
        default="enable_thinking",
        min_length=1,
        description="the chat template's keyword that turns thinking on or off (benchmarks.N.thinking): "
        "enable_thinking for Qwen3, thinking for DeepSeek-V3.1",
    )
    opened_by_template: bool = Field(
        default=False,
        description="the chat template opens the reasoning in the prompt (DeepSeek-R1, Qwen3 *-Thinking-2507): a "
        "completion without the end tag is then all reasoning, unless the benchmark's thinking is off",
    )

    @model_validator(mode="after")
    def _distinct(self) -> ThinkTags:
        if self.start == self.end:
            raise ValueError(f"start and end are both {self.start!r}: the tags must differ")
        return self


@dataclass(frozen=True)
class Split:
    """A completion as reasoning (None: the completion has none) and answer. `tagged`: the completion itself opened
    its reasoning with the start tag (false where the chat template opened it in the prompt, or where text came
    before the tag of a block never closed, which the reasoning then keeps, tag and all)."""

    reasoning: str | None
    answer: str
    ended_in_reasoning: bool
    tagged: bool = True


def split_text(text: str, tags: ThinkTags, opened: bool = False) -> Split:
    """Split a completion at its think tags (`opened`: the prompt already opened the reasoning)."""
    head = text.lstrip()
    starts = head.startswith(tags.start)
    reasoning_from = len(text) - len(head) + len(tags.start) if starts else 0
    end = text.find(tags.end, reasoning_from)
    if end >= 0:
        begin = reasoning_from
        if not starts and (first := text.find(tags.start, 0, end)) >= 0:  # text before an opening tag: dropped
            begin = first + len(tags.start)
        return _second_block(Split(text[begin:end], text[end + len(tags.end) :].lstrip(), False), tags)
    if starts:
        return Split(text[reasoning_from:], "", True)
    if opened or tags.start in text:  # opened in the prompt, or after some text: all reasoning, kept as written
        return Split(text, "", True, tagged=False)
    return Split(None, text, False)


def _second_block(split: Split, tags: ThinkTags) -> Split:
    """A split whose answer opens another think block: that block is reasoning too (vLLM's parsers leave it in
    the content; a second block is never the answer)."""
    if split.reasoning is None or not split.answer.startswith(tags.start):
        return split
    inner = split_text(split.answer, tags)
    assert inner.reasoning is not None
    reasoning = split.reasoning + tags.end + (tags.start if inner.tagged else "") + inner.reasoning
    return Split(reasoning, inner.answer, inner.ended_in_reasoning, split.tagged)


def from_server(
    reasoning: str | None, content: str | None, finish_reason: str | None, tags: ThinkTags, opened: bool = False
) -> Split:
    """The server's split (vLLM's `reasoning` field beside `content`). Without a reasoning field (no parser, or
    thinking off) the content is split here; an answer that opens a second think block is split again."""
    if reasoning is None:
        return split_text(content or "", tags, opened)
    answer = (content or "").lstrip()
    split = Split(reasoning, answer, not answer and finish_reason == "length", tagged=not opened)
    return _second_block(split, tags)


def lm_eval_text(split: Split, tags: ThinkTags) -> str:
    """What lm-eval 0.4.13 scores for this completion with `think_end_token` set (see the module doc); for a
    completion without reasoning, the answer unchanged (lm-eval without `think_end_token`)."""
    if split.reasoning is None:
        return split.answer
    if split.ended_in_reasoning:  # lm-eval keeps a completion with no end tag whole
        return ((tags.start if split.tagged else "") + split.reasoning).lstrip()
    return split.answer.split(tags.end)[-1].lstrip()


def lm_eval_keys(env: Env) -> tuple[str, ...]:
    """The `info` keys an environment publishes under lm-eval's names (its `lm_eval_metrics` sources that are info
    keys; "pass@1" follows the rollout's success)."""
    return tuple(source for _, source in env.lm_eval_metrics if source != "pass@1")


def needs_lm_eval_score(env: Env, split: Split, tags: ThinkTags) -> bool:
    """Whether lm-eval reads other text than the answer here, so its keys need a second score."""
    return bool(lm_eval_keys(env)) and lm_eval_text(split, tags) != split.answer


def merged_score(env: Env, answer: Score, lm_eval: Score | None, split: Split) -> Score:
    """The rollout's verdict: the score of its answer, with the keys published under lm-eval's names taken from
    the score of lm-eval's text where that differs (`lm_eval`); a completion cut off while reasoning has no
    answer, so its reward is 0 and it is no success, whatever the environment made of the empty answer."""
    info = dict(answer.info)
    if lm_eval is not None:
        info.update({key: lm_eval.info[key] for key in lm_eval_keys(env) if key in lm_eval.info})
    if split.ended_in_reasoning:
        return Score(reward=0.0, success=False, parsed_answer=None, info=info)
    return Score(reward=answer.reward, success=answer.success, parsed_answer=answer.parsed_answer, info=info)
