"""IFEval: does the response follow the prompt's verifiable instructions (length, keywords, format, case, ...)?

Scores are IFEval's prompt-level and instruction-level accuracy, strict and loose, under lm-eval's names and
by lm-evaluation-harness 0.4.13's definitions (envs.ifeval_checks re-expresses its checks, envs.ifeval_text
counts with the nltk it uses), so they are lm-eval's verdicts wherever lm-eval's are not random.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from envs.base import DatasetError, MetricSpec, Score, SingleTurnEnv
from envs.ifeval_checks import evaluate, kwargs_problem

MODES = ("chat", "completion")
# The response, as stored in `parsed_answer` (a blank response is "no answer"), is cut to this length.
MAX_PARSED_CHARS = 4000
PROMPT_STRICT = "prompt_level_strict_acc"
PROMPT_LOOSE = "prompt_level_loose_acc"
INST_STRICT = "inst_level_strict_acc"
INST_LOOSE = "inst_level_loose_acc"
LOOSE_RULE = "on any of 8 variants: as is, without the first line, the last line or both, each also without '*'"


class IFEvalEnv(SingleTurnEnv):
    """Rows in google/IFEval's schema: `{"key": int, "prompt": str, "instruction_id_list": [id],
    "kwargs": [dict]}`, kwargs aligned with the ids (None-valued kwargs count as absent, as the HF dataset
    stores them, and so do other falsy ones, as in lm-eval), so `hf-dataset:google/IFEval?split=train` loads
    as is.

    Options: `mode` "chat" (the prompt as one user turn) or "completion" (the raw prompt to the completions
    API, as lm-eval runs IFEval without a chat template), and `system_prompt` (a system turn; in completion
    mode a first paragraph). No stop sequences: lm-eval's ifeval stops at end of text only.

    Reward and success are prompt-level strict accuracy: the response follows every instruction as is.

    Scoring equals lm-eval 0.4.13's `process_results` (tests/fidelity/ifeval_agreement.py compares the two)
    except where lm-eval's own verdict is random, which evalflow pins: (1) kwargs: lm-eval drops falsy values
    (None, 0, "", []) and draws a random value for a missing one, a negative count or an `nth_paragraph`
    past `num_paragraphs`; evalflow drops the same values and rejects such rows in `validate_row`, as it
    rejects what lm-eval fails on (unknown kwargs, unknown language codes, patterns that do not compile).
    (2) A `letter` that is no ASCII letter (google/IFEval keys 1122 "#" and 1129 "!"): lm-eval counts a
    random ASCII letter, drawn anew for the strict and the loose check; evalflow counts the character given.
    (3) langdetect: lm-eval leaves it unseeded, so on a text it finds ambiguous (short, mixed languages) its
    language verdicts are random; evalflow seeds it 0, and agrees with lm-eval seeded the same way.
    """

    name: ClassVar[str] = "ifeval"
    version: ClassVar[str] = "2"  # 2: lm-eval 0.4.13's checks, nltk's counts, its kwargs handling
    default_dataset: ClassVar[str] = "data/ifeval/test.jsonl"
    majority_vote: ClassVar[bool] = False
    lm_eval_metrics: ClassVar[tuple[tuple[str, str], ...]] = tuple(
        (f"{key},none", key) for key in (PROMPT_STRICT, INST_STRICT, PROMPT_LOOSE, INST_LOOSE)
    )
    metrics: ClassVar[tuple[MetricSpec, ...]] = (
        MetricSpec(
            PROMPT_STRICT,
            PROMPT_STRICT,
            "rate",
            headline=True,
            description="IFEval prompt-level strict accuracy: the response as is follows every instruction",
        ),
        MetricSpec(
            PROMPT_LOOSE,
            PROMPT_LOOSE,
            "rate",
            headline=True,
            description=f"IFEval prompt-level loose accuracy: every instruction is followed {LOOSE_RULE}",
        ),
        MetricSpec(
            INST_STRICT,
            INST_STRICT,
            "items",
            description="IFEval instruction-level strict accuracy: the share of all prompts' instructions that "
            "the responses as is follow (a micro average over instructions)",
        ),
        MetricSpec(
            INST_LOOSE,
            INST_LOOSE,
            "items",
            description=f"IFEval instruction-level loose accuracy: the share of all instructions followed {LOOSE_RULE}",
        ),
    )

    def __init__(self, mode: Literal["chat", "completion"] = "chat", system_prompt: str | None = None) -> None:
        super().__init__(mode=mode, system_prompt=system_prompt)
        if mode not in MODES:
            raise ValueError(f"ifeval: mode must be one of {', '.join(MODES)}, got {mode!r}")
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise ValueError(f"ifeval: system_prompt must be a string or None, got {system_prompt!r}")
        self.mode = mode
        self.system_prompt = system_prompt

    def validate_row(self, row: dict[str, Any], where: str) -> None:
        key = row.get("key")
        if isinstance(key, bool) or not isinstance(key, int):
            raise DatasetError(f"{where}: 'key' must be an integer, got {key!r}")
        prompt = row.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise DatasetError(f"{where}: missing or empty 'prompt' (a non-empty string)")
        ids, kwargs = row.get("instruction_id_list"), row.get("kwargs")
        if not isinstance(ids, list) or not ids:
            raise DatasetError(f"{where}: 'instruction_id_list' must be a non-empty list of instruction ids")
        if not isinstance(kwargs, list) or len(kwargs) != len(ids):
            found = f"{len(kwargs)} entries" if isinstance(kwargs, list) else repr(kwargs)
            raise DatasetError(
                f"{where}: 'kwargs' must be a list with one object per instruction ({len(ids)}), got {found}"
            )
        for i, (instruction_id, kw) in enumerate(zip(ids, kwargs, strict=True)):
            problem = kwargs_problem(instruction_id, kw) if isinstance(instruction_id, str) else "not a string"
            if problem:
                raise DatasetError(f"{where}: instruction {i} ('instruction_id_list'/'kwargs'[{i}]): {problem}")

    def prompt_id(self, row: dict[str, Any]) -> str:
        return f"ifeval-{row['key']}"

    def reference(self, row: dict[str, Any]) -> str:
        """No reference answer: the instructions to follow stand in for it."""
        return ", ".join(row["instruction_id_list"])

    def prompt_templates(self) -> dict[str, Any]:
        return {"mode": self.mode, "user": "{prompt}"}

    def messages(self, row: dict[str, Any]) -> list[dict[str, str]]:
        if self.mode == "completion":
            raise ValueError("ifeval: mode 'completion' sends a plain-text prompt (see prompt()), not chat messages")
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return [*system, {"role": "user", "content": row["prompt"]}]

    def prompt(self, row: dict[str, Any]) -> str | None:
        """The row's prompt verbatim in completion mode (after the system prompt and a blank line, if any)."""
        if self.mode != "completion":
            return None
        return f"{self.system_prompt.strip()}\n\n{row['prompt']}" if self.system_prompt else row["prompt"]

    def stop(self) -> list[str] | None:
        return None

    def score(self, row: dict[str, Any], completion: str) -> Score:
        ids = list(row["instruction_id_list"])
        strict, loose = evaluate(ids, row["kwargs"], completion)
        info = {
            PROMPT_STRICT: all(strict),
            PROMPT_LOOSE: all(loose),
            INST_STRICT: strict,
            INST_LOOSE: loose,
            "instruction_ids": ids,
            "failed_strict": [i for i, ok in zip(ids, strict, strict=True) if not ok],
        }
        success = all(strict)
        parsed = completion.strip()[:MAX_PARSED_CHARS] or None
        return Score(reward=1.0 if success else 0.0, success=success, parsed_answer=parsed, info=info)
