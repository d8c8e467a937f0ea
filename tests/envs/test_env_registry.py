"""Registry lookups and the shipped offline data set."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from envs.base import REPO_ROOT
from envs.datasets import load_rows
from envs.gsm8k import GSM8KEnv
from envs.registry import ENVS, get_env


def test_get_env_by_name_with_options() -> None:
    env = get_env("gsm8k", fewshot=4)
    assert isinstance(env, GSM8KEnv) and len(env.fewshot_rows) == 4
    assert ENVS["gsm8k"] is GSM8KEnv


def test_unknown_env_lists_known_names() -> None:
    with pytest.raises(ValueError, match=r"unknown environment 'gsm9k'; known: gsm8k"):
        get_env("gsm9k")


def test_unknown_option() -> None:
    with pytest.raises(ValueError, match=r"environment 'gsm8k': bad options \['shots'\]"):
        get_env("gsm8k", shots=3)


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
