"""Scoring a completion's answer: the one place a rollout's verdict is asked of its environment, by collection and
rescoring alike. The completion is split into reasoning and answer (core/reasoning.py) before any scorer sees it;
the scorer gets the answer only. The keys published under lm-eval's names are scored on lm-eval's own reading of
the completion where that differs (a completion cut off while thinking, which lm-eval scores whole).
"""

from __future__ import annotations

from typing import Any

from core.reasoning import Split, ThinkTags, lm_eval_text, merged_score, needs_lm_eval_score
from envs.base import Score, SingleTurnEnv
from tasks.collection.env_calls import checked_score, env_call


async def _score(env: SingleTurnEnv, row: dict[str, Any], text: str, timeout_s: float) -> Score:
    return checked_score(env, "score", await env_call(env, "score", timeout_s, env.ascore, row, text))


async def score_answer(
    env: SingleTurnEnv, row: dict[str, Any], split: Split, tags: ThinkTags, timeout_s: float
) -> Score:
    """The verdict on a split completion: its answer scored, lm-eval's keys from lm-eval's text, and no success
    for a completion cut off while reasoning (core.reasoning.merged_score)."""
    answer = await _score(env, row, split.answer, timeout_s)
    lm_eval = (
        await _score(env, row, lm_eval_text(split, tags), timeout_s) if needs_lm_eval_score(env, split, tags) else None
    )
    return merged_score(env, answer, lm_eval, split)


def opened_by_prompt(tags: ThinkTags, extra_body: dict[str, Any]) -> bool:
    """Whether the chat template opened the reasoning in the prompt: the model's template does, and the request did
    not turn thinking off."""
    kwargs = extra_body.get("chat_template_kwargs")
    off = isinstance(kwargs, dict) and kwargs.get(tags.switch) is False
    return tags.opened_by_template and not off
