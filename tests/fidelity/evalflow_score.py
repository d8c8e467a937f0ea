"""Score items with evalflow's envs from a given source tree (the working tree, or an older commit's checkout).

Run as `python tests/fidelity/evalflow_score.py` with the tree first on PYTHONPATH; stdin: items as
math_corpus/ifeval_corpus/reasoning_corpus build them; stdout: per item, each lm-eval metric the env publishes
(the value its `lm_eval_metrics` declaration maps it from: `pass@1` is the reward), named as lm-eval's
`process_results` names it (the `,none` filter dropped: `exact_match`; gsm8k's `exact_match,strict-match`
kept whole), plus `reward`; stderr ends with the seconds the env's scoring took. Comparing two trees shows a
change's effect on the published numbers.

An item with `"think_end_token"` is a reasoning model's raw completion, scored as the collection scores it
(`score_reasoning`: the answer after the think tags, the lm-eval-named keys from lm-eval's reading of the
text); its line also carries `ended_in_reasoning`.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any


def metric_key(name: str) -> str:
    """The key lm-eval's `process_results` gives a metric published as `name` ("metric,filter")."""
    return name.removesuffix(",none")


def verdict(env: Any, row: dict, text: str) -> Any:
    """The env's Score as the collection asks for it (`await env.ascore`); an older tree's sync-only env: `score`."""
    ascore = getattr(type(env), "ascore", None)
    return asyncio.run(env.ascore(row, text)) if ascore is not None else env.score(row, text)


def score_reasoning(env: Any, row: dict, text: str, end: str) -> tuple[Any, bool]:
    """How the collection scores one raw completion of a reasoning model: (the merged Score, ended_in_reasoning)."""
    from core.reasoning import ThinkTags, lm_eval_text, merged_score, needs_lm_eval_score, split_text

    tags = ThinkTags(end=end)
    split = split_text(text, tags)
    answer = verdict(env, row, split.answer)
    lm = verdict(env, row, lm_eval_text(split, tags)) if needs_lm_eval_score(env, split, tags) else None
    return merged_score(env, answer, lm, split), split.ended_in_reasoning


def main() -> None:
    from envs.gsm8k import GSM8KEnv
    from envs.ifeval import IFEvalEnv
    from envs.math import MathEnv

    envs = {"math": MathEnv(), "ifeval": IFEvalEnv(), "gsm8k": GSM8KEnv()}
    busy = 0.0
    for line in sys.stdin:
        item = json.loads(line)
        env = envs[item["task"]]
        row = item.get("row", item["doc"])
        start = time.perf_counter()
        if "think_end_token" in item:
            score, ended = score_reasoning(env, row, item["response"], item["think_end_token"])
        else:
            score, ended = verdict(env, row, item["response"]), None
        busy += time.perf_counter() - start
        out: dict[str, Any] = {"reward": score.reward}
        if ended is not None:
            out["ended_in_reasoning"] = ended
        for name, source in env.lm_eval_metrics:
            out[metric_key(name)] = score.reward if source == "pass@1" else score.info[source]
        sys.stdout.write(json.dumps(out) + "\n")
    sys.stderr.write(f"scoring seconds: {busy:.3f}\n")


if __name__ == "__main__":
    main()
