"""`evalflow envs list` and `evalflow envs check`: what a task author runs before any server starts."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from cli.main import app
from tests.envs.test_env_loading import ENV_SOURCE


def test_list_shows_every_registered_environment(evalflow: Callable[..., Result]) -> None:
    result = evalflow("envs", "list", "--json")
    assert result.exit_code == 0, result.output
    listed = {e["name"]: e for e in json.loads(result.stdout)["envs"]}
    assert set(listed) >= {"gsm8k", "math", "mbpp", "humaneval", "ifeval", "tetris"}
    assert listed["gsm8k"]["options"] == {"fewshot": "0", "system_prompt": "None", "mode": "'chat'"}
    assert listed["tetris"]["kind"] == "multi-turn" and "exact_match,strict-match" in listed["gsm8k"]["metrics"]
    text = evalflow("envs", "list").stdout
    assert "gsm8k  v2  single-turn  from evalflow (envs.gsm8k:GSM8KEnv)" in text


def test_check_renders_prompts_and_scores_the_references(evalflow: Callable[..., Result]) -> None:
    result = evalflow("envs", "check", "gsm8k", "--limit", "3", "--option", "fewshot=1")
    assert result.exit_code == 0, result.output
    assert "gsm8k v2 (single-turn, gsm8k): 200 rows valid in" in result.stdout
    assert result.stdout.count("reference as completion: correct") == 3
    assert "3/3 reference answers score as correct" in result.stdout
    assert result.stdout.count("[assistant]") == 3  # the one few-shot example, in each prompt


def _write_env(folder: Path, rows: str) -> None:
    folder.mkdir()
    (folder / "echo_env.py").write_text(ENV_SOURCE)
    (folder / "rows.jsonl").write_text(rows)


def test_check_a_users_file_from_another_directory_and_see_a_broken_scorer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_env(tmp_path / "mine", '{"id": "a", "text": "hi"}\n{"id": "b", "text": "there"}\n')
    monkeypatch.chdir(tmp_path)
    args = ["envs", "check", "mine/echo_env.py:EchoEnv", "--dataset", "mine/rows.jsonl"]
    result = CliRunner().invoke(app, args, prog_name="evalflow")
    assert result.exit_code == 0, result.output
    assert "2 rows valid in " + str(tmp_path / "mine" / "rows.jsonl") in result.stdout
    assert "[user] Repeat: there" in result.stdout and "2/2 reference answers score as correct" in result.stdout
    # a scorer that rejects its own references: the author sees it, and the command fails
    source = (tmp_path / "mine" / "echo_env.py").read_text().replace('== row["text"]', "== row[\"text\"] + '!'")
    (tmp_path / "mine" / "echo_env.py").write_text(source)
    result = CliRunner().invoke(app, args, prog_name="evalflow")
    assert result.exit_code == 1 and "0/2 reference answers score as correct" in result.stdout


def test_check_names_the_file_and_line_of_a_malformed_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_env(tmp_path / "mine", '{"id": "a", "text": "hi"}\n{"id": "b"}\n')
    monkeypatch.chdir(tmp_path)
    args = ["envs", "check", "mine/echo_env.py:EchoEnv", "--dataset", "mine/rows.jsonl"]
    result = CliRunner().invoke(app, args, prog_name="evalflow")
    assert result.exit_code == 2
    assert result.stderr.strip() == f"dataset error: {tmp_path}/mine/rows.jsonl:2: missing 'text'"
