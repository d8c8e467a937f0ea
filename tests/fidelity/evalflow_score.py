"""Score items with evalflow's envs from a given source tree (the working tree, or an older commit's checkout).

Run as `python tests/fidelity/evalflow_score.py` with the tree first on PYTHONPATH; stdin: items as
math_corpus/ifeval_corpus build them; stdout: per item, each lm-eval metric the env publishes (the value
its `lm_eval_metrics` declaration maps it from: `pass@1` is the reward) plus `reward`; stderr ends with the
seconds the env's `score` took. Comparing two trees shows a change's effect on the published numbers.
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    from envs.ifeval import IFEvalEnv
    from envs.math import MathEnv

    envs = {"math": MathEnv(), "ifeval": IFEvalEnv()}
    busy = 0.0
    for line in sys.stdin:
        item = json.loads(line)
        env = envs[item["task"]]
        row = item.get("row", item["doc"])
        start = time.perf_counter()
        score = env.score(row, item["response"])
        busy += time.perf_counter() - start
        out = {"reward": score.reward}
        for name, source in env.lm_eval_metrics:
            out[name.split(",")[0]] = score.reward if source == "pass@1" else score.info[source]
        sys.stdout.write(json.dumps(out) + "\n")
    sys.stderr.write(f"scoring seconds: {busy:.3f}\n")


if __name__ == "__main__":
    main()
