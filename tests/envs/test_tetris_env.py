"""Tetris env: the tool and text protocols driven by hand-made assistant messages, records, rows, shipped set."""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import pytest

from envs.base import REPO_ROOT, DatasetError, MultiTurnEnv
from envs.datasets import load_rows
from envs.tetris import TetrisEnv, normalize_action, parse_action_tags, parse_answer, visible_text
from envs.tetris_game import Game

# Seed 93810, 4x4, single cells: spawn columns 1, 0, 2, 2; this script fills the bottom row (15 actions).
ROW = {"game_id": 7, "seed": 93810, "dim_board": [4, 4], "box_type": 1}
WIN = ["Left", "Down", "Down", "Down", "Right", "Down", "Down", "Down", "Down", "Down", "Down"]
WIN += ["Right", "Down", "Down", "Down"]


def call(actions: Any, n: int = 0, name: str = "step", raw: str | None = None) -> dict[str, Any]:
    arguments = raw if raw is not None else json.dumps({"actions": actions})
    return {"id": f"call-{n}", "type": "function", "function": {"name": name, "arguments": arguments}}


def assistant(*calls: dict[str, Any], content: str | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = list(calls)
    return msg


def test_is_a_multi_turn_env_with_one_tool() -> None:
    env = TetrisEnv()
    assert isinstance(env, MultiTurnEnv)
    assert env.max_turns == 11
    (tool,) = env.tools() or []
    assert tool["function"]["name"] == "step"
    assert tool["function"]["parameters"]["properties"]["actions"]["items"]["enum"] == ["Left", "Right", "Down"]
    assert TetrisEnv(mode="text").tools() is None


def test_opening_conversation() -> None:
    ep = TetrisEnv().reset(ROW)
    system, user = ep.messages
    assert system["role"] == "system" and user["role"] == "user"
    for needle in ('step({"actions": []})', "<answer>Action1 || Action2 || ...</answer>", "-0.1", "+10", "'#'"):
        assert needle in system["content"]
    assert "at most 10 tool calls" in system["content"]
    assert "4 columns wide and 4 rows high" in user["content"]
    custom = TetrisEnv(system_prompt="Play well.").reset(ROW)
    assert custom.messages[0] == {"role": "system", "content": "Play well."}


def test_empty_step_shows_the_board() -> None:
    ep = TetrisEnv().reset(ROW)
    turn = ep.step(assistant(call([])))
    assert not turn.done
    (msg,) = turn.messages
    assert msg["role"] == "tool" and msg["tool_call_id"] == "call-0"
    assert "_X__\n____\n____\n____" in msg["content"]
    assert "No action applied" in msg["content"] and "1 of 10" in msg["content"]
    info = ep.result().info
    assert (info["tool_calls"], info["actions_applied"], info["turns"]) == (1, 0, 1)
    assert ep.result().reward == 0.0


def test_actions_apply_in_order_and_invalid_ones_are_reported() -> None:
    ep = TetrisEnv().reset(ROW)
    turn = ep.step(assistant(call(["Left", "Up", "down", "rotate", "Down"])))
    content = turn.messages[0]["content"]
    assert "Applied 3 action(s): Left, Down, Down." in content
    assert "Ignored 2 invalid action(s): 'Up', 'rotate'" in content
    game = Game.new(ROW["seed"], 4, 4, 1)
    for action in ["Left", "Down", "Down"]:
        game.step(action)
    assert game.render() in content
    turn = ep.step(assistant(call(["Left"], n=1)))  # against the wall: applied, no effect
    info = ep.result().info
    assert info["actions"] == ["Left", "Down", "Down", "Left"]
    assert info["action_effective"] == [True, True, True, False]
    assert (info["actions_applied"], info["effective_actions"], info["invalid_actions"]) == (4, 3, 2)
    assert info["invalid_action_examples"] == ["Up", "rotate"]
    assert ep.result().reward == -0.4


def test_winning_call_stops_the_rollout() -> None:
    ep = TetrisEnv().reset(ROW)
    ep.step(assistant(call([])))
    # The game ends at the 15th action: the rest of the call and the second call are not executed.
    turn = ep.step(assistant(call([*WIN, "Down", "Left"], n=1), call(["Down"], n=2)))
    assert turn.done
    first, second = turn.messages
    assert "you WON: 1 row(s) cleared" in first["content"] and "Skipped 2 action(s)" in first["content"]
    assert second["tool_call_id"] == "call-2" and "already over" in second["content"]
    score = ep.result()
    assert score.success and score.reward == 8.5
    info = score.info
    assert (info["tool_calls"], info["refused_tool_calls"], info["actions_applied"]) == (2, 1, 15)
    assert (info["cleared_rows"], info["lockout"], info["end_reason"], info["skipped_actions"]) == (
        1,
        False,
        "success",
        2,
    )
    with pytest.raises(RuntimeError, match="over"):
        ep.step(assistant(call([], n=3)))


def test_lockout_stops_the_rollout() -> None:
    ep = TetrisEnv().reset(ROW)
    # Everything into column 0 (see the game tests): lockout after 11 actions.
    turn = ep.step(assistant(call(["Left", "Down", "Down", "Down", "Down", "Down", "Left", "Left", "Down"])))
    assert not turn.done
    turn = ep.step(assistant(call(["Left", "Left", "Down"], n=1)))
    assert turn.done and "you LOST" in turn.messages[0]["content"]
    score = ep.result()
    assert not score.success and score.reward == -1.1
    assert score.info["lockout"] and score.info["end_reason"] == "lockout" and score.info["skipped_actions"] == 1
    assert score.info["final_board"] == "#___\n#___\n#___\n#___"


def test_tool_call_cap() -> None:
    ep = TetrisEnv().reset(ROW)
    for n in range(9):
        assert not ep.step(assistant(call([], n=n))).done
    turn = ep.step(assistant(call([], n=9)))
    assert not turn.done and "No tool calls left" in turn.messages[0]["content"]
    turn = ep.step(assistant(call(["Down"], n=10)))  # the 11th call is refused and ends the rollout
    assert turn.done and "limit reached" in turn.messages[0]["content"]
    info = ep.result().info
    assert (info["tool_calls"], info["refused_tool_calls"], info["actions_applied"], info["turns"]) == (10, 1, 0, 11)
    assert info["end_reason"] == "tool_limit"


def test_calls_in_one_message_count_individually() -> None:
    env = TetrisEnv(max_tool_calls=3)
    assert env.max_turns == 4
    ep = env.reset(ROW)
    turn = ep.step(assistant(*[call(["Right"], n=n) for n in range(5)]))
    assert turn.done and [m["tool_call_id"] for m in turn.messages] == [f"call-{n}" for n in range(5)]
    assert ["limit reached" in m["content"] for m in turn.messages] == [False, False, False, True, True]
    info = ep.result().info
    assert (info["tool_calls"], info["refused_tool_calls"], info["actions_applied"]) == (3, 2, 3)


def test_no_tool_call_ends_the_rollout_and_records_the_answer() -> None:
    ep = TetrisEnv().reset(ROW)
    ep.step(assistant(call(["Left", "Down"])))
    content = "<think>maybe <answer>Right</answer></think>I moved twice.\n<answer> Left || Down </answer>"
    turn = ep.step(assistant(content=content))
    assert turn.done and turn.messages == []
    score = ep.result()
    assert score.parsed_answer == "Left || Down" == score.info["answer"]
    assert score.info["end_reason"] == "no_tool_call" and score.reward == -0.2 and not score.success


def test_malformed_and_unknown_calls() -> None:
    ep = TetrisEnv().reset(ROW)
    turn = ep.step(
        assistant(
            call(None, n=0, raw="{not json"),
            call(None, n=1, raw='{"actions": "Left"}'),
            call(["Left"], n=2, name="move"),
            {"type": "function", "function": {"name": "step", "arguments": {"actions": ["Left"]}}},
        )
    )
    assert not turn.done
    contents = [m["content"] for m in turn.messages]
    assert all(c.startswith("Error") for c in contents[:3]) and "unknown tool 'move'" in contents[2]
    assert turn.messages[3]["tool_call_id"] == "call_1_3"  # missing ids get a stable one
    assert "Applied 1 action(s): Left." in contents[3]  # arguments already parsed into a dict are accepted
    info = ep.result().info
    assert (info["tool_calls"], info["malformed_tool_calls"], info["actions_applied"]) == (4, 3, 1)


def test_text_mode() -> None:
    env = TetrisEnv(mode="text")
    ep = env.reset(ROW)
    assert "_X__\n____\n____\n____" in ep.messages[1]["content"]
    assert "<action>Left</action>" in ep.messages[0]["content"]
    reply = "I think <ACTION>left</ACTION> then <action> 2 </action><action>Down</action><action>up</action>"
    turn = ep.step(assistant(content=reply))
    assert not turn.done and turn.messages[0]["role"] == "user"
    assert "Applied 3 action(s): Left, Down, Down." in turn.messages[0]["content"]
    assert "Ignored 1 invalid action(s): 'up'" in turn.messages[0]["content"]
    turn = ep.step(assistant(content="<think><action>Right</action></think>No moves now. <answer>Left</answer>"))
    assert turn.done and turn.messages == []
    score = ep.result()
    info = score.info
    assert (info["tool_calls"], info["turns"], info["actions_applied"], info["invalid_actions"]) == (1, 2, 3, 1)
    assert score.parsed_answer == "Left" and score.reward == pytest.approx(-0.3)


def test_text_mode_win_and_cap() -> None:
    ep = TetrisEnv(mode="text").reset(ROW)
    turn = ep.step(assistant(content="".join(f"<action>{a}</action>" for a in WIN)))
    assert turn.done and ep.result().success and ep.result().reward == 8.5
    ep = TetrisEnv(mode="text", max_tool_calls=2).reset(ROW)
    assert not ep.step(assistant(content="<action>1</action>")).done
    assert not ep.step(assistant(content="<action>0</action>")).done
    turn = ep.step(assistant(content="<action>Down</action>"))
    assert turn.done and "limit reached" in turn.messages[0]["content"]
    info = ep.result().info
    assert (info["tool_calls"], info["refused_tool_calls"], info["actions"]) == (2, 1, ["Right", "Left"])


def test_parsers() -> None:
    assert [normalize_action(t) for t in ["LEFT", " right ", "down", "0", "1", "2", 2, "3", "Up", True, None]] == [
        "Left",
        "Right",
        "Down",
        "Left",
        "Right",
        "Down",
        "Down",
        None,
        None,
        None,
        None,
    ]
    assert parse_action_tags("<action>Left</action>x<Action>\nDown\n</Action>") == ["Left", "Down"]
    assert parse_answer("<answer>a</answer> <answer>b</answer>") == "b" and parse_answer("none") is None
    assert visible_text("plan <action>Left</action></think><action>Down</action>") == "<action>Down</action>"
    assert visible_text(None) == ""


def test_result_is_json_serialisable_and_complete() -> None:
    ep = TetrisEnv().reset(ROW)
    ep.step(assistant(call(["Down"])))
    info = ep.result().info
    json.dumps(info)
    for key in (
        "tool_calls",
        "turns",
        "actions_applied",
        "effective_actions",
        "invalid_actions",
        "cleared_rows",
        "lockout",
        "final_board",
        "answer",
        "seed",
        "dim_board",
        "box_type",
    ):
        assert key in info
    assert (info["seed"], info["dim_board"], info["box_type"], info["end_reason"]) == (93810, [4, 4], 1, "unfinished")


def test_identical_rows_replay_identically() -> None:
    env = TetrisEnv()
    a, b = env.reset(ROW), env.reset(ROW)
    assert a.messages == b.messages
    msg = assistant(call(["Left", "Down", "Right"]))
    assert a.step(msg) == b.step(msg) and a.result() == b.result()


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"seed": "1"}, "'seed' must be an integer"),
        ({"game_id": True}, "'game_id' must be an integer"),
        ({"seed": -1}, ">= 0"),
        ({"box_type": 4}, "'box_type' must be 0..3"),
        ({"dim_board": [4]}, "dim_board"),
        ({"dim_board": [4, 11]}, "dim_board"),
        ({"dim_board": [1, 4]}, "dim_board"),
        ({"dim_board": "4x4"}, "dim_board"),
        ({"dim_board": [4.0, 4]}, "dim_board"),
    ],
)
def test_validate_row_errors(change: dict[str, Any], match: str) -> None:
    with pytest.raises(DatasetError, match=rf"^games\.jsonl:3: .*{match}"):
        TetrisEnv().validate_row({**ROW, **change}, "games.jsonl:3")


def test_missing_key() -> None:
    row = dict(ROW)
    del row["box_type"]
    with pytest.raises(DatasetError, match="'box_type' must be an integer, got None"):
        TetrisEnv().validate_row(row, "x:1")


def test_ids_reference_and_options() -> None:
    env = TetrisEnv()
    assert env.prompt_id(ROW) == "tetris-0007" and env.reference(ROW) == ""
    for bad in ({"mode": "json"}, {"max_tool_calls": 0}, {"max_tool_calls": True}, {"system_prompt": 3}):
        with pytest.raises(ValueError, match="tetris"):
            TetrisEnv(**bad)


def test_fingerprint() -> None:
    base = TetrisEnv().fingerprint()
    assert base == TetrisEnv(mode="tools", max_tool_calls=10).fingerprint()
    others = [
        TetrisEnv(mode="text").fingerprint(),
        TetrisEnv(max_tool_calls=5).fingerprint(),
        TetrisEnv(system_prompt="x").fingerprint(),
    ]
    assert len({base, *others}) == 4


def test_shipped_set() -> None:
    env = TetrisEnv()
    rows = load_rows(str(env.default_dataset_path()), env)
    assert len(rows) == 200
    assert [env.prompt_id(r) for r in rows] == [f"tetris-{i:04d}" for i in range(1, 201)]
    assert len({r["seed"] for r in rows}) == 200
    assert {r["box_type"] for r in rows} == {1, 2, 3}
    assert all(4 <= d <= 6 for r in rows for d in r["dim_board"])
    text_env = TetrisEnv(mode="text")
    for row in rows:  # every game starts with a falling piece in the top row, shown in text mode's opening
        board = Game.new(row["seed"], *row["dim_board"], row["box_type"]).render()
        assert "X" in board.splitlines()[0] and board in text_env.reset(row).messages[1]["content"]


def test_generator_reproduces_the_shipped_file(tmp_path) -> None:
    spec = importlib.util.spec_from_file_location("make_tetris", REPO_ROOT / "scripts" / "make_tetris.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "test.jsonl"
    module.write(module.generate(), out)
    assert out.read_bytes() == (REPO_ROOT / "data" / "tetris" / "test.jsonl").read_bytes()


def test_tool_choice_options_shape_the_requests_and_the_cache_key() -> None:
    default, forced = TetrisEnv(), TetrisEnv(tool_choice="required", strict_tools=True)
    assert default.tool_choice() is None and "tool_choice" not in default.options  # sent as before: keys kept
    assert default.tools()[0]["function"].get("strict") is None
    assert forced.tool_choice() == "required" and forced.tools()[0]["function"]["strict"] is True
    assert TetrisEnv(tool_choice="step").tool_choice() == {"type": "function", "function": {"name": "step"}}
    assert len({default.fingerprint(), forced.fingerprint(), TetrisEnv(tool_choice="required").fingerprint()}) == 3
    for bad, message in [
        ({"tool_choice": "always"}, "tool_choice must be one of"),
        ({"strict_tools": "yes"}, "strict_tools must be true or false"),
        ({"mode": "text", "tool_choice": "required"}, "apply to mode 'tools' only"),
    ]:
        with pytest.raises(ValueError, match=message):
            TetrisEnv(**bad)
