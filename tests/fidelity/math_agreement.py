"""Agreement of evalflow's MATH scores with lm-eval 0.4.13's on the generated corpus, as tables.

`uv run python tests/fidelity/math_agreement.py [--n 2000] [--tree PATH]`: per answer format and per
reference kind, how often evalflow's `exact_match` and `math_verify` equal lm-eval's, whether the reward
accepts every completion lm-eval's math_verify accepts, and each side's scoring time per 1,000 pairs.
`--tree` scores with another checkout of evalflow (e.g. `git worktree add /tmp/before <rev>`).
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from tests.fidelity import math_corpus
from tests.fidelity.evalflow_side import REPO, timed_evalflow
from tests.fidelity.lm_eval_env import timed_lm_eval

METRICS = ("exact_match", "math_verify")


def compare(items: list[dict], lm: list[dict], ev: list[dict]) -> dict[str, dict[str, list[int]]]:
    """Per grouping key ("all", "format: ...", "kind: ..."): [cases, exact_match agreements, math_verify
    agreements, lm-eval math_verify accepted, of those the reward accepted, lm-eval exact_match accepted]."""
    table: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0, 0])
    for item, want, got in zip(items, lm, ev, strict=True):
        for key in ("all", f"format: {item['format']}", f"kind: {item['answer_kind']}"):
            row = table[key]
            row[0] += 1
            row[1] += bool(want["exact_match"]) == bool(got["exact_match"])
            row[2] += bool(want["math_verify"]) == bool(got["math_verify"])
            row[3] += bool(want["math_verify"])
            row[4] += bool(want["math_verify"]) and got["reward"] == 1.0
            row[5] += bool(want["exact_match"])
    return {"groups": dict(table)}


def disagreements(items: list[dict], lm: list[dict], ev: list[dict]) -> list[dict]:
    return [
        {"response": item["response"], "doc": item["doc"], "lm_eval": want, "evalflow": got}
        for item, want, got in zip(items, lm, ev, strict=True)
        if any(bool(want[m]) != bool(got[m]) for m in METRICS) or (want["math_verify"] and got["reward"] != 1.0)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2_000)
    parser.add_argument("--tree", type=Path, default=REPO)
    args = parser.parse_args()
    items = math_corpus.build(args.n)
    lm, lm_s = timed_lm_eval(items)
    ev, ev_s = timed_evalflow(items, args.tree.resolve())
    groups = compare(items, lm, ev)["groups"]
    print(f"{len(items):,} MATH pairs, evalflow from {args.tree.resolve()}\n")
    print(
        "| group | n | exact_match agree | math_verify agree | lm-eval exact_match = 1 | lm-eval math_verify = 1 "
        "| reward = 1 of those |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    order = [
        "all",
        *sorted(k for k in groups if k.startswith("format")),
        *sorted(k for k in groups if k.startswith("kind")),
    ]
    for key in order:
        n, em, mv, acc, rew, exact = groups[key]
        print(f"| {key} | {n} | {100 * em / n:.1f}% | {100 * mv / n:.1f}% | {exact} | {acc} | {rew} |")
    per_1000 = 1000 / len(items)
    print(f"\nscoring time per 1,000 pairs: evalflow {ev_s * per_1000:.2f} s, lm-eval {lm_s * per_1000:.2f} s")
    for case in disagreements(items, lm, ev)[:15]:
        print("\nDISAGREE", case)


if __name__ == "__main__":
    main()
