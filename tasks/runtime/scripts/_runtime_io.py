"""How the converter scripts talk to the orchestrator, and how they die with it.

Imported by the scripts that run inside the vLLM runtime (gguf_to_hf, dcp_to_hf, hf_check, hf_to_dcp,
dcp_check, list_architectures, count_prompt_tokens) as a sibling module; it imports nothing from evalflow,
and neither do they: the standard library, the runtime's packages and their siblings only. Each declares
its result as a TypedDict, mirrored by the model of the same name in results.py that evalflow reads it
with. Protocol on stdout: `[convert] ...` lines are progress (logged by the orchestrator), one
`EVALFLOW-RESULT {json}` line is the result, one `EVALFLOW-ERROR "json string"` line is a user-facing
failure (exit code 2).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from collections.abc import Callable, Mapping

# Tokenizer files (what AutoTokenizer.save_pretrained writes): copied next to converted weights, and
# downloaded/hashed with a remote checkpoint's tokenizer folder
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "spiece.model",
    "chat_template.jinja",
    "chat_template.json",
)

RESULT_PREFIX = "EVALFLOW-RESULT "
ERROR_PREFIX = "EVALFLOW-ERROR "
PR_SET_PDEATHSIG = 1


class Failure(Exception):
    """A problem with the checkpoint that the user must fix; reported without a traceback."""


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL us when the orchestrator dies, so a killed run leaves no converter
    writing into a temporary folder behind it (Linux; elsewhere a no-op)."""
    parent = os.environ.get("EVALFLOW_PARENT_PID")
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if parent and os.getppid() != int(parent):  # the parent died before prctl took effect
        os._exit(1)


def progress(message: str) -> None:
    print(f"[convert] {message}", flush=True)


def run_main(main: Callable[[list[str]], Mapping[str, object]]) -> None:
    """Run `main(argv)`, print its result or a Failure in the protocol above."""
    die_with_parent()
    try:
        result = main(sys.argv[1:])
    except Failure as exc:
        print(ERROR_PREFIX + json.dumps(str(exc)), flush=True)
        raise SystemExit(2) from None
    print(RESULT_PREFIX + json.dumps(result), flush=True)
