"""Generate the shipped offline GSM8K-style test set, data/gsm8k/test.jsonl (200 rows, integer answers).

Generator: reasoning-gym's `gsm_symbolic` dataset (procedural templates modelled on GSM8K problems),
reasoning-gym 0.1.25, seed 20250101, license Apache-2.0 (from the installed package metadata).
Rows are kept only if the answer is an integer and the generator's own worked solution ends in
`#### <answer>` (`<answer>.0` accepted); duplicate questions are dropped. The generator's trailing
instruction ("Give the result as your final answer. Do not include units.") is removed, since the env
adds its own.

    uv run --group data python scripts/make_gsm8k.py   # twice gives byte-identical output
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Any

GENERATOR = "gsm_symbolic"
PACKAGE = "reasoning_gym"
EXPECTED_VERSION = "0.1.25"
EXPECTED_LICENSE = "Apache-2.0"
SEED = 20250101
N_ROWS = 200
POOL = 400  # candidates drawn before filtering; the first N_ROWS that pass are kept
SUFFIX = " Give the result as your final answer. Do not include units."
OUT = Path(__file__).resolve().parents[1] / "data" / "gsm8k" / "test.jsonl"


def check_package() -> str:
    """The installed reasoning-gym version; stops on a license other than the one recorded above."""
    meta = importlib.metadata.metadata(PACKAGE)
    license_ = meta.get("License-Expression") or meta.get("License") or ""
    if license_ != EXPECTED_LICENSE:
        sys.exit(f"{PACKAGE} license is {license_!r}, expected {EXPECTED_LICENSE!r}: review before shipping")
    version = meta["Version"]
    if version != EXPECTED_VERSION:
        print(f"warning: {PACKAGE} {version} != {EXPECTED_VERSION}; output may differ", file=sys.stderr)
    return version


def convert(entry: dict[str, Any]) -> tuple[str, str] | None:
    """(question, answer) for a usable entry, None for one without a consistent integer answer."""
    question = entry["question"].removesuffix(SUFFIX).strip()
    meta = entry["metadata"]
    value = meta.get("answer_value")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    if not re.fullmatch(r"-?\d+", entry["answer"].strip()) or int(entry["answer"]) != value:
        return None
    final = re.search(r"####\s*(-?[\d,]+(?:\.\d+)?)\s*$", meta.get("answer_cot", ""))
    if final is None or float(final.group(1).replace(",", "")) != value:
        return None
    return question, str(value)


def generate() -> list[dict[str, str]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a dependency of reasoning-gym emits SyntaxWarnings on import
        import reasoning_gym

    dataset = reasoning_gym.create_dataset(GENERATOR, seed=SEED, size=POOL)
    rows: list[dict[str, str]] = []
    seen: set[str] = set()
    for entry in dataset:
        converted = convert(entry)
        if converted is None or converted[0] in seen:
            continue
        question, answer = converted
        seen.add(question)
        rows.append({"id": f"gsm-{len(rows):04d}", "question": question, "answer": answer})
        if len(rows) == N_ROWS:
            return rows
    sys.exit(f"only {len(rows)} usable rows in a pool of {POOL}; raise POOL")


def main() -> None:
    version = check_package()
    rows = generate()
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    tmp = OUT.with_suffix(".jsonl.tmp")
    tmp.write_text(text, encoding="utf-8", newline="\n")
    os.replace(tmp, OUT)
    print(f"wrote {len(rows)} rows to {OUT} ({PACKAGE} {version}, {GENERATOR}, seed {SEED})")


if __name__ == "__main__":
    main()
