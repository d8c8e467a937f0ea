"""A throwaway virtual environment with lm-evaluation-harness 0.4.13, to score corpora with lm-eval's own code.

Only the scoring code is needed (`lm_eval/tasks/ifeval/`, `lm_eval/tasks/minerva_math/utils.py`, gsm8k's
filters and exact_match, `lm_eval.models.utils.postprocess_generated_text`), so lm-eval is installed without
its dependencies (datasets, evaluate, torch extras), beside exactly the versions of the libraries that code
imports that evalflow's own environment has (nltk, sympy, math-verify, the ANTLR runtime, langdetect, regex,
numpy, PyYAML, Jinja2, requests): a disagreement then comes from the two codes, never from two library versions.
Built once per set of versions under `~/.cache/evalflow/lm-eval/` (file-locked, so xdist workers share it).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path

from bench.peers.envs import throwaway_venv

LM_EVAL_VERSION = "0.4.13"
# What lm-eval's ifeval and minerva_math utilities, its filters, metrics and lm_eval.utils (imported by
# lm_eval.models.utils and the filter registry) import, pinned to evalflow's versions.
SHARED = (
    "nltk",
    "regex",
    "langdetect",
    "sympy",
    "mpmath",
    "math-verify",
    "latex2sympy2-extended",
    "antlr4-python3-runtime",
    "packaging",
    "click",
    "joblib",
    "tqdm",
    "six",
    "numpy",
    "pyyaml",
    "jinja2",
    "markupsafe",
    "typing-extensions",
    "requests",
    "certifi",
    "charset-normalizer",
    "idna",
    "urllib3",
)
EXTRA = ("immutabledict==4.2.1",)  # lm-eval's ifeval extra; evalflow does not use it
SCORER = Path(__file__).with_name("lm_eval_score.py")
REPO = Path(__file__).resolve().parents[2]
NLTK_DATA = REPO / "data" / "nltk"


def pins() -> list[str]:
    return [f"lm-eval=={LM_EVAL_VERSION}", *(f"{name}=={version(name)}" for name in SHARED), *EXTRA]


def lm_eval_python() -> Path:
    """The Python of the throwaway environment, built on first use (a minute with a warm uv cache)."""
    return throwaway_venv("lm-eval", LM_EVAL_VERSION, pins(), no_deps=True)


def score_with_lm_eval(items: list[dict], *, seed_langdetect: bool = False) -> list[dict]:
    """lm-eval 0.4.13's verdicts for `{"task": "math"|"ifeval"|"gsm8k", "doc": {...}, "response": str}` items
    (with `"think_end_token"`: the response as lm-eval's `think_end_token` option reads it)."""
    return timed_lm_eval(items, seed_langdetect=seed_langdetect)[0]


def _payload(items: list[dict]) -> str:
    """What the scorer reads (an item without `think_end_token` as before, so its cached verdicts stay)."""
    keys = ("task", "doc", "response", "think_end_token")
    return "".join(json.dumps({k: item[k] for k in keys if k in item}) + "\n" for item in items)


def _score(items: list[dict], seed_langdetect: bool) -> tuple[list[dict], float]:
    payload = _payload(items)
    env = {**os.environ, "NLTK_DATA": str(NLTK_DATA)}
    env.pop("VIRTUAL_ENV", None)
    argv = [str(lm_eval_python()), str(SCORER), *(["--seed-langdetect"] if seed_langdetect else [])]
    done = subprocess.run(argv, input=payload, capture_output=True, text=True, env=env, check=False)
    if done.returncode:
        raise RuntimeError(f"lm-eval scorer failed ({done.returncode}): {done.stderr[-2000:]}")
    seconds = float(done.stderr.rsplit("scoring seconds:", 1)[1].split()[0])
    verdicts = [json.loads(line) for line in done.stdout.splitlines()]
    if len(verdicts) != len(items):
        raise RuntimeError(f"lm-eval scorer returned {len(verdicts)} verdicts for {len(items)} items")
    return verdicts, seconds


def timed_lm_eval(items: list[dict], *, seed_langdetect: bool = False) -> tuple[list[dict], float]:
    """The verdicts and the seconds lm-eval's scoring functions took (imports and start-up excluded).

    Kept under the cache root by what determines them (the items, the pinned versions, the scorer's source,
    the seed flag): lm-eval's verdicts on a fixed corpus cannot change, so a rerun scores evalflow's side only.
    """
    payload = _payload(items)
    key = hashlib.sha256(json.dumps([payload, pins(), SCORER.read_text(), seed_langdetect]).encode()).hexdigest()[:16]
    cached = lm_eval_python().parent.parent / f"verdicts-{key}.json"
    if cached.exists():
        saved = json.loads(cached.read_text())
        return saved["verdicts"], saved["seconds"]
    n = max(1, min(4, os.cpu_count() or 1))  # scorers side by side: a clean machine pays this once
    with ThreadPoolExecutor(n) as pool:
        parts = list(pool.map(lambda chunk: _score(chunk, seed_langdetect), [items[i::n] for i in range(n)]))
    verdicts: list[dict] = [{}] * len(items)
    for i, (got, _) in enumerate(parts):
        verdicts[i::n] = got
    seconds = sum(took for _, took in parts)
    partial = cached.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps({"verdicts": verdicts, "seconds": seconds}))
    partial.replace(cached)
    return verdicts, seconds
