"""Reasoning settings in the config: checked when the config is read, and what each benchmark adds to its requests."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from core.config import EvalConfig
from core.reasoning_parsers import REASONING_PARSERS, registered_parsers
from tasks.collection.plan import batch_key, bench_sampling, generation_key
from tasks.runtime.venv import ensure_runtime


def config(**fields: object) -> EvalConfig:
    return EvalConfig.model_validate(fields)


def test_thinking_settings_become_request_fields_and_enter_both_keys() -> None:
    cfg = config(
        benchmarks=[
            {"name": "gsm8k"},
            {"name": "gsm8k", "label": "off", "thinking": "off", "chat_template_kwargs": {"x": 1}},
            {
                "name": "gsm8k",
                "label": "budget",
                "thinking": "on",
                "thinking_budget": 64,
                "extra_body": {"min_tokens": 2},
            },
        ],
        server={"reasoning_parser": "qwen3"},
        sampling={"extra_body": {"repetition_penalty": 1.1, "chat_template_kwargs": {"y": 2}}},
    )
    plain, off, budget = (bench_sampling(cfg, i) for i in range(3))
    assert plain.extra_body == {"repetition_penalty": 1.1, "chat_template_kwargs": {"y": 2}}
    assert off.extra_body["chat_template_kwargs"] == {"y": 2, "x": 1, "enable_thinking": False}
    assert budget.extra_body == {
        "repetition_penalty": 1.1, "chat_template_kwargs": {"y": 2, "enable_thinking": True},
        "thinking_token_budget": 64, "min_tokens": 2,
    }  # fmt: skip
    assert off.as_request()["extra_body"]["chat_template_kwargs"]["enable_thinking"] is False
    from envs.gsm8k import GSM8KEnv

    env, rows = GSM8KEnv(), [{"id": "a", "question": "1+1?", "answer": "2"}]
    keys = {(batch_key(env, rows, [0], "m", s), generation_key(env, rows, [0], "m", s)) for s in (plain, off, budget)}
    assert len({k for k, _ in keys}) == 3 and len({g for _, g in keys}) == 3


def test_yaml_on_and_off_are_the_thinking_settings() -> None:
    import yaml

    benchmarks = yaml.safe_load("- {name: gsm8k, thinking: off}\n- {name: gsm8k, label: b, thinking: on}")
    assert [b.thinking for b in config(benchmarks=benchmarks).benchmarks] == ["off", "on"]


def test_no_extra_body_keeps_the_generation_keys_of_earlier_versions() -> None:
    """Completions cached before extra_body existed are found again (and rescored, not regenerated)."""
    from envs.gsm8k import GSM8KEnv

    sampling = config().sampling
    assert "extra_body" not in sampling.key_fields() and sampling.as_request().get("extra_body") is None
    rows = [{"id": "a", "question": "1+1?", "answer": "2"}]
    # the generation key c4a2d51 (before reasoning) computes, for the same env, rows, model and sampling
    assert generation_key(GSM8KEnv(), rows, [0, 1], "model", sampling) == (
        "96e3eb8d785f4003bd647e615451e6daaa7ec6f241c9a8f142994b3d2bde311d"
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"server": {"reasoning_parser": "qwen4"}}, "reasoning_parser 'qwen4' is not one of vLLM's"),
        (
            {"benchmarks": [{"name": "gsm8k", "thinking_budget": 8}]},
            "benchmarks.0.thinking_budget: vLLM ends reasoning",
        ),
        ({"benchmarks": [{"name": "gsm8k", "thinking": "maybe"}]}, "benchmarks.0.thinking"),
        ({"benchmarks": [{"name": "gsm8k", "thinking_budget": -1}]}, "greater than or equal to 0"),
        ({"benchmarks": [{"name": "gsm8k", "extra_body": {"seed": 1}}]}, "extra_body.seed: evalflow sets this"),
        (
            {"benchmarks": [{"name": "gsm8k", "extra_body": {"thinking_token_budget": 5}}]},
            "extra_body.thinking_token_budget: set it as benchmarks.N.thinking_budget",
        ),
        ({"sampling": {"extra_body": {"max_tokens": 5}}}, "extra_body.max_tokens: evalflow sets this"),
        (
            {"benchmarks": [{"name": "gsm8k", "thinking": "on", "chat_template_kwargs": {"enable_thinking": False}}]},
            "chat_template_kwargs.enable_thinking contradicts thinking: on",
        ),
        ({"model": {"reasoning": {"start": "<t>", "end": "<t>"}}}, "the tags must differ"),
    ],
)
def test_a_wrong_reasoning_setting_fails_with_the_config(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        config(**fields)


def test_an_external_server_or_a_plugin_parser_is_not_checked_here() -> None:
    config(server={"mode": "external", "base_url": "http://127.0.0.1:9/v1", "reasoning_parser": "mine"})
    config(server={"reasoning_parser": "mine", "extra_args": ["--reasoning-parser-plugin", "/x/mine.py"]})
    # an external server may have a parser evalflow cannot see: its 400 says so, as a configuration failure
    config(
        server={"mode": "external", "base_url": "http://127.0.0.1:9/v1"},
        benchmarks=[{"name": "gsm8k", "thinking_budget": 8}],
    )


def test_the_pinned_parser_names_are_the_installed_runtimes() -> None:
    runtime = ensure_runtime("cpu")
    site = next(Path(runtime.path, "lib").glob("python3*/site-packages"))
    assert registered_parsers(site) == list(REASONING_PARSERS["cpu"])
