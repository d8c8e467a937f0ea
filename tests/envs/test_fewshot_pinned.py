"""GSM8K's and MATH's prompts, stop lists, templates, fingerprints, prompt ids and references, pinned to what
they were before the two envs shared `envs.fewshot.FewShotQAEnv`.

`data/fewshot_pinned.json` was written by the envs' earlier code (each its own copy of the few-shot logic) for
every case below; the fingerprint decides rollout cache keys, so any change here orphans cached rollouts. A
value whose canonical JSON is longer than `digest_over` characters is stored as its sha256 ("sha256:<hex>").
Cases with `padded_examples` replace the shipped few-shot rows with whitespace-padded ones, to pin where each
env strips example text and where it keeps it as it is.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from envs.base import canonical_json
from envs.fewshot import FewShotQAEnv
from envs.gsm8k import GSM8KEnv
from envs.math import MathEnv

PINNED = json.loads((Path(__file__).parent / "data" / "fewshot_pinned.json").read_text(encoding="utf-8"))
ENVS: dict[str, type[FewShotQAEnv]] = {"gsm8k": GSM8KEnv, "math": MathEnv}
CASES = [(name, i) for name in ENVS for i in range(len(PINNED[name]["cases"]))]
ERRORS = [(name, i) for name in ENVS for i in range(len(PINNED[name]["errors"]))]


def pin(value: Any) -> Any:
    text = canonical_json(value)
    return value if len(text) <= PINNED["digest_over"] else "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def observed(env: FewShotQAEnv, rows: list[dict[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {
        "options": env.options,
        "stop": env.stop(),
        "template_keys": list(env.prompt_templates()),
        "templates": pin(env.prompt_templates()),
        "fingerprint": env.fingerprint(),
        "rows": [],
    }
    for row in rows:
        try:
            messages: Any = pin(env.messages(row))
        except ValueError as e:
            messages = {"error": str(e)}
        prompt, prompt_id, reference = pin(env.prompt(row)), env.prompt_id(row), env.reference(row)
        result["rows"].append({"messages": messages, "prompt": prompt, "prompt_id": prompt_id, "reference": reference})
    return result


@pytest.mark.parametrize(("name", "index"), CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_prompts_and_fingerprints_are_unchanged(name: str, index: int) -> None:
    case = PINNED[name]["cases"][index]
    env = ENVS[name](**case["kwargs"])
    if case["padded_examples"]:
        env.fewshot_rows = tuple(PINNED[name]["padded_examples"])
    expected = {key: case[key] for key in ("options", "stop", "template_keys", "templates", "fingerprint", "rows")}
    assert observed(env, PINNED[name]["rows"]) == expected
    assert list(env.options) == list(case["options"])  # the options' order too, as written to provenance


@pytest.mark.parametrize(("name", "index"), ERRORS, ids=[f"{n}-{i}" for n, i in ERRORS])
def test_option_errors_are_unchanged(name: str, index: int) -> None:
    case = PINNED[name]["errors"][index]
    with pytest.raises(ValueError) as raised:
        ENVS[name](**case["kwargs"])
    assert str(raised.value) == case["error"]


def test_the_pins_cover_both_modes_all_shots_and_system_prompts() -> None:
    for name, env_cls in ENVS.items():
        kwargs = [case["kwargs"] for case in PINNED[name]["cases"]]
        assert {kw.get("mode", "chat") for kw in kwargs} == {"chat", "completion"}
        assert {kw.get("fewshot", 0) for kw in kwargs} >= {0, 1, 2, len(env_cls().available_examples())}
        assert {kw.get("system_prompt") for kw in kwargs} >= {None, "", "  Think.\n", "  Be exact.\n"}
