"""Agreement of evalflow's IFEval verdicts with lm-eval 0.4.13's on the edge corpus, as tables.

`uv run python tests/fidelity/ifeval_agreement.py [--n 10000] [--seed 0] [--tree PATH] [--show 40]`: prompt and
instruction level, strict and loose, overall and per instruction id (cases and agreement), each side's scoring
time per 1,000 responses, and the disagreements, each with its cause. lm-eval runs twice: as it runs in a
real evaluation (langdetect unseeded, so its verdict on a text langdetect finds ambiguous is random) and with
langdetect seeded 0, as evalflow seeds it. `--tree` scores with another checkout of evalflow (e.g. the code
before a change: `git worktree add /tmp/before HEAD`).
"""

from __future__ import annotations

import argparse
import json
import string
import time
from collections import defaultdict
from pathlib import Path

from tests.fidelity import ifeval_corpus
from tests.fidelity.evalflow_side import REPO, timed_evalflow
from tests.fidelity.lm_eval_env import timed_lm_eval

LEVELS = ("prompt_level_strict_acc", "prompt_level_loose_acc", "inst_level_strict_acc", "inst_level_loose_acc")


def evalflow_verdicts(items: list[dict]) -> tuple[list[dict], float]:
    """evalflow's four accuracies per item, scored in this process, and the seconds `score` took."""
    from envs.ifeval import IFEvalEnv

    env, out, busy = IFEvalEnv(), [], 0.0
    for item in items:
        start = time.perf_counter()
        info = env.score(item["doc"], item["response"]).info
        busy += time.perf_counter() - start
        out.append({level: info[level] for level in LEVELS})
    return out, busy


def random_in_lm_eval(doc: dict) -> bool:
    """Whether lm-eval draws a random value for this doc: a `letter` that is no ASCII letter."""
    return any(
        iid == "keywords:letter_frequency" and (kw or {}).get("letter") not in tuple(string.ascii_letters)
        for iid, kw in zip(doc["instruction_id_list"], doc["kwargs"], strict=True)
    )


def agreement(items: list[dict], lm_eval: list[dict], evalflow: list[dict] | None = None) -> dict:
    """Per group ("all" and each instruction id): prompts, instructions and agreeing verdicts per level, and
    the disagreeing items. Prompt-level rows of an id count the prompts that contain it."""
    if evalflow is None:
        evalflow = evalflow_verdicts(items)[0]
    groups: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    disagreements = []
    for item, want, got in zip(items, lm_eval, evalflow, strict=True):
        ids = item["doc"]["instruction_id_list"]
        for group in {"all", *ids}:
            row = groups[group]
            row["prompts"] += 1
            for level in LEVELS[:2]:
                row[level] += bool(want[level]) == bool(got[level])
        for i, iid in enumerate(ids):
            for group in ("all", iid):
                row = groups[group]
                row["instructions"] += 1
                for level in LEVELS[2:]:
                    row[level] += bool(want[level][i]) == bool(got[level][i])
        if any(_norm(want[level]) != _norm(got[level]) for level in LEVELS):
            disagreements.append({**item, "lm_eval": want, "evalflow": got})
    return {"groups": {k: dict(v) for k, v in groups.items()}, "disagreements": disagreements}


def _norm(value: bool | list[bool]) -> bool | list[bool]:
    return [bool(v) for v in value] if isinstance(value, list) else bool(value)


def cause(disagreement: dict, seeded: dict) -> str:
    """Why lm-eval and evalflow differ: lm-eval's own randomness, or unexplained."""
    if random_in_lm_eval(disagreement["doc"]):
        return "lm-eval counts a random letter (pinned in evalflow)"
    if all(_norm(seeded[level]) == _norm(disagreement["evalflow"][level]) for level in LEVELS):
        return "langdetect unseeded in lm-eval (seeded 0, lm-eval agrees)"
    return "UNEXPLAINED"


def explain(
    items: list[dict], lm_eval: list[dict], seeded: list[dict], evalflow: list[dict] | None = None
) -> list[dict]:
    """The disagreements with lm-eval as it runs (`lm_eval`), each with its `cause` (see `cause`), given
    lm-eval's verdicts with langdetect seeded 0 (`seeded`) for the same items."""
    by_key = {item["doc"]["key"]: s for item, s in zip(items, seeded, strict=True)}
    found = agreement(items, lm_eval, evalflow)["disagreements"]
    return [{**d, "cause": cause(d, by_key[d["doc"]["key"]])} for d in found]


def table(groups: dict[str, dict[str, int]]) -> str:
    head = "| group | prompts | prompt strict | prompt loose | instructions | inst strict | inst loose |"
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|"]
    for name in ["all", *sorted(k for k in groups if k != "all")]:
        row = groups[name]
        p, n = row.get("prompts", 0), row.get("instructions", 0)
        cells = [f"{row.get(level, 0) / max(1, p if level.startswith('prompt') else n):.2%}" for level in LEVELS]
        lines.append(f"| {name} | {p} | {cells[0]} | {cells[1]} | {n} | {cells[2]} | {cells[3]} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tree", type=Path, default=None, help="score with this checkout of evalflow")
    parser.add_argument("--show", type=int, default=40, help="disagreements to print")
    parser.add_argument("--save", type=Path, default=None, help="write items and all verdicts here (JSONL)")
    args = parser.parse_args()
    items = ifeval_corpus.build(args.n, args.seed)
    lm, lm_s = timed_lm_eval(items)
    seeded, seeded_s = timed_lm_eval(items, seed_langdetect=True)
    if args.tree is None:
        ev, ev_s = evalflow_verdicts(items)
    else:
        ev, ev_s = timed_evalflow(items, args.tree.resolve())
    tree = (args.tree or REPO).resolve()
    runs = (("lm-eval as it runs (langdetect unseeded)", lm), ("lm-eval, langdetect seeded 0", seeded))
    for title, reference in runs:
        result = agreement(items, reference, ev)
        print(f"\n## evalflow ({tree}) vs {title}: {len(items):,} responses\n\n{table(result['groups'])}")
    print(f"\nscoring time per 1,000 responses: evalflow {1000 * ev_s / len(items):.2f} s, lm-eval "
          f"{1000 * lm_s / len(items):.2f} s (seeded run {1000 * seeded_s / len(items):.2f} s)")  # fmt: skip
    found = explain(items, lm, seeded, ev)
    causes: dict[str, int] = defaultdict(int)
    for d in found:
        causes[d["cause"]] += 1
    print(f"\n{len(found)} disagreements with lm-eval as it runs: {dict(causes) or 'none'}")
    for d in found[: args.show]:
        print(f"\n- [{d['cause']}] {d['edge']} | {d['doc']['instruction_id_list']} {d['doc']['kwargs']}")
        print(f"  response: {d['response'][:300]!r}\n  lm-eval: {d['lm_eval']}\n  evalflow: {d['evalflow']}")
    if args.save:
        with args.save.open("w") as f:
            for item, a, b, c in zip(items, lm, seeded, ev, strict=True):
                f.write(json.dumps({**item, "lm_eval": a, "lm_eval_seeded": b, "evalflow": c}) + "\n")


if __name__ == "__main__":
    main()
