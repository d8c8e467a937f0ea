"""Write the offline programming sets (data/code/*.jsonl) from the problems in scripts/code_sets/.

The problems live there as Python literals because code is unreadable as JSON strings; rerunning the
script rewrites the JSONL files byte-identically. tests/envs/test_code.py runs every reference solution
through the sandbox. Usage: `uv run python scripts/make_code_sets.py`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# The script's folder is on sys.path when it runs as a script (the usage above).
from code_sets.humaneval import HUMANEVAL
from code_sets.mbpp import MBPP

OUT = Path(__file__).resolve().parents[1] / "data" / "code"


def mbpp_rows() -> list[dict[str, Any]]:
    return [
        {"task_id": f"mbpp-offline-{i:03d}", "text": text, "code": code, "test_list": tests, "test_setup_code": ""}
        for i, (text, code, tests) in enumerate(MBPP, start=1)
    ]


def humaneval_rows() -> list[dict[str, Any]]:
    return [
        {
            "task_id": f"HumanEvalOffline/{i}",
            "prompt": prompt,
            "canonical_solution": solution,
            "test": test,
            "entry_point": entry_point,
        }
        for i, (entry_point, prompt, solution, test) in enumerate(HUMANEVAL)
    ]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    write_jsonl(OUT / "mbpp_offline.jsonl", mbpp_rows())
    write_jsonl(OUT / "humaneval_offline.jsonl", humaneval_rows())
    print(f"wrote {len(MBPP)} MBPP and {len(HUMANEVAL)} HumanEval problems to {OUT}")


if __name__ == "__main__":
    main()
