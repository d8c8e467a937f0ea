"""Pairwise judging: this run's answer and its baseline's to the same prompt and repeat, shown to the judge in both
orders (A/B, then B/A). A win when both orders prefer this run's answer, a loss when both prefer the baseline's,
a tie otherwise (the judge said tie, or its verdict flipped with the order: counted as a flip). The win rate
(ties half) has a 95% CI clustered by prompt, since a prompt's repeats are not independent.

The questions go through the run's judge client, so they are cached like every judge answer: a rerun asks nothing.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections import defaultdict
from typing import Any, Literal

import pyarrow.parquet as pq

from core.config import PairwiseConfig
from core.judge_record import Pairwise
from core.store import Store
from envs.judge import Judge, JudgeFailed, named_labels
from envs.task_spec import compile_template
from tasks.analysis.stats import clustered_interval

Side = Literal["this", "base", "tie"]
COLUMNS = ["benchmark", "prompt_id", "repeat", "messages", "completion", "reference", "error", "ended_in_reasoning"]


def answers(store: Store, files: list[str]) -> dict[tuple[str, str, int], dict[str, Any]]:
    """The answered rollouts of `files` by (benchmark, prompt id, repeat): no request error, not cut off while
    reasoning (those have no answer to compare)."""
    found: dict[tuple[str, str, int], dict[str, Any]] = {}
    for url in files:
        with store.open(url, "rb") as f:
            schema = pq.read_schema(f)
            f.seek(0)
            rows = pq.read_table(f, columns=[c for c in COLUMNS if c in schema.names]).to_pylist()
        for row in rows:
            if row.get("error") is None and not row.get("ended_in_reasoning") and row.get("completion") is not None:
                found[(row["benchmark"], row["prompt_id"], row["repeat"])] = row
    return found


def last_user_message(messages: Any) -> str:
    """What was asked: the last user message (a plain-text prompt as it is)."""
    if isinstance(messages, str):
        try:
            messages = json.loads(messages)
        except ValueError:
            return messages
    if isinstance(messages, list):
        users = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        if users and isinstance(users[-1], str):
            return users[-1]
    return str(messages)


def read_label(text: str, labels: dict[str, Literal["a", "b", "tie"]]) -> Literal["a", "b", "tie"] | None:
    """The meaning of the last of the judge's words named in its answer (case ignored), or None."""
    found = named_labels(text, labels)
    if not found:
        return None
    by_fold: dict[str, Literal["a", "b", "tie"]] = {w.casefold(): meaning for w, meaning in labels.items()}
    return by_fold.get(str(found[-1]).casefold())


def outcome(first: str | None, second: str | None) -> tuple[Side | None, bool]:
    """(the pair's outcome, whether the verdict flipped with the order) from the two orders' labels: `first` with this
    run's answer as A, `second` with it as B."""
    if first is None or second is None:
        return None, False
    pref1: Side = "this" if first == "a" else "base" if first == "b" else "tie"
    pref2: Side = "base" if second == "a" else "this" if second == "b" else "tie"
    if pref1 == pref2:
        return pref1, False
    return "tie", True


def win_rate_interval(scores_by_prompt: dict[str, list[float]]) -> tuple[float | None, float | None, float | None]:
    """(mean, low, high): the pairs' mean score with a 95% CI from the cluster-robust SE over prompts."""
    n = sum(len(v) for v in scores_by_prompt.values())
    if not n:
        return None, None, None
    mean = sum(sum(v) for v in scores_by_prompt.values()) / n
    g = len(scores_by_prompt)
    se = None
    if g > 1:
        spread = sum((sum(v) - len(v) * mean) ** 2 for v in scores_by_prompt.values())
        se = math.sqrt(spread * g / (g - 1)) / n
    interval = clustered_interval(mean, se, g, n, clip=True)
    return mean, interval.low, interval.high


async def compare_pairs(
    judge: Judge,
    cfg: PairwiseConfig,
    this: dict[tuple[str, str, int], dict[str, Any]],
    base: dict[tuple[str, str, int], dict[str, Any]],
    baseline_run_id: str,
) -> list[Pairwise]:
    """Every shared (benchmark, prompt, repeat) asked in both orders; one result per benchmark."""
    template = compile_template(cfg.rubric)
    shared = sorted(k for k in this if k in base and (cfg.benchmarks is None or k[0] in cfg.benchmarks))

    def question(row: dict[str, Any], a: str, b: str) -> list[dict[str, str]]:
        values = {"prompt": last_user_message(row.get("messages")), "reference": row.get("reference") or "",
                  "answer_a": a, "answer_b": b}  # fmt: skip
        return [{"role": "user", "content": template.render(values)}]

    async def one(key: tuple[str, str, int]) -> tuple[Side | None, bool, bool]:
        mine, theirs = this[key]["completion"], base[key]["completion"]
        try:
            texts = await asyncio.gather(
                judge.ask(question(this[key], mine, theirs)), judge.ask(question(this[key], theirs, mine))
            )
        except JudgeFailed:
            return None, False, True
        side, flipped = outcome(read_label(texts[0], cfg.labels), read_label(texts[1], cfg.labels))
        return side, flipped, False

    results = await asyncio.gather(*(one(k) for k in shared))
    per_bench: dict[str, list[tuple[tuple[str, str, int], Side | None, bool, bool]]] = defaultdict(list)
    for key, (side, flipped, failed) in zip(shared, results, strict=True):
        per_bench[key[0]].append((key, side, flipped, failed))
    out = []
    for bench, items in sorted(per_bench.items()):
        scores: dict[str, list[float]] = defaultdict(list)
        for (_, prompt, _), side, _, _ in items:
            if side is not None:
                scores[prompt].append(1.0 if side == "this" else 0.0 if side == "base" else 0.5)
        mean, low, high = win_rate_interval(scores)
        failed = sum(f for *_, f in items)
        out.append(
            Pairwise(
                benchmark=bench,
                baseline_run_id=baseline_run_id,
                pairs=len(items),
                wins=sum(s == "this" for _, s, _, _ in items),
                ties=sum(s == "tie" for _, s, _, _ in items),
                losses=sum(s == "base" for _, s, _, _ in items),
                flips=sum(fl for _, _, fl, _ in items),
                unparsed=sum(s is None and not f for _, s, _, f in items),
                failed=failed,
                win_rate=mean,
                ci_low=low,
                ci_high=high,
            )
        )
    return out
