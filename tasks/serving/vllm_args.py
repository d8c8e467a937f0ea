"""vLLM's own argument parser over server command lines, without starting a server.

The flags evalflow builds (tasks/serving/server.py) and the ones server blocks add (`extra_args`) meet
vLLM only when a server starts: a flag renamed or removed by a vLLM upgrade would fail a nightly run on
a GPU node after minutes of queueing. `check_server_args` runs, in the runtime's Python, exactly what
`python -m vllm.entrypoints.openai.api_server` runs before it loads a model: vLLM's serve parser
(`make_arg_parser` on a `FlexibleArgumentParser`, pydantic validation of config flags included) and
`validate_parsed_serve_args`, plus the tool-call parser's name against vLLM's registry (vLLM checks it
only when the server starts). The CPU and GPU packages share this code, so GPU command lines are checked
on a CPU machine too. Many command lines are checked in one subprocess (importing vLLM takes seconds).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from errors import EvalflowError

# Runs in the runtime's interpreter: stdin a JSON list of argvs, stdout a JSON list of None or the error.
_CHECK = r"""
import contextlib, io, json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
try:  # vLLM 0.33 (the GPU runtime's)
    from vllm.entrypoints.common.cli_args import make_arg_parser, validate_parsed_serve_args
except ImportError:
    try:  # vLLM 0.32 (the CPU runtime's)
        from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    except ImportError:  # vLLM before the launchers package
        from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.tool_parsers import ToolParserManager
from vllm.reasoning import ReasoningParserManager

out = []
for argv in json.load(sys.stdin):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = make_arg_parser(FlexibleArgumentParser(prog="api_server")).parse_args(argv)
        validate_parsed_serve_args(args)
        if args.tool_call_parser:
            ToolParserManager.get_tool_parser(args.tool_call_parser)
        if getattr(args, "reasoning_parser", None):
            ReasoningParserManager.get_reasoning_parser(args.reasoning_parser)
        out.append(None)
    except SystemExit:  # argparse: "prog: error: ...", pydantic's details on the lines after it
        lines = [line.strip() for line in err.getvalue().splitlines() if line.strip()]
        start = next((i for i, line in enumerate(lines) if ": error:" in line), max(len(lines) - 1, 0))
        why = " ".join(line for line in lines[start:] if "errors.pydantic.dev" not in line)
        out.append(why[:600] or "argument error")
    except Exception as exc:
        out.append(" ".join(f"{type(exc).__name__}: {exc}".split()))
print("EVALFLOW-ARGS " + json.dumps(out))
"""


class ServerArgsError(EvalflowError, ValueError):
    """vLLM's parser rejects a server command line."""

    kind = "server"


def vllm_argv(command: Sequence[str]) -> list[str]:
    """The arguments after `-m vllm.entrypoints.openai.api_server` (or `vllm serve`) of a server command."""
    command = list(command)
    for marker in ("vllm.entrypoints.openai.api_server", "serve"):
        if marker in command:
            return command[command.index(marker) + 1 :]
    raise ValueError(f"not a vLLM server command: {command[:4]}")


def parse_results(
    python: Path, argvs: Sequence[Sequence[str]], env: Mapping[str, str] | None = None
) -> list[str | None]:
    """vLLM's verdict on each argv: None when it parses and validates, else its error line."""
    proc = subprocess.run(
        [str(python), "-c", _CHECK],
        input=json.dumps([list(a) for a in argvs]),
        capture_output=True,
        text=True,
        env=dict(env) if env is not None else None,
        timeout=300,
        check=False,
    )
    marked = [line for line in proc.stdout.splitlines() if line.startswith("EVALFLOW-ARGS ")]
    if proc.returncode != 0 or not marked:
        tail = " ".join(proc.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"could not run vLLM's argument parser with {python}: {tail}")
    return json.loads(marked[-1].removeprefix("EVALFLOW-ARGS "))


def check_server_args(
    python: Path, commands: Mapping[str, Sequence[str]], env: Mapping[str, str] | None = None
) -> None:
    """Raise ServerArgsError naming every command (by its label) that vLLM's parser rejects, and why."""
    labels = list(commands)
    verdicts = parse_results(python, [vllm_argv(commands[label]) for label in labels], env)
    bad = [f"{label}: {why}" for label, why in zip(labels, verdicts, strict=True) if why]
    if bad:
        raise ServerArgsError("vLLM rejects the server arguments of " + "; ".join(bad))
