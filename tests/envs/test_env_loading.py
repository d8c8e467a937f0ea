"""Environments from anywhere: evalflow's own through its entry points, a user's file or module, an installed
plugin (a real dist-info on sys.path); the source hash in the fingerprint; one-line errors naming what to fix."""

from __future__ import annotations

import os
import re
import socket
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from core.config import BenchmarkConfig, EvalConfig
from envs import registry
from envs.base import REPO_ROOT, _source_digest
from envs.gsm8k import GSM8KEnv
from envs.registry import ENVS, EnvLoadError, env_class, get_env, registered_origin

ENV_SOURCE = """
from typing import Any, ClassVar
from envs.base import DatasetError, Score, SingleTurnEnv


class EchoEnv(SingleTurnEnv):
    name: ClassVar[str] = "echo"
    version: ClassVar[str] = "1"
    default_dataset: ClassVar[str] = "unused.jsonl"

    def __init__(self, shout: bool = False) -> None:
        super().__init__(shout=shout)

    def validate_row(self, row: dict[str, Any], where: str) -> None:
        if "text" not in row:
            raise DatasetError(f"{where}: missing 'text'")

    def prompt_id(self, row: dict[str, Any]) -> str:
        return row["id"]

    def reference(self, row: dict[str, Any]) -> str:
        return row["text"]

    def prompt_templates(self) -> dict[str, Any]:
        return {"ask": "Repeat: {text}"}

    def messages(self, row: dict[str, Any]) -> list[dict[str, str]]:
        return [{"role": "user", "content": "Repeat: " + row["text"]}]

    def stop(self) -> list[str] | None:
        return None

    def score(self, row: dict[str, Any], completion: str) -> Score:
        ok = completion.strip() == row["text"]
        return Score(float(ok), ok, completion.strip(), {})
"""


@pytest.fixture(autouse=True)
def _fresh_registry() -> None:
    registry._entry_points.cache_clear()
    yield
    registry._entry_points.cache_clear()


def test_the_built_ins_register_through_the_entry_point_group_like_any_plugin() -> None:
    assert set(ENVS) == {"gsm8k", "math", "mbpp", "humaneval", "ifeval", "tetris"}
    for name, cls in ENVS.items():
        assert cls.name == name and registered_origin(name).startswith("evalflow ("), name
        assert cls.source_digest() is None  # their `version` says when they change: cache keys as before
    assert env_class("gsm8k") is GSM8KEnv is env_class("envs.gsm8k:GSM8KEnv")


def test_a_file_reference_is_resolved_once_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "echo_env.py").write_text(ENV_SOURCE)
    (tmp_path / "mine" / "rows.jsonl").write_text('{"id": "a", "text": "hi"}\n')
    monkeypatch.chdir(tmp_path)
    bench = BenchmarkConfig(name="mine/echo_env.py:EchoEnv", dataset="mine/rows.jsonl", options={"shout": True})
    assert bench.name == f"{tmp_path}/mine/echo_env.py:EchoEnv" and bench.dataset == f"{tmp_path}/mine/rows.jsonl"
    assert bench.key == "echo"  # records and reports use the environment's own name
    monkeypatch.chdir(REPO_ROOT)  # later steps read the same file from anywhere
    env = get_env(bench.env_ref, **bench.options)
    assert env.score({"id": "a", "text": "hi"}, " hi\n").success
    config = EvalConfig.model_validate({"benchmarks": [bench.model_dump(exclude_unset=True)]})
    assert config.benchmarks[0].key == "echo"


def test_a_users_code_enters_the_fingerprint_so_an_edit_never_reuses_cached_batches(tmp_path: Path) -> None:
    path = tmp_path / "echo_env.py"
    path.write_text(ENV_SOURCE)
    first = get_env(f"{path}:EchoEnv")
    assert first.source_digest() is not None and "source" in first._fingerprint_payload()
    assert get_env(f"{path}:EchoEnv").fingerprint() == first.fingerprint()  # stable while unchanged
    path.write_text(ENV_SOURCE.replace("completion.strip() == row", "completion == row"))  # scoring, no version bump
    os.utime(path, ns=(1, 1))  # a new stamp even within the file system's timestamp resolution
    assert get_env(f"{path}:EchoEnv").fingerprint() != first.fingerprint()


def test_a_module_reference_hashes_its_whole_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "team_envs"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "echo.py").write_text(ENV_SOURCE)
    (package / "helpers.py").write_text("FACTOR = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cls = env_class("team_envs.echo:EchoEnv")
    assert BenchmarkConfig(name="team_envs.echo:EchoEnv").key == "echo"
    before = cls.source_digest()
    (package / "helpers.py").write_text("FACTOR = 2\n")  # a helper module the scorer may use
    _source_digest.cache_clear()  # digests are kept per process (a flow run's): a new process hashes anew
    assert cls.source_digest() != before


def _install_plugin(site: Path, dist: str, entries: dict[str, str], module: str, source: str) -> None:
    """A plugin as an installer leaves it: the module, and a dist-info with its entry points."""
    (site / f"{module}.py").write_text(source)
    info = site / f"{dist}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    lines = "\n".join(f"{name} = {value}" for name, value in entries.items())
    (info / "entry_points.txt").write_text(f"[evalflow.envs]\n{lines}\n")


def test_an_installed_plugin_is_found_by_its_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install_plugin(tmp_path, "echo_plugin", {"echo": "echo_plugin_mod:EchoEnv"}, "echo_plugin_mod", ENV_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "echo" in ENVS and registered_origin("echo") == "echo_plugin (echo_plugin_mod:EchoEnv)"
    assert BenchmarkConfig(name="echo").key == "echo" and ENVS["echo"].source_digest() is not None


def test_plugin_conflicts_and_misnamed_plugins_fail_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install_plugin(tmp_path, "plugin_a", {"echo": "echo_a:EchoEnv", "gsm8k": "echo_a:EchoEnv"}, "echo_a", ENV_SOURCE)
    _install_plugin(tmp_path, "plugin_b", {"echo": "echo_b:EchoEnv", "shout": "echo_b:EchoEnv"}, "echo_b", ENV_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(EnvLoadError, match=r"'echo' is registered by 2 packages: plugin_a .*plugin_b"):
        env_class("echo")
    with pytest.raises(EnvLoadError, match=r"'gsm8k' is registered by 2 packages"):  # no plugin shadows a built-in
        env_class("gsm8k")
    with pytest.raises(EnvLoadError, match=r"'shout' \(echo_b:EchoEnv\) calls itself 'echo'"):
        env_class("shout")


@pytest.mark.parametrize(
    ("ref", "source", "message"),
    [
        ("missing.py:EchoEnv", None, r"no file .*missing\.py on host " + socket.gethostname()),
        ("echo_env.py:Nope", ENV_SOURCE, r"no class 'Nope' there; environments there: EchoEnv"),
        ("echo_env.py:EchoEnv", "def broken(:\n", r"cannot be imported on host .*: SyntaxError"),
        ("echo_env.py:EchoEnv", "import not_a_module_here\n", r"ModuleNotFoundError: No module named 'not_a_module"),
        ("echo_env.py:EchoEnv", "class EchoEnv:\n    pass\n", r"is not an environment: a subclass of"),
        (
            "echo_env.py:EchoEnv",
            "from envs.base import SingleTurnEnv\nclass EchoEnv(SingleTurnEnv):\n    name = 'x'\n",
            r"does not implement messages, prompt_id",
        ),
        ("echo_env.py:EchoEnv", ENV_SOURCE.replace('"echo"', '"bad name!"'), r"attribute 'name' must be a string"),
        ("no_such_pkg.envs:EchoEnv", None, r"module 'no_such_pkg.envs' cannot be imported on host"),
        ("gsm9k", None, r"unknown environment 'gsm9k' on host .*; known: gsm8k, humaneval"),
    ],
)
def test_a_broken_environment_fails_with_the_config_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ref: str, source: str | None, message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    if source is not None:
        Path("echo_env.py").write_text(textwrap.dedent(source))
    with pytest.raises(ValidationError) as info:
        EvalConfig.model_validate({"benchmarks": [{"name": ref}]})
    error = info.value.errors()[0]
    assert error["loc"] == ("benchmarks", 0, "name") and "\n" not in error["msg"]
    assert re.search(message, error["msg"]), error["msg"]


def test_name_and_task_are_one_or_the_other() -> None:
    with pytest.raises(ValidationError, match="set one of `name`"):
        BenchmarkConfig.model_validate({"repeats": 2})
    with pytest.raises(ValidationError, match="set one of `name`"):
        BenchmarkConfig.model_validate({"name": "gsm8k", "task": {"name": "t"}})
