"""Few-shot question answering: one question per row, shipped worked examples, chat or lm-eval's completion prompt.

GSM8K and MATH share this shape; each subclass names its fields, instruction, lm-eval layout and few-shot file,
and keeps its own row checks, reference and scoring.
"""

from __future__ import annotations

import hashlib
from abc import abstractmethod
from pathlib import Path
from typing import Any, ClassVar, Literal

from envs.base import SingleTurnEnv
from envs.datasets import read_examples

MODES = ("chat", "completion")


class FewShotQAEnv(SingleTurnEnv):
    """Options: `fewshot` (how many of the shipped worked examples, 0 to all of them), `system_prompt`, and
    `mode`: "chat" (default; each example a user turn, the question followed by the instruction, and an
    assistant turn with its solution) or "completion" (lm-eval's plain-text prompt for the completions API,
    for base models: each example `completion_template` + target delimiter + solution, examples joined by the
    few-shot delimiter, generation stopped at `completion_stop`). A system prompt, if any, comes first: as a
    system turn in chat, as the first block (stripped) of the plain prompt.
    """

    # The shipped JSONL of worked examples, each checked with `check_row`.
    fewshot_path: ClassVar[Path]
    # The row's question field (also the completion template's slot and its key in `prompt_templates`), and
    # an example's worked-solution field.
    question_field: ClassVar[str]
    target_field: ClassVar[str]
    # Follows the question in every chat user turn.
    instruction: ClassVar[str]
    # lm-eval's `doc_to_text`, with a `{<question_field>}` slot; its delimiters and stop sequences.
    completion_template: ClassVar[str]
    completion_target_delimiter: ClassVar[str] = " "
    completion_fewshot_delimiter: ClassVar[str] = "\n\n"
    completion_stop: ClassVar[tuple[str, ...]]
    # Whether example solutions (both modes) and completion-mode questions are stripped of surrounding
    # whitespace; when False they are inserted as they are. A chat turn's question is stripped either way.
    strip_text: ClassVar[bool] = True
    # Whether `mode` enters the options (so the fingerprint) also at its default, "chat".
    default_mode_in_options: ClassVar[bool] = True
    # Whether `prompt_templates` holds the system prompt (it is in the options either way).
    system_prompt_in_templates: ClassVar[bool] = True

    def __init__(
        self, fewshot: int = 0, system_prompt: str | None = None, mode: Literal["chat", "completion"] = "chat"
    ) -> None:
        extra = {"mode": mode} if mode != "chat" or self.default_mode_in_options else {}
        super().__init__(fewshot=fewshot, system_prompt=system_prompt, **extra)
        if mode not in MODES:
            raise ValueError(f"{self.name}: mode must be one of {', '.join(MODES)}, got {mode!r}")
        available = self.available_examples()
        if isinstance(fewshot, bool) or not isinstance(fewshot, int) or not 0 <= fewshot <= len(available):
            raise ValueError(f"{self.name}: fewshot must be an integer from 0 to {len(available)}, got {fewshot!r}")
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise ValueError(f"{self.name}: system_prompt must be a string or None, got {system_prompt!r}")
        self.fewshot_rows = available[:fewshot]
        self.system_prompt = system_prompt
        self.mode = mode

    @staticmethod
    @abstractmethod
    def check_row(row: dict[str, Any], where: str) -> None:
        """Row checks (raise DatasetError), also applied to the shipped few-shot file."""

    @classmethod
    def available_examples(cls) -> tuple[dict[str, Any], ...]:
        """All shipped worked examples, checked, read once per process."""
        return read_examples(cls.fewshot_path, cls.check_row)

    def validate_row(self, row: dict[str, Any], where: str) -> None:
        self.check_row(row, where)

    def prompt_id(self, row: dict[str, Any]) -> str:
        if "id" in row:
            return row["id"]
        # The original datasets have no ids; a content hash keeps cache keys stable across copies.
        return f"{self.name}-" + hashlib.sha256(row[self.question_field].strip().encode()).hexdigest()[:16]

    def prompt_templates(self) -> dict[str, Any]:
        fewshot = [[ex[self.question_field], ex[self.target_field]] for ex in self.fewshot_rows]
        system = {"system_prompt": self.system_prompt} if self.system_prompt_in_templates else {}
        if self.mode == "completion":
            return {
                "mode": "completion",
                self.question_field: self.completion_template,
                "target_delimiter": self.completion_target_delimiter,
                "fewshot_delimiter": self.completion_fewshot_delimiter,
                "fewshot": fewshot,
                **system,
            }
        return {"instruction": self.instruction, **system, "fewshot": fewshot}

    def _user_turn(self, question: str) -> str:
        return f"{question.strip()}\n\n{self.instruction}"

    def _text(self, text: str) -> str:
        return text.strip() if self.strip_text else text

    def messages(self, row: dict[str, Any]) -> list[dict[str, str]]:
        if self.mode == "completion":
            raise ValueError(
                f"{self.name}: mode 'completion' sends a plain-text prompt (see prompt()), not chat messages"
            )
        msgs = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        for ex in self.fewshot_rows:
            msgs.append({"role": "user", "content": self._user_turn(ex[self.question_field])})
            msgs.append({"role": "assistant", "content": self._text(ex[self.target_field])})
        return [*msgs, {"role": "user", "content": self._user_turn(row[self.question_field])}]

    def _completion_question(self, question: str) -> str:
        return self.completion_template.format_map({self.question_field: self._text(question)})

    def prompt(self, row: dict[str, Any]) -> str | None:
        """lm-eval's plain-text prompt in completion mode (a system prompt, if any, first); else None."""
        if self.mode != "completion":
            return None
        blocks = [
            self._completion_question(ex[self.question_field])
            + self.completion_target_delimiter
            + self._text(ex[self.target_field])
            for ex in self.fewshot_rows
        ]
        blocks.append(self._completion_question(row[self.question_field]))
        if self.system_prompt:
            blocks.insert(0, self.system_prompt.strip())
        return self.completion_fewshot_delimiter.join(blocks)

    def stop(self) -> list[str] | None:
        return list(self.completion_stop) if self.mode == "completion" else None
