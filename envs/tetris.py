"""GRL-style Tetris as a multi-turn environment: the model plays one seeded game per rollout.

Two protocols, the same game and scoring:
- "tools": one function tool `step(actions)`; every tool call the env answers counts (several in one
  assistant message count one by one). Calls beyond `max_tool_calls`, or made after the game ended in the
  same message, are not executed and are answered with a refusal. The rollout ends when the game ends, when
  an assistant message has no tool calls, or when a message's calls are refused for the limit.
- "text" (servers or models without tool calling): moves as `<action>Left</action>` tags (case-insensitive;
  0/1/2 mean Left/Right/Down), answered with a user message. One assistant message with at least one
  `<action>` tag (valid or not) counts as one tool call; a message with no tag ends the rollout.
Reward = sum of step rewards (-0.1 per applied action, +10 per cleared row); success = a row was cleared.

Tool choice (tools mode): `tool_choice: auto` (the default; the model decides, and the server needs a
tool-call parser, e.g. `server.tool_call_parser: hermes`), `required` (every reply must call a tool: the
server constrains decoding to a call, so the game ends by its rules or the call limit, never by a reply
without a call) or `step` (the named tool, likewise forced). `strict_tools: true` marks the tool schema
`strict`, so vLLM also pins the arguments to it (`{"actions": [...]}` with valid actions only). Small
models that never call tools on their own (SmolLM2 on CPU) play with `required` + `strict_tools`.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

from envs.base import DatasetError, Episode, MetricSpec, MultiTurnEnv, ReferenceProfile, Score, Turn
from envs.tetris_game import ACTIONS, PIECE_SETS, Game
from envs.tetris_reference import QWEN3_4B

MODES = ("tools", "text")
TOOL_CHOICES = ("auto", "required", "step")
BOARD_RANGE = (2, 10)
TOOL_NAME = "step"

_RULES = (
    "Rules: the board has a falling piece that you move with three actions: Left (one column left), "
    "Right (one column right) and Down (one row down). A move into a wall or a settled block does nothing "
    "but still counts. After every action, a piece that cannot move one row further down locks in place; "
    "a full row is then cleared and the rows above fall, and the next piece appears in the top row. "
    "Each action costs -0.1 reward and each cleared row gives +10. You win as soon as you clear a row; "
    "you lose when a locked piece occupies the top row.\n"
    "Board legend: one line per row, top row first; '_' is an empty cell, '#' a settled block, "
    "'X' the falling piece. Parts of a piece above the top row are not shown."
)
TOOLS_SYSTEM = (
    "You are a Tetris-playing assistant.\n"
    f"{_RULES}\n"
    "How to play: first call the `step` tool with an empty list to see the board and the falling piece: "
    'step({{"actions": []}}). Then call `step` with the actions to apply, in order, e.g. '
    'step({{"actions": ["Left", "Down", "Down"]}}); it returns the new board and your reward so far. '
    "Keep playing until you clear a row or lose; you have at most {max_tool_calls} tool calls. "
    "At the end, reply with all the moves you made as <answer>Action1 || Action2 || ...</answer>."
)
TEXT_SYSTEM = (
    "You are a Tetris-playing assistant.\n"
    f"{_RULES}\n"
    "How to play: reply with one or more moves as tags, e.g. <action>Left</action><action>Down</action>; "
    "the moves of a reply are applied in order and you get the new board back. Keep playing until you clear "
    "a row or lose; you have at most {max_tool_calls} replies with moves. A reply without <action> tags ends "
    "the game, so make it your final one: give all the moves you made as <answer>Action1 || Action2 || ...</answer>."
)
PIECE_WORDS = {
    0: "single cells",
    1: "single cells",
    2: "vertical 2-cell bars and horizontal 2-cell bars",
    3: "vertical 2-cell bars, horizontal 2-cell bars and 2x2 squares",
}
USER_TEMPLATES = {
    "tools": (
        "New game: the board is {dim_x} columns wide and {dim_y} rows high; the pieces are {pieces}. "
        "Call the step tool to see the board, then play to clear at least one row."
    ),
    "text": (
        "New game: the board is {dim_x} columns wide and {dim_y} rows high; the pieces are {pieces}. "
        "The board now:\n{board}\n\nReply with your moves to clear at least one row."
    ),
}
TOOL_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": (
            "Apply Tetris actions in order and return the board. Call with an empty list to see the current "
            "board without moving."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "actions": {
                    "type": "array",
                    "items": {"type": "string", "enum": list(ACTIONS)},
                    "description": 'Actions to apply in order, e.g. ["Left", "Down"]; [] only shows the board.',
                }
            },
            "required": ["actions"],
            "additionalProperties": False,
        },
    },
}

_ACTION_TAG = re.compile(r"<action>(.*?)</action>", re.IGNORECASE | re.DOTALL)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.IGNORECASE | re.DOTALL)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_ALIASES = {**{a.lower(): a for a in ACTIONS}, **{str(i): a for i, a in enumerate(ACTIONS)}}
MAX_INVALID_EXAMPLES = 10


def visible_text(content: Any) -> str:
    """Assistant text without reasoning: `<think>` blocks removed, and anything before a stray `</think>`
    (templates that open the block in the prompt), so moves merely considered are not played."""
    if not isinstance(content, str):
        return ""
    return _THINK_CLOSE.split(_THINK_BLOCK.sub("", content))[-1]


def normalize_action(token: Any) -> str | None:
    """`Left`/`Right`/`Down` for a valid action (any case, or 0/1/2), None for anything else."""
    if isinstance(token, int) and not isinstance(token, bool):
        token = str(token)
    if not isinstance(token, str):
        return None
    return _ALIASES.get(token.strip().lower())


def parse_action_tags(text: str) -> list[str]:
    """The raw contents of the `<action>` tags, in order."""
    return [m.strip() for m in _ACTION_TAG.findall(text)]


def parse_answer(text: str) -> str | None:
    """The last `<answer>...</answer>` text, stripped; None when there is none."""
    found = _ANSWER_TAG.findall(text)
    return found[-1].strip() if found else None


def _fmt_reward(x: float) -> str:
    return f"{x:+.1f}"


class TetrisEpisode(Episode):
    """One game played through one conversation; counts everything `result()` records."""

    def __init__(self, env: TetrisEnv, row: dict[str, Any]) -> None:
        dim_x, dim_y = row["dim_board"]
        self.env, self.row = env, row
        self.game = Game.new(row["seed"], dim_x, dim_y, row["box_type"])
        self.turns = 0
        self.tool_calls = 0
        self.refused_tool_calls = 0
        self.malformed_tool_calls = 0
        self.invalid_actions: list[str] = []
        self.skipped_actions = 0
        self.applied: list[str] = []
        self.effective: list[bool] = []
        self.answer: str | None = None
        self.end_reason: str | None = None
        user = USER_TEMPLATES[env.mode].format(
            dim_x=dim_x, dim_y=dim_y, pieces=PIECE_WORDS[row["box_type"]], board=self.game.render()
        )
        self.messages = [{"role": "system", "content": env.system_text()}, {"role": "user", "content": user}]

    # ---- the protocol -------------------------------------------------------------------------------
    def step(self, assistant: dict[str, Any]) -> Turn:
        if self.end_reason is not None:
            raise RuntimeError(f"the episode is over ({self.end_reason})")
        self.turns += 1
        text = visible_text(assistant.get("content"))
        answer = parse_answer(text)
        if answer is not None:
            self.answer = answer
        if self.env.mode == "tools":
            return self._step_tools(assistant.get("tool_calls") or [])
        return self._step_text(text)

    def _step_tools(self, calls: list[Any]) -> Turn:
        if not calls:
            return self._end("no_tool_call", [])
        replies, refused_for_limit = [], False
        for n, call in enumerate(calls):
            call_id = call.get("id") if isinstance(call, dict) else None
            call_id = call_id if isinstance(call_id, str) and call_id else f"call_{self.turns}_{n}"
            if self.game.done:
                content = self._refuse("the game is already over; this call was not executed.")
            elif self.tool_calls >= self.env.max_tool_calls:
                refused_for_limit = True
                content = self._refuse(
                    f"tool call limit reached ({self.env.max_tool_calls} calls); this call was not executed."
                )
            else:
                self.tool_calls += 1
                content = self._run_call(call)
            replies.append({"role": "tool", "tool_call_id": call_id, "content": content})
        if self.game.done:
            return self._end("success" if self.game.success else "lockout", replies)
        if refused_for_limit:
            return self._end("tool_limit", replies)
        return Turn(replies, done=False)

    def _step_text(self, text: str) -> Turn:
        tokens = parse_action_tags(text)
        if not tokens:
            return self._end("no_tool_call", [])
        if self.tool_calls >= self.env.max_tool_calls:
            content = self._refuse(f"move limit reached ({self.env.max_tool_calls} replies); moves not applied.")
            return self._end("tool_limit", [{"role": "user", "content": content}])
        self.tool_calls += 1
        content = self._apply(tokens)
        turn_messages = [{"role": "user", "content": content}]
        if self.game.done:
            return self._end("success" if self.game.success else "lockout", turn_messages)
        return Turn(turn_messages, done=False)

    def _end(self, reason: str, messages: list[dict[str, Any]]) -> Turn:
        self.end_reason = reason
        return Turn(messages, done=True)

    def _refuse(self, why: str) -> str:
        self.refused_tool_calls += 1
        return f"Error: {why}"

    # ---- executing moves ----------------------------------------------------------------------------
    def _run_call(self, call: Any) -> str:
        """Execute one `step` tool call; malformed calls get an error message and change nothing."""
        fn = call.get("function") if isinstance(call, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if name != TOOL_NAME:
            self.malformed_tool_calls += 1
            return f"Error: unknown tool {name!r}; the only tool is `{TOOL_NAME}`.\n\n{self._status()}"
        assert isinstance(fn, dict)  # it named the tool
        args = fn.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError:
                args = None
        actions = args.get("actions") if isinstance(args, dict) else None
        if not isinstance(actions, list):
            self.malformed_tool_calls += 1
            return (
                'Error: the arguments must be a JSON object {"actions": [...]} with a list of actions '
                f"(Left, Right, Down); nothing was applied.\n\n{self._status()}"
            )
        return self._apply(actions)

    def _apply(self, tokens: list[Any]) -> str:
        """Apply valid actions in order until the game ends; report what happened and the board."""
        applied: list[str] = []
        invalid: list[str] = []
        skipped = 0
        locks = 0
        for token in tokens:
            action = normalize_action(token)
            if action is None:
                invalid.append(str(token)[:40])
                continue
            if self.game.done:
                skipped += 1
                continue
            outcome = self.game.step(action)
            applied.append(action)
            self.effective.append(outcome.moved)
            locks += outcome.locked
        self.applied += applied
        self.invalid_actions += invalid
        self.skipped_actions += skipped
        lines = [
            f"Applied {len(applied)} action(s): {', '.join(applied)}." if applied else "No action applied.",
        ]
        if invalid:
            lines.append(
                f"Ignored {len(invalid)} invalid action(s): {', '.join(map(repr, invalid))} "
                f"(valid: {', '.join(ACTIONS)})."
            )
        if skipped:
            lines.append(f"Skipped {skipped} action(s) after the game ended.")
        if locks:
            lines.append(f"{locks} piece(s) locked.")
        return "\n".join(lines) + "\n\n" + self._status()

    def _status(self) -> str:
        g = self.game
        if g.success:
            state = f"game over, you WON: {g.cleared_rows} row(s) cleared"
        elif g.lockout:
            state = "game over, you LOST: a locked piece reached the top row"
        else:
            state = "in progress"
        calls = "replies with moves" if self.env.mode == "text" else "tool calls"
        lines = [
            f"Board:\n{g.render()}",
            f"Status: {state}. Total reward: {_fmt_reward(g.total_reward)} after {g.actions_taken} action(s). "
            f"{calls.capitalize()} used: {self.tool_calls} of {self.env.max_tool_calls}.",
        ]
        if not g.done and self.tool_calls >= self.env.max_tool_calls:
            lines.append(f"No {calls} left: reply now with <answer>Action1 || Action2 || ...</answer>.")
        return "\n".join(lines)

    # ---- the record ---------------------------------------------------------------------------------
    def result(self) -> Score:
        g = self.game
        info = {
            "mode": self.env.mode,
            "turns": self.turns,
            "tool_calls": self.tool_calls,
            "refused_tool_calls": self.refused_tool_calls,
            "malformed_tool_calls": self.malformed_tool_calls,
            "actions_applied": len(self.applied),
            "effective_actions": sum(self.effective),
            "actions": list(self.applied),
            "action_effective": list(self.effective),
            "invalid_actions": len(self.invalid_actions),
            "invalid_action_examples": self.invalid_actions[:MAX_INVALID_EXAMPLES],
            "skipped_actions": self.skipped_actions,
            "pieces_locked": g.pieces_locked,
            "cleared_rows": g.cleared_rows,
            "lockout": g.lockout,
            "game_over": g.done,
            "end_reason": self.end_reason or "unfinished",
            "final_board": g.render(),
            "answer": self.answer,
            "seed": self.row["seed"],
            "dim_board": list(self.row["dim_board"]),
            "box_type": self.row["box_type"],
        }
        return Score(reward=g.total_reward, success=g.success, parsed_answer=self.answer, info=info)


class TetrisEnv(MultiTurnEnv):
    """Rows: `{"game_id": int, "seed": int, "dim_board": [dim_x, dim_y], "box_type": 0..3}`; no reference."""

    name: ClassVar[str] = "tetris"
    version: ClassVar[str] = "1"
    default_dataset: ClassVar[str] = "data/tetris/test.jsonl"
    # moves are not a final answer: the reference is empty, and a vote over move lists means nothing
    majority_vote: ClassVar[bool] = False
    reference_profile: ClassVar[ReferenceProfile | None] = QWEN3_4B
    metrics: ClassVar[tuple[MetricSpec, ...]] = (
        MetricSpec(
            "end_reason",
            "end reason",
            "counts",
            description="success, lockout, tool_limit (calls used up), no_tool_call (the model stopped), unfinished",
        ),
        MetricSpec("lockout", "lockout", "rate", description="the game was lost: a locked piece reached the top row"),
        MetricSpec("game_over", "game over", "rate", description="the game ended (won or lost) within the rollout"),
        MetricSpec("actions_applied", "actions applied", "mean", description="valid actions played"),
        MetricSpec("effective_actions", "effective actions", "mean", description="actions that moved the piece"),
        MetricSpec("invalid_actions", "invalid actions", "mean", description="actions that were not Left/Right/Down"),
        MetricSpec("skipped_actions", "skipped actions", "mean", description="actions sent after the game ended"),
        MetricSpec("refused_tool_calls", "refused tool calls", "mean", description="calls over the limit or too late"),
        MetricSpec("malformed_tool_calls", "malformed tool calls", "mean", description="unknown tool or bad arguments"),
        MetricSpec("pieces_locked", "pieces locked", "mean", description="pieces that came to rest"),
        MetricSpec("cleared_rows", "cleared rows", "mean", description="full rows cleared"),
    )

    def __init__(
        self,
        mode: str = "tools",
        max_tool_calls: int = 10,
        system_prompt: str | None = None,
        tool_choice: str = "auto",
        strict_tools: bool = False,
    ) -> None:
        # the defaults of later options stay out of the recorded options, so earlier cache keys still hold
        later: dict[str, Any] = {}
        if tool_choice != "auto":
            later["tool_choice"] = tool_choice
        if strict_tools is not False:
            later["strict_tools"] = strict_tools
        super().__init__(mode=mode, max_tool_calls=max_tool_calls, system_prompt=system_prompt, **later)
        if mode not in MODES:
            raise ValueError(f"tetris: mode must be one of {MODES}, got {mode!r}")
        if tool_choice not in TOOL_CHOICES:
            raise ValueError(f"tetris: tool_choice must be one of {TOOL_CHOICES}, got {tool_choice!r}")
        if not isinstance(strict_tools, bool):
            raise ValueError(f"tetris: strict_tools must be true or false, got {strict_tools!r}")
        if mode == "text" and later:
            raise ValueError("tetris: tool_choice and strict_tools apply to mode 'tools' only (mode is 'text')")
        if isinstance(max_tool_calls, bool) or not isinstance(max_tool_calls, int) or max_tool_calls < 1:
            raise ValueError(f"tetris: max_tool_calls must be a positive integer, got {max_tool_calls!r}")
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise ValueError(f"tetris: system_prompt must be a string or None, got {system_prompt!r}")
        self.mode = mode
        self.max_tool_calls = max_tool_calls
        self.system_prompt = system_prompt
        self.choice = tool_choice
        self.strict_tools = strict_tools
        # Every turn that executes something uses at least one call; one more turn for a refused call.
        self.max_turns = max_tool_calls + 1

    def system_text(self) -> str:
        """The system message: the option if given, else the default prompt for the mode."""
        if self.system_prompt is not None:
            return self.system_prompt
        template = TOOLS_SYSTEM if self.mode == "tools" else TEXT_SYSTEM
        return template.format(max_tool_calls=self.max_tool_calls)

    def tools(self) -> list[dict[str, Any]] | None:
        if self.mode != "tools":
            return None
        if self.strict_tools:
            return [{**TOOL_SCHEMA, "function": {**TOOL_SCHEMA["function"], "strict": True}}]
        return [TOOL_SCHEMA]

    def tool_choice(self) -> str | dict[str, Any] | None:
        if self.mode != "tools" or self.choice == "auto":
            return None  # the server's default; sent as before the option existed
        if self.choice == "step":
            return {"type": "function", "function": {"name": TOOL_NAME}}
        return self.choice

    def reset(self, row: dict[str, Any]) -> TetrisEpisode:
        return TetrisEpisode(self, row)

    def validate_row(self, row: dict[str, Any], where: str) -> None:
        for key in ("game_id", "seed", "box_type"):
            value = row.get(key)
            if isinstance(value, bool) or not isinstance(value, int):
                raise DatasetError(f"{where}: {key!r} must be an integer, got {value!r}")
        if row["game_id"] < 0 or row["seed"] < 0:
            raise DatasetError(f"{where}: 'game_id' and 'seed' must be >= 0")
        if row["box_type"] not in PIECE_SETS:
            raise DatasetError(f"{where}: 'box_type' must be 0..3, got {row['box_type']}")
        dims = row.get("dim_board")
        lo, hi = BOARD_RANGE
        if (
            not isinstance(dims, list)
            or len(dims) != 2
            or any(isinstance(d, bool) or not isinstance(d, int) or not lo <= d <= hi for d in dims)
        ):
            raise DatasetError(f"{where}: 'dim_board' must be [dim_x, dim_y], integers {lo}..{hi}, got {dims!r}")

    def prompt_id(self, row: dict[str, Any]) -> str:
        return f"tetris-{row['game_id']:04d}"

    def reference(self, row: dict[str, Any]) -> str:
        return ""

    def prompt_templates(self) -> dict[str, Any]:
        return {
            "system": self.system_text(),
            "user": USER_TEMPLATES[self.mode],
            "pieces": {str(k): v for k, v in PIECE_WORDS.items()},
        }
