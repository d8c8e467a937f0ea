"""Registry lookups, the metrics environments declare, and the shipped offline data set."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from typing import Any

import pytest

from envs.base import REPO_ROOT, MultiTurnEnv, SingleTurnEnv
from envs.datasets import load_rows
from envs.gsm8k import GSM8KEnv
from envs.registry import ENVS, get_env, metric_specs


def test_get_env_by_name_with_options() -> None:
    env = get_env("gsm8k", fewshot=4)
    assert isinstance(env, GSM8KEnv) and len(env.fewshot_rows) == 4
    assert ENVS["gsm8k"] is GSM8KEnv


def test_unknown_env_lists_known_names() -> None:
    with pytest.raises(ValueError, match=r"unknown environment 'gsm9k' on host .*; known: gsm8k"):
        get_env("gsm9k")


def test_unknown_option() -> None:
    with pytest.raises(ValueError, match=r"environment 'gsm8k': bad options \['shots'\]"):
        get_env("gsm8k", shots=3)


def test_metric_specs_by_env_name() -> None:
    specs = metric_specs(["gsm8k", "tetris", "retired-benchmark"])
    assert specs["gsm8k"] is GSM8KEnv.metrics and specs["retired-benchmark"] == ()
    headline = {name: [m.key for m in env.metrics if m.headline] for name, env in ENVS.items()}
    assert headline["gsm8k"] == [
        "exact_match,strict-match", "exact_match,flexible-extract", "strict_correct", "flexible_correct"
    ]  # fmt: skip
    assert {m.key: m.kind for m in ENVS["mbpp"].metrics}["outcome"] == "counts"
    assert {m.key: m.kind for m in ENVS["tetris"].metrics}["end_reason"] == "counts"
    for env in ENVS.values():
        keys = [m.key for m in env.metrics]
        assert len(keys) == len(set(keys)) and all(m.label for m in env.metrics), env.name
        assert all(m.kind == "rate" for m in env.metrics if m.headline), env.name  # headline: a score to compare


def _info_of(name: str) -> dict[str, Any]:
    """The `info` the env records for the first row of its shipped set (a plausible completion)."""
    env = get_env(name, allow_unsandboxed=True) if name in ("mbpp", "humaneval") else get_env(name)
    row = load_rows(str(env.default_dataset_path()), env, limit=1)[0]
    if isinstance(env, MultiTurnEnv):
        episode = env.reset(row)
        episode.step({"role": "assistant", "content": None, "tool_calls": []})
        return episode.result().info
    assert isinstance(env, SingleTurnEnv)
    ascore = getattr(env, "ascore", None)
    completion = f"```python\n{env.reference(row)}\n```" if ascore else "The answer is \\boxed{2}.\n#### 2"
    return (asyncio.run(ascore(row, completion)) if ascore else env.score(row, completion)).info


KIND_TYPES: dict[str, tuple[type, ...]] = {"rate": (bool,), "mean": (int, float), "counts": (str,), "items": (list,)}


@pytest.mark.parametrize("name", sorted(ENVS))
def test_declared_metrics_are_what_the_env_records(name: str) -> None:
    info = _info_of(name)
    for spec in ENVS[name].metrics:
        assert spec.key in info, f"{name} declares {spec.key!r} but records {sorted(info)}"
        value = info[spec.key]
        ok = isinstance(value, KIND_TYPES[spec.kind]) and (spec.kind != "mean" or not isinstance(value, bool))
        assert ok, f"{name}.{spec.key} is a {spec.kind} but records {value!r}"


def test_shipped_test_set_loads() -> None:
    env = get_env("gsm8k")
    rows = load_rows(str(env.default_dataset_path()), env)
    assert len(rows) == 200
    assert [env.prompt_id(r) for r in rows] == [f"gsm-{i:04d}" for i in range(200)]
    for row in rows:
        assert isinstance(row["answer"], str) and str(int(row["answer"])) == row["answer"]
        assert env.reference(row) == row["answer"]
        assert "Give the result as your final answer" not in row["question"]
    assert len({r["question"] for r in rows}) == 200


def test_envs_do_not_import_prefect() -> None:
    """Environments are plain Python, usable outside a flow."""
    for path in (REPO_ROOT / "envs").glob("*.py"):
        for node in ast.walk(ast.parse(Path(path).read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not any(n.split(".")[0] == "prefect" for n in names), path
