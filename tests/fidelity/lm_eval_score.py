"""Score items with lm-evaluation-harness 0.4.13's own code; runs inside the throwaway env (lm_eval_env.py).

stdin: one JSON object per line, `{"task": "math"|"ifeval"|"gsm8k", "doc": {...}, "response": "..."}`; stdout:
one line per item, lm-eval's `process_results` for it (MATH: `exact_match`, `math_verify`, and the `answer`
its `process_docs` derived; IFEval: the four accuracies; GSM8K: `exact_match,strict-match` and
`exact_match,flexible-extract`, its gsm8k.yaml's filter pipelines and exact_match metric, built from that
yaml by lm-eval's own filter registry and metric). MATH docs carry `problem` and `solution`, GSM8K docs
`question` and `answer`, as lm-eval's datasets do. An item with `"think_end_token"` is first read as lm-eval
reads a generation with that option (`lm_eval.models.utils.postprocess_generated_text`, no stop sequences:
the chat-completions path). Runs on the main thread, as lm-eval does (its sympy and math-verify timeouts are
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


def _without_sacrebleu() -> None:
    """lm_eval.api.metrics imports sacrebleu at its top for its BLEU/TER/chrF metrics, which nothing here calls
    (exact_match is numpy and re): an empty module stands in where it is not installed."""
    if importlib.util.find_spec("sacrebleu") is None:
        sys.modules["sacrebleu"] = types.ModuleType("sacrebleu")


class _GSM8K:
    """lm-eval's gsm8k task as its gsm8k.yaml defines the scoring: each filter_list pipeline (regex, take_first)
    over the generation, then the metric_list's exact_match with the yaml's kwargs against doc_to_target."""

    def __init__(self) -> None:
        import yaml
        from lm_eval import utils
        from lm_eval.api.instance import Instance
        from lm_eval.api.registry import get_metric
        from lm_eval.filters import build_filter_ensemble

        spec = importlib.util.find_spec("lm_eval")
        assert spec is not None and spec.submodule_search_locations
        root = Path(next(iter(spec.submodule_search_locations)))
        config = yaml.safe_load((root / "tasks" / "gsm8k" / "gsm8k.yaml").read_text())
        self.filters = [
            build_filter_ensemble(
                f["name"],
                [(step["function"], {k: v for k, v in step.items() if k != "function"}) for step in f["filter"]],
            )
            for f in config["filter_list"]
        ]
        skip = ("metric", "aggregation", "higher_is_better", "hf_evaluate")
        self.metrics = [
            (m["metric"], get_metric(m["metric"]), {k: v for k, v in m.items() if k not in skip})
            for m in config["metric_list"]
        ]
        self.target = config["doc_to_target"]
        self.apply_template = utils.apply_template
        self.instance = Instance

    def process(self, doc: dict, response: str) -> dict:
        inst = self.instance("generate_until", doc, ("", {}), 0, resps=[response])
        for ensemble in self.filters:
            ensemble.apply([inst])
        gold = self.apply_template(self.target, doc)
        out = {}
        for name, fn, kwargs in self.metrics:
            for ensemble in self.filters:
                result = fn(references=[gold], predictions=[inst.filtered_resps[ensemble.name]], **kwargs)
                out[f"{name},{ensemble.name}"] = float(result[name])
        return out


def main() -> None:
    _tasks_package()
    _without_sacrebleu()
    if "--seed-langdetect" in sys.argv:
        from langdetect import DetectorFactory

        DetectorFactory.seed = 0
    from lm_eval.tasks.ifeval import utils as ifeval
    from lm_eval.tasks.minerva_math import utils as minerva

    gsm8k: _GSM8K | None = None
    postprocess = None
    busy = 0.0
    for line in sys.stdin:
        item = json.loads(line)
        if item["task"] == "gsm8k" and gsm8k is None:
            gsm8k = _GSM8K()
        if "think_end_token" in item and postprocess is None:
            from lm_eval.models.utils import postprocess_generated_text as postprocess
        start = time.perf_counter()
        if "think_end_token" in item:
            item["response"] = postprocess(item["response"], None, item["think_end_token"])
        if item["task"] == "gsm8k":
            out = gsm8k.process(item["doc"], item["response"])
        elif item["task"] == "math":
            doc = minerva.process_docs(_Docs([item["doc"]]))[0]
            out = {**minerva.process_results(doc, [item["response"]]), "answer": doc["answer"]}
        else:
            out = dict(ifeval.process_results(item["doc"], [item["response"]]))
        busy += time.perf_counter() - start
        sys.stdout.write(json.dumps(out) + "\n")
    sys.stderr.write(f"scoring seconds: {busy:.3f}\n")


if __name__ == "__main__":
    main()
