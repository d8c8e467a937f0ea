"""Score items with lm-evaluation-harness 0.4.13's own code; runs inside the throwaway env (lm_eval_env.py).

stdin: one JSON object per line, `{"task": "math"|"ifeval", "doc": {...}, "response": "..."}`; stdout: one
line per item, lm-eval's `process_results` for it (MATH: `exact_match`, `math_verify`, and the `answer`
its `process_docs` derived; IFEval: the four accuracies). MATH docs carry `problem` and `solution`, as
lm-eval's dataset does. Runs on the main thread, as lm-eval does (its sympy and math-verify timeouts are
SIGALRM). `--seed-langdetect` fixes langdetect's seed (lm-eval leaves it unseeded).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import types
from pathlib import Path


def _tasks_package() -> None:
    """Import lm_eval.tasks.<task> modules without lm_eval/tasks/__init__.py (its TaskManager needs datasets)."""
    spec = importlib.util.find_spec("lm_eval")
    assert spec is not None and spec.submodule_search_locations
    tasks = types.ModuleType("lm_eval.tasks")
    tasks.__path__ = [str(Path(next(iter(spec.submodule_search_locations))) / "tasks")]
    sys.modules["lm_eval.tasks"] = tasks


class _Docs:
    """The one method of datasets.Dataset that minerva_math's process_docs calls."""

    def __init__(self, docs: list[dict]) -> None:
        self.docs = docs

    def map(self, fn):
        return [fn(doc) for doc in self.docs]


def main() -> None:
    _tasks_package()
    if "--seed-langdetect" in sys.argv:
        from langdetect import DetectorFactory

        DetectorFactory.seed = 0
    from lm_eval.tasks.ifeval import utils as ifeval
    from lm_eval.tasks.minerva_math import utils as minerva

    busy = 0.0
    for line in sys.stdin:
        item = json.loads(line)
        start = time.perf_counter()
        if item["task"] == "math":
            doc = minerva.process_docs(_Docs([item["doc"]]))[0]
            out = {**minerva.process_results(doc, [item["response"]]), "answer": doc["answer"]}
        else:
            out = dict(ifeval.process_results(item["doc"], [item["response"]]))
        busy += time.perf_counter() - start
        sys.stdout.write(json.dumps(out) + "\n")
    sys.stderr.write(f"scoring seconds: {busy:.3f}\n")


if __name__ == "__main__":
    main()
