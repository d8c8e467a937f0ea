"""Reasoning completions scored before and after the split: how many truncated or tricked completions the old
scoring (the whole completion, think block included) called correct, and what the split costs.

    uv run python -m bench.reasoning_split [--n 400]

The corpus is the fidelity suite's planted one (tests/fidelity/reasoning_corpus.py: answers right or wrong inside
and after the thinking, unterminated thinking, empty thinking, a second block, tags inside code, ...). "before"
scores `env.score(row, completion)`, as evalflow did before the split; "after" scores as the collection does now
(core.reasoning + merged_score). Cost: seconds per 1,000 rollouts of the split alone and of the whole scoring path,
measured side by side in this run.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter, defaultdict
from typing import Any

from core.reasoning import ThinkTags, lm_eval_text, merged_score, needs_lm_eval_score, split_text
from envs.gsm8k import GSM8KEnv
from envs.math import MathEnv
from tests.fidelity import reasoning_corpus

TAGS = ThinkTags()
# where a right answer should NOT count: cut off while thinking, or right only inside the thinking, before it or
# in a second think block
NOT_THE_ANSWER = ("thinking", "before", "second block", "unterminated")


def after(env: Any, row: dict[str, Any], text: str) -> float:
    split = split_text(text, TAGS)
    answer = env.score(row, split.answer)
    lm = env.score(row, lm_eval_text(split, TAGS)) if needs_lm_eval_score(env, split, TAGS) else None
    return merged_score(env, answer, lm, split).reward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=400, help="completions per task (gsm8k, math)")
    args = parser.parse_args()
    envs = {"gsm8k": GSM8KEnv(), "math": MathEnv()}
    items = [i for i in reasoning_corpus.build(args.n) if i["task"] in envs]
    counts: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    seconds = Counter[str]()
    for item in items:
        env, row, text = envs[item["task"]], item.get("row", item["doc"]), item["response"]
        started = time.perf_counter()
        old = env.score(row, text).reward
        seconds["before: score the completion"] += time.perf_counter() - started
        started = time.perf_counter()
        split_text(text, TAGS)
        seconds["split alone"] += time.perf_counter() - started
        started = time.perf_counter()
        new = after(env, row, text)
        seconds["after: split + score the answer (+ lm-eval's text)"] += time.perf_counter() - started
        wrongly = item["planted"] in NOT_THE_ANSWER
        c = counts[(item["task"], item["shape"])]
        c["n"] += 1
        c["before"] += old == 1.0
        c["after"] += new == 1.0
        c["should not count"] += wrongly
        c["wrongly counted before"] += wrongly and old == 1.0
        c["wrongly counted after"] += wrongly and new == 1.0
        c["changed"] += old != new
    header = ["task", "shape", "n", "correct before", "correct after", "changed", "truncated/tricked counted before",
              "... after"]  # fmt: skip
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    totals = Counter[str]()
    for (task, shape), c in sorted(counts.items()):
        totals.update(c)
        print(f"{task} | {shape} | {c['n']} | {c['before']} | {c['after']} | {c['changed']} | "
              f"{c['wrongly counted before']} | {c['wrongly counted after']}")  # fmt: skip
    wrong_before, should, wrong_after = (
        totals[k] for k in ("wrongly counted before", "should not count", "wrongly counted after")
    )
    print(f"all | all | {totals['n']} | {totals['before']} | {totals['after']} | {totals['changed']} | "
          f"{wrong_before} of {should} | {wrong_after}")  # fmt: skip
    print()
    n = len(items)
    base = seconds["before: score the completion"]
    print("cost | s per 1,000 rollouts | ratio to scoring before")
    print("--- | --- | ---")
    for label, s in seconds.items():
        print(f"{label} | {s / n * 1000:.4f} | {s / base:.3f}")


if __name__ == "__main__":
    main()
