"""The shipped SmolLM2 template with tools: identical to the model's own without tools, Hermes-style with them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from core.config import REPO_ROOT, ServerConfig
from envs.tetris import TetrisEnv
from tasks.checkpoints.prepare import PreparedModel
from tasks.serving.sample_settings import sample_settings

TEMPLATE = REPO_ROOT / "configs" / "chat_templates" / "smollm2_tools.jinja"


def render(template: str, messages: list[dict[str, Any]], **kwargs: Any) -> str:
    """As transformers renders chat templates (trim_blocks, lstrip_blocks, a tojson filter)."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x: json.dumps(x, ensure_ascii=False)
    return env.from_string(template).render(messages=messages, **kwargs)


CONVERSATIONS = [
    [{"role": "user", "content": "hi"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
    ],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}],
]


@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("generation", [True, False])
def test_without_tools_it_renders_exactly_as_the_models_template(
    smollm2: PreparedModel, messages: list[dict[str, Any]], generation: bool
) -> None:
    own = (Path(smollm2.path) / "chat_template.jinja").read_text()
    ours = TEMPLATE.read_text()
    assert render(ours, messages, add_generation_prompt=generation) == render(
        own, messages, add_generation_prompt=generation
    )


def test_with_tools_calls_and_results_render_in_the_hermes_format() -> None:
    env = TetrisEnv(tool_choice="required", strict_tools=True)
    episode = env.reset({"game_id": 1, "seed": 7, "dim_board": [4, 4], "box_type": 0})
    calls = [
        {"id": "a", "type": "function", "function": {"name": "step", "arguments": '{"actions": []}'}},
        {"id": "b", "type": "function", "function": {"name": "step", "arguments": {"actions": ["Left"]}}},
    ]
    messages = [
        *episode.messages,
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "a", "content": "board one"},
        {"role": "tool", "tool_call_id": "b", "content": "board two"},
    ]
    text = render(TEMPLATE.read_text(), messages, tools=env.tools(), add_generation_prompt=True)
    system, user, assistant, results, prompt = text.split("<|im_start|>")[1:]
    assert system.startswith("system\nYou are a Tetris-playing assistant.") and "<tools>\n" in system
    assert json.loads(system.split("<tools>\n")[1].split("\n</tools>")[0]) == env.tools()[0]
    assert user.startswith("user\nNew game:")
    assert assistant == (
        'assistant\n<tool_call>\n{"name": "step", "arguments": {"actions": []}}\n</tool_call>\n'
        '<tool_call>\n{"name": "step", "arguments": {"actions": ["Left"]}}\n</tool_call><|im_end|>\n'
    )
    assert results == (
        "user\n<tool_response>\nboard one\n</tool_response>\n<tool_response>\nboard two\n</tool_response><|im_end|>\n"
    )
    assert prompt == "assistant\n"


def test_the_template_is_part_of_the_sample_settings(tmp_path: Path) -> None:
    """Another template is another prompt: batches are keyed by its content, not its path."""
    copy = tmp_path / "t.jinja"
    copy.write_text(TEMPLATE.read_text())
    same = sample_settings(ServerConfig(chat_template=str(copy)))
    assert same == sample_settings(ServerConfig(chat_template=str(TEMPLATE)))
    assert "chat_template" not in sample_settings(ServerConfig())
    copy.write_text(TEMPLATE.read_text() + " ")
    assert sample_settings(ServerConfig(chat_template=str(copy)))["chat_template"] != same["chat_template"]
