"""The shipped examples of "bring your own benchmark" work as documented: the one-file shop env (multi-turn
tools) and the demo plugin package (single turn, entry point), driven by hand without a server."""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from envs.base import DatasetError, MultiTurnEnv, SingleTurnEnv
from envs.datasets import load_rows

REPO_ROOT = Path(__file__).resolve().parents[2]
SHOP_FILE = REPO_ROOT / "examples" / "envs" / "shop_env.py"
PLUGIN_DIR = REPO_ROOT / "examples" / "plugin"
ENTRY_POINT_GROUP = "evalflow.envs"


@pytest.fixture(scope="module")
def shop() -> ModuleType:
    """The example imported by its path, as a config's `examples/envs/shop_env.py:ShopEnv` would."""
    spec = importlib.util.spec_from_file_location("evalflow_test_shop_env", SHOP_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def plugin(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The plugin's env module from its source folder (not installed), as an editable install would find it."""
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    yield importlib.import_module("evalflow_plugin_demo.env")


def call(name: str, arguments: Any, n: int = 0) -> dict[str, Any]:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": f"call-{n}", "type": "function", "function": {"name": name, "arguments": raw}}


def assistant(*calls: dict[str, Any], content: str | None = None) -> dict[str, Any]:
    return {"role": "assistant", "content": content, **({"tool_calls": list(calls)} if calls else {})}


def shop_row(shop: ModuleType, prompt_id: str = "shop-01") -> dict[str, Any]:
    env = shop.ShopEnv()
    return next(r for r in load_rows(str(env.default_dataset_path()), env) if env.prompt_id(r) == prompt_id)


# ---- the shop env (one file, multi-turn, tools) --------------------------------------------------------------


def test_shop_file_is_short_and_imports_only_the_public_api() -> None:
    text = SHOP_FILE.read_text()
    assert len(text.splitlines()) < 100
    imports = [line for line in text.splitlines() if line.startswith(("import ", "from "))]
    assert [line for line in imports if "envs" in line or "evalflow" in line] == [
        "from evalflow import DatasetError, Episode, MetricSpec, MultiTurnEnv, Score, Turn"
    ]


@pytest.mark.parametrize(
    "path", [SHOP_FILE, *sorted(PLUGIN_DIR.glob("evalflow_plugin_demo/*.py"))], ids=lambda p: p.name
)
def test_the_examples_import_evalflow_only_through_its_public_path(path: Path) -> None:
    """What users copy: `from evalflow import ...`, never evalflow's own modules (which may move)."""
    internal = ("envs", "core", "tasks", "flows", "blocks", "cli", "ops", "sandbox", "errors")
    for line in path.read_text().splitlines():
        if line.startswith(("import ", "from ")):
            assert line.split()[1].split(".")[0] not in internal, f"{path.name}: {line}"


def test_shop_shipped_rows_validate(shop: ModuleType) -> None:
    env = shop.ShopEnv()
    assert env.default_dataset_path() == SHOP_FILE.with_name("shop.jsonl")
    rows = load_rows(str(env.default_dataset_path()), env)
    assert len(rows) == 12
    for row in rows:  # the shipped answers are right: the question's basket priced from the row's list
        basket = re.findall(r"(\d+|a) ([a-z]+)", row["question"])
        assert len(basket) == 2, row["question"]
        total = sum((1 if n == "a" else int(n)) * row["prices"][item.removesuffix("s")] for n, item in basket)
        assert round(total, 2) == row["answer"]
    assert env.reference(rows[0]) == "3.00"


def test_shop_declares_tools_turns_and_metrics(shop: ModuleType) -> None:
    env = shop.ShopEnv()
    assert isinstance(env, MultiTurnEnv) and env.name == "shop" and env.version == "1" and env.max_turns == 6
    assert [t["function"]["name"] for t in env.tools()] == ["price", "submit"]
    assert env.tools()[1]["function"]["parameters"]["properties"] == {"total": {"type": "number"}}
    assert {(m.key, m.kind) for m in env.metrics} == {("submitted", "rate"), ("tool_calls", "mean")}
    assert env.tool_choice() is None
    assert shop.ShopEnv(tool_choice="required").tool_choice() == "required"
    with pytest.raises(ValueError, match="tool_choice"):
        shop.ShopEnv(tool_choice="price")


def test_shop_right_total_scores_one(shop: ModuleType) -> None:
    ep = shop.ShopEnv().reset(shop_row(shop))  # 3 apples at 0.5 and 2 pears at 0.75
    assert [m["role"] for m in ep.messages] == ["system", "user"] and "3 apples" in ep.messages[1]["content"]
    turn = ep.step(assistant(call("price", {"item": "apple"}, 0), call("price", {"item": "Pears"}, 1)))
    assert not turn.done
    assert turn.messages == [
        {"role": "tool", "tool_call_id": "call-0", "content": "0.5"},
        {"role": "tool", "tool_call_id": "call-1", "content": "0.75"},
    ]
    turn = ep.step(assistant(call("submit", {"total": 3})))
    assert turn.done and turn.messages[0]["content"] == "Submitted."
    score = ep.result()
    assert (score.reward, score.success, score.parsed_answer) == (1.0, True, "3.00")
    assert score.info == {"tool_calls": 3, "submitted": True}
    json.dumps(score.info)


def test_shop_wrong_total_scores_zero(shop: ModuleType) -> None:
    ep = shop.ShopEnv().reset(shop_row(shop))
    assert ep.step(assistant(call("submit", {"total": 2.5}))).done
    score = ep.result()
    assert (score.reward, score.success, score.parsed_answer) == (0.0, False, "2.50")
    assert score.info == {"tool_calls": 1, "submitted": True}


@pytest.mark.parametrize(
    ("name", "arguments", "error"),
    [
        ("price", '{"item": "apple"', "must be a JSON object"),
        ("price", '"apple"', "must be a JSON object"),
        ("price", "null", "must be a JSON object"),
        ("price", {"item": "durian"}, "unknown item 'durian'"),
        ("submit", {"total": "three"}, "total must be a number"),
        ("submit", {"total": True}, "total must be a number"),
        ("submit", {}, "total must be a number"),
        ("checkout", {}, "unknown tool 'checkout'"),
    ],
)
def test_shop_bad_calls_get_an_error_and_the_episode_goes_on(
    shop: ModuleType, name: str, arguments: Any, error: str
) -> None:
    ep = shop.ShopEnv().reset(shop_row(shop))
    turn = ep.step(assistant(call(name, arguments)))
    assert not turn.done
    (msg,) = turn.messages
    assert msg["role"] == "tool" and msg["tool_call_id"] == "call-0"
    assert msg["content"].startswith("Error:") and error in msg["content"]
    assert ep.step(assistant(call("submit", {"total": 3.0}))).done
    assert ep.result().reward == 1.0 and ep.result().info["tool_calls"] == 2


def test_shop_plain_answer_ends_unsubmitted(shop: ModuleType) -> None:
    ep = shop.ShopEnv().reset(shop_row(shop))
    turn = ep.step(assistant(content="They cost $3.00."))
    assert turn.done and turn.messages == []
    score = ep.result()
    assert (score.reward, score.success, score.parsed_answer) == (0.0, False, None)
    assert score.info == {"tool_calls": 0, "submitted": False}


def test_shop_calls_after_submit_are_answered_not_run(shop: ModuleType) -> None:
    ep = shop.ShopEnv().reset(shop_row(shop))
    turn = ep.step(assistant(call("submit", {"total": 3}, 0), call("submit", {"total": 9}, 1)))
    assert turn.done and [m["tool_call_id"] for m in turn.messages] == ["call-0", "call-1"]
    assert "already submitted" in turn.messages[1]["content"]
    assert ep.result().reward == 1.0 and ep.result().info["tool_calls"] == 1


@pytest.mark.parametrize(
    "row",
    [
        {"prices": {"apple": 0.5}, "question": "q", "answer": 1},
        {"id": "x", "prices": {}, "question": "q", "answer": 1},
        {"id": "x", "prices": {"apple": "0.5"}, "question": "q", "answer": 1},
        {"id": "x", "prices": ["apple"], "question": "q", "answer": 1},
        {"id": "x", "prices": {"apple": 0.5}, "question": "", "answer": 1},
        {"id": "x", "prices": {"apple": 0.5}, "question": "q", "answer": "1"},
        {"id": "x", "prices": {"apple": 0.5}, "question": "q", "answer": True},
    ],
)
def test_shop_rejects_malformed_rows(shop: ModuleType, row: dict[str, Any]) -> None:
    with pytest.raises(DatasetError, match=r"^data\.jsonl:3: "):
        shop.ShopEnv().validate_row(row, "data.jsonl:3")


def test_shop_fingerprint_is_stable_and_follows_options(shop: ModuleType) -> None:
    a, b = shop.ShopEnv(), shop.ShopEnv()
    assert a.fingerprint() == b.fingerprint() == a.fingerprint()
    assert shop.ShopEnv(tool_choice="required").fingerprint() != a.fingerprint()


def test_shop_loads_through_a_file_reference() -> None:
    from envs.registry import env_class

    cls = env_class(f"{SHOP_FILE}:ShopEnv")
    assert cls.name == "shop" and cls().fingerprint()


# ---- the demo plugin (a package, single turn, entry point) ----------------------------------------------------


def test_plugin_shipped_rows_validate(plugin: ModuleType) -> None:
    env = plugin.WordCountEnv()
    path = env.default_dataset_path()
    assert path == PLUGIN_DIR / "evalflow_plugin_demo" / "data.jsonl"
    rows = load_rows(str(path), env)
    assert len(rows) == 15
    assert all(int(env.reference(r)) == len(r["sentence"].split()) for r in rows)


def test_plugin_scores_the_last_integer(plugin: ModuleType) -> None:
    env = plugin.WordCountEnv()
    assert isinstance(env, SingleTurnEnv) and env.stop() is None
    row = {"id": "w", "sentence": "The quick brown fox jumps over the lazy dog."}
    (msg,) = env.messages(row)
    assert msg["role"] == "user" and row["sentence"] in msg["content"]
    right = env.score(row, "Counting 1 by 1: there are 9 words.\n9")
    assert (right.reward, right.success, right.parsed_answer, right.info) == (1.0, True, "9", {"parse_error": False})
    wrong = env.score(row, "There are 9 letters in 'something', so 8 words.")
    assert (wrong.reward, wrong.success, wrong.parsed_answer) == (0.0, False, "8")
    none = env.score(row, "Nine.")
    assert (none.reward, none.parsed_answer, none.info) == (0.0, None, {"parse_error": True})


def test_plugin_rejects_malformed_rows_and_options(plugin: ModuleType) -> None:
    env = plugin.WordCountEnv()
    for row in ({"id": "w"}, {"id": "", "sentence": "a b"}, {"id": "w", "sentence": 3}):
        with pytest.raises(DatasetError, match=r"^f:1: "):
            env.validate_row(row, "f:1")
    with pytest.raises(TypeError):
        plugin.WordCountEnv(fewshot=2)


def test_plugin_fingerprint_is_stable(plugin: ModuleType) -> None:
    assert plugin.WordCountEnv().fingerprint() == plugin.WordCountEnv().fingerprint()


def test_plugin_metadata_registers_the_env_under_its_own_name(plugin: ModuleType) -> None:
    project = tomllib.loads((PLUGIN_DIR / "pyproject.toml").read_text())
    assert project["project"]["name"] == "evalflow-plugin-demo"
    assert project["project"]["dependencies"] == []  # installs offline into evalflow's environment
    assert project["build-system"]["build-backend"] == "hatchling.build"
    entry_points = project["project"]["entry-points"]
    assert entry_points[ENTRY_POINT_GROUP] == {"echo_words": "evalflow_plugin_demo.env:WordCountEnv"}
    assert entry_points["evalflow.scorers"] == {"within_percent": "evalflow_plugin_demo.scorers:WithinPercent"}
    assert plugin.WordCountEnv.name == "echo_words"  # evalflow refuses an entry point named otherwise


def test_plugin_installs_and_evalflow_finds_it(tmp_path: Path) -> None:
    """A real (offline) install into a folder: the dist-info has the entry point and the data ships; on that
    path, evalflow's registry loads the env by its registered name and reads the packaged data."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH")
    site = tmp_path / "site"
    cmd = [uv, "pip", "install", "--offline", "--no-deps", "--python", sys.executable, "--target", str(site)]
    built = subprocess.run([*cmd, str(PLUGIN_DIR)], capture_output=True, text=True, timeout=120)
    if built.returncode and "network was disabled" in built.stderr:
        pytest.skip(f"no cached hatchling to build with offline: {built.stderr.strip().splitlines()[-1]}")
    assert built.returncode == 0, built.stderr
    (dist_info,) = site.glob("evalflow_plugin_demo-*.dist-info")
    assert f"[{ENTRY_POINT_GROUP}]" in (dist_info / "entry_points.txt").read_text()
    assert (site / "evalflow_plugin_demo" / "data.jsonl").is_file()
    probe = (
        "from envs.registry import env_class, registered_origin\n"
        "cls = env_class('echo_words')\n"
        "print(cls.name, cls.default_dataset_path(), registered_origin('echo_words'), sep='|')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{site}:{REPO_ROOT}"},
    )
    assert out.returncode == 0, out.stderr
    name, data, origin = out.stdout.strip().split("|")
    assert name == "echo_words" and Path(data) == site / "evalflow_plugin_demo" / "data.jsonl"
    assert origin.startswith("evalflow-plugin-demo")
    _uses_the_plugins_scorer_kind(site, tmp_path)


PERCENT_TASK = """\
name: estimates
dataset: rows.jsonl
prompt:
  user: "Estimate {{ question }}"
scorer: {kind: within_percent, percent: 5}
"""


def _uses_the_plugins_scorer_kind(site: Path, work: Path) -> None:
    """The installed plugin's scorer kind, named by a task file and run from another working directory: it scores,
    `evalflow envs kinds` lists it, and a misspelt kind or a bad option of it fails in one line."""
    (work / "rows.jsonl").write_text('{"id": "g", "question": "g in m/s^2.", "answer": "9.81"}\n')
    (work / "task.yaml").write_text(PERCENT_TASK)
    (work / "typo.yaml").write_text(PERCENT_TASK.replace("within_percent", "within_percnt"))
    (work / "negative.yaml").write_text(PERCENT_TASK.replace("percent: 5", "percent: -5"))
    probe = (
        "import asyncio\n"
        "from envs.registry import get_env\n"
        "from envs.registry import EnvLoadError\n"
        "env = get_env('task.yaml')\n"
        "row = env.read_rows()[0]\n"
        "for text in ('About 10.', 'About 12.', 'No idea.'):\n"
        "    s = asyncio.run(env.ascore(row, text))\n"
        "    print(text, s.success, s.parsed_answer, sep='|')\n"
        "for bad in ('typo.yaml', 'negative.yaml'):\n"
        "    try:\n"
        "        get_env(bad)\n"
        "    except ValueError as exc:\n"
        "        print('ERROR', exc, sep='|')\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{site}:{REPO_ROOT}"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=work, env=env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[:3] == ["About 10.|True|10", "About 12.|False|12", "No idea.|False|None"]
    known = "code_tests, contains, exact_match, judge, math_verify, multiple_choice, numeric, within_percent"
    assert lines[3] == (
        f"ERROR|typo.yaml:5: scorer.kind: unknown scorer 'within_percnt' (did you mean 'within_percent'?); "
        f"known: {known}"
    )
    assert lines[4] == "ERROR|negative.yaml:5: scorer.percent: Input should be greater than 0, got -5"
    listing = subprocess.run(
        [sys.executable, "-m", "cli", "envs", "kinds", "--json"], capture_output=True, text=True, timeout=120,
        cwd=work, env=env,
    )  # fmt: skip
    assert listing.returncode == 0, listing.stderr
    kinds = {k["name"]: k for k in json.loads(listing.stdout)["kinds"]}
    assert kinds["within_percent"]["origin"].startswith("evalflow-plugin-demo (evalflow_plugin_demo.scorers")
    assert kinds["within_percent"]["options"] == {"percent": "1.0"} and kinds["within_percent"]["group"] == "scorer"
