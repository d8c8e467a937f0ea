"""One benchmark of a run (`benchmarks.N`): which environment (a registered name, a reference to a class or a
task file, or an inline task), its data, options, repeats and token limit; the environment is loaded when the
config is validated, so a wrong one fails before anything runs."""

from __future__ import annotations

import json
import re
from typing import Any, Literal, cast

from pydantic import Field, JsonValue, PrivateAttr, ValidationInfo, field_validator, model_validator

from core.config_base import Strict as _Strict
from core.config_base import absolute_path

LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# Request fields evalflow sets itself: an `extra_body` may not override them.
RESERVED_REQUEST_FIELDS = frozenset({
    "model", "messages", "prompt", "seed", "stop", "tools", "tool_choice", "temperature", "top_p", "max_tokens",
    "max_completion_tokens", "n", "stream", "stream_options",
})  # fmt: skip
# Set through `thinking_budget` and `chat_template_kwargs`, where evalflow checks them.
_OWN_FIELDS = {"thinking_token_budget": "thinking_budget", "chat_template_kwargs": "chat_template_kwargs"}


def check_extra_body(value: dict[str, JsonValue], own: bool = False) -> dict[str, JsonValue]:
    """An `extra_body` with no field evalflow sets itself (`own`: nor one a benchmark has a field for)."""
    for key in value:
        if key in RESERVED_REQUEST_FIELDS:
            raise ValueError(f"extra_body.{key}: evalflow sets this request field itself; use its own setting")
        if own and key in _OWN_FIELDS:
            raise ValueError(f"extra_body.{key}: set it as benchmarks.N.{_OWN_FIELDS[key]}")
    return value


class BenchmarkConfig(_Strict):
    name: str | None = Field(
        default=None,
        description="the environment: a registered name (gsm8k, math, mbpp, humaneval, ifeval, tetris, or an installed "
        "plugin's; `evalflow envs list`), `package.module:Class`, `path/to/file.py:Class` or a task file "
        "`path/to/task.yaml` (paths relative to the working directory)",
    )
    task: str | dict[str, JsonValue] | None = Field(
        default=None,
        description="a declarative single-turn task instead of `name`: a YAML file (relative to the working "
        "directory) or the task's fields inline",
    )
    label: str | None = Field(
        default=None,
        description="the benchmark's name in records and reports (default: the environment name); set it to run "
        "one environment in several settings in one run, e.g. gsm8k_8shot",
    )
    dataset: str | None = Field(
        default=None,
        description="JSONL/parquet path or URL, or hf-dataset:<path>?config=..&split=..; default: the shipped set",
    )
    limit: int | None = Field(default=None, ge=1, description="use the first N prompts")
    repeats: int = Field(default=4, ge=1, description="sampled rollouts per prompt")
    options: dict[str, JsonValue] = Field(default_factory=dict, description="environment options (e.g. fewshot)")
    max_tokens: int | None = Field(
        default=None,
        ge=1,
        description="tokens per completion here (default: sampling.max_tokens); lm-eval's max_gen_toks",
    )
    thinking: Literal["default", "on", "off"] = Field(
        default="default",
        description="a reasoning model's thinking: on or off through the chat template's switch (model.reasoning."
        "switch, enable_thinking for Qwen3), or the template's default",
    )
    thinking_budget: int | None = Field(
        default=None,
        ge=0,
        description="the most reasoning tokens per completion (vLLM's thinking_token_budget: the server ends the "
        "reasoning there and the model answers); needs server.reasoning_parser",
    )
    chat_template_kwargs: dict[str, JsonValue] = Field(
        default_factory=dict, description="more keywords for the chat template (sent as chat_template_kwargs)"
    )
    extra_body: dict[str, JsonValue] = Field(
        default_factory=dict,
        description="more request fields for this benchmark, sent as they are (e.g. structured_outputs, min_tokens)",
    )
    on_long_prompt: Literal["fail", "skip"] = Field(
        default="fail",
        description="a prompt (template and few-shot included) longer than server.max_model_len minus max_tokens: "
        "fail the run before anything is sent (naming file:line and its tokens), or skip it (counted in the report)",
    )

    _env_name: str = PrivateAttr("")

    @property
    def env_ref(self) -> str | dict[str, JsonValue]:
        """What envs.registry loads: the task (a file or inline) or the environment's name or reference."""
        return self.task if self.task is not None else (self.name or "")

    @property
    def env_name(self) -> str:
        """The environment's own name (`gsm8k`; a class's or task's `name`), found when the config is validated."""
        return self._env_name

    @property
    def key(self) -> str:
        """The benchmark's name in records, batch paths, metrics and reports: its label, else the environment's
        own name (`gsm8k`; a class's or task's `name` when the config gives a reference)."""
        return self.label or self._env_name or self.name or ""

    @field_validator("thinking", mode="before")
    @classmethod
    def _yaml_on_off(cls, value: Any) -> Any:
        """YAML reads a bare `on` / `off` as a boolean: take it as meant."""
        return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value

    @field_validator("extra_body")
    @classmethod
    def _extra_body(cls, value: dict[str, JsonValue]) -> dict[str, JsonValue]:
        return check_extra_body(value, own=True)

    def request_fields(self, switch: str) -> dict[str, JsonValue]:
        """What this benchmark adds to each request: its extra_body, the template's keywords with the thinking
        switch (`switch`: the template's keyword), the thinking budget."""
        fields: dict[str, JsonValue] = dict(self.extra_body)
        kwargs: dict[str, JsonValue] = dict(self.chat_template_kwargs)
        if self.thinking != "default":
            if switch in kwargs and kwargs[switch] != (self.thinking == "on"):
                raise ValueError(f"chat_template_kwargs.{switch} contradicts thinking: {self.thinking}")
            kwargs[switch] = self.thinking == "on"
        if kwargs:
            fields["chat_template_kwargs"] = kwargs
        if self.thinking_budget is not None:
            fields["thinking_token_budget"] = self.thinking_budget
        return fields

    @field_validator("dataset")
    @classmethod
    def _dataset_path(cls, value: str | None) -> str | None:
        return absolute_path(value) if value else value

    @field_validator("label")
    @classmethod
    def _label_format(cls, value: str | None) -> str | None:
        if value is not None and not LABEL_RE.match(value):
            raise ValueError(f"label {value!r}: use letters, digits, '_', '.' or '-' (up to 64), e.g. gsm8k_8shot")
        return value

    @field_validator("name")
    @classmethod
    def _known_env(cls, value: str | None) -> str | None:
        """A file reference's path is made absolute here, where it enters (see absolute_path), and the environment
        is loaded: an unknown name, a module this host lacks or a broken file fails with the config."""
        from envs.registry import env_class, is_file_reference

        if value is None:
            return value
        if is_file_reference(value):
            if value.endswith((".yaml", ".yml")):
                value = absolute_path(value)
            else:
                file, _, cls_name = value.rpartition(":")
                value = f"{absolute_path(file)}:{cls_name}"
        env_class(value)
        return value

    @field_validator("task")
    @classmethod
    def _known_task(cls, value: str | dict[str, JsonValue] | None) -> str | dict[str, JsonValue] | None:
        from envs.registry import env_class

        if value is None:
            return value
        value = absolute_path(value) if isinstance(value, str) else value
        env_class(value, where="task")
        return value

    @field_validator("options")
    @classmethod
    def _known_options(cls, value: dict[str, JsonValue], info: ValidationInfo) -> dict[str, JsonValue]:
        """Options the environment does not take, or values it rejects, fail here (naming
        benchmarks.N.options), not at planning time."""
        from envs.registry import get_env

        ref = info.data.get("task") or info.data.get("name")
        if ref is None:  # the environment itself was invalid (that error is reported) or not given
            return value
        try:
            get_env(ref, **value)
        except (TypeError, ValueError) as exc:
            raise ValueError(" ".join(str(exc).split())) from None
        return value

    @model_validator(mode="before")
    @classmethod
    def _one_env(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fields = cast(dict[str, Any], data)
        if (fields.get("name") is None) == (fields.get("task") is None):
            raise ValueError("set one of `name` (a registered name or a reference to a class or task file) and `task`")
        return fields

    @model_validator(mode="after")
    def _env_name_of(self) -> BenchmarkConfig:
        from envs.registry import env_class

        self._env_name = env_class(self.env_ref, where="task").name
        return self


def benchmark_setting(b: BenchmarkConfig) -> tuple[str, ...]:
    """What makes a benchmark's rollouts: two entries alike in this would collect the same batches."""
    return (
        json.dumps(b.env_ref, sort_keys=True, default=str),
        str(b.dataset), str(b.limit), str(b.max_tokens), json.dumps(b.options, sort_keys=True, default=str),
        json.dumps(b.request_fields("enable_thinking"), sort_keys=True),
    )  # fmt: skip
