"""Word counting: a single-turn env shipped by a plugin package, its data inside the package.

Uses only `evalflow` (the public API for environments) and the standard library, so it installs with no
dependencies into any evalflow environment.
"""

from __future__ import annotations

import re
from importlib.resources import files
from pathlib import Path
from typing import Any, ClassVar

from evalflow import DatasetError, MetricSpec, Score, SingleTurnEnv

INSTRUCTION = "Count the words of the sentence below (words are separated by spaces). End with the number."
_INTEGER = re.compile(r"-?\d+")


def word_count(sentence: str) -> int:
    """Words as whitespace-separated tokens: the one definition the prompt states and the reference uses."""
    return len(sentence.split())


class WordCountEnv(SingleTurnEnv):
    """Rows `{"id": str, "sentence": str}`; the reference is computed, so a row cannot carry a wrong answer.

    Reward 1 when the last integer of the completion equals the sentence's word count.
    """

    # The same name as the entry point, so records and reports name the benchmark as the config does.
    name: ClassVar[str] = "echo_words"
    version: ClassVar[str] = "1"
    # Where the data lives inside the package (for messages); the path comes from default_dataset_path.
    default_dataset: ClassVar[str] = "evalflow_plugin_demo/data.jsonl"
    metrics: ClassVar[tuple[MetricSpec, ...]] = (
        MetricSpec("parse_error", "no number", "rate", description="the completion has no integer"),
    )

    def __init__(self) -> None:
        """No options: a config that passes one fails when it loads instead of being silently ignored."""
        super().__init__()

    @classmethod
    def default_dataset_path(cls) -> Path:
        """The data file inside the installed package: evalflow's repo root means nothing to a plugin."""
        return Path(str(files("evalflow_plugin_demo").joinpath("data.jsonl")))

    def validate_row(self, row: dict[str, Any], where: str) -> None:
        for key in ("id", "sentence"):
            if not isinstance(row.get(key), str) or not row[key].strip():
                raise DatasetError(f"{where}: {key!r} must be a non-empty string, got {row.get(key)!r}")

    def prompt_id(self, row: dict[str, Any]) -> str:
        return row["id"]

    def reference(self, row: dict[str, Any]) -> str:
        return str(word_count(row["sentence"]))

    def prompt_templates(self) -> dict[str, Any]:
        return {"instruction": INSTRUCTION}

    def messages(self, row: dict[str, Any]) -> list[dict[str, str]]:
        return [{"role": "user", "content": f"{INSTRUCTION}\n\nSentence: {row['sentence']}"}]

    def stop(self) -> list[str] | None:
        return None

    def score(self, row: dict[str, Any], completion: str) -> Score:
        found = _INTEGER.findall(completion)
        parsed = str(int(found[-1])) if found else None
        success = parsed == self.reference(row)
        return Score(float(success), success, parsed, {"parse_error": parsed is None})
