"""Is a checkpoint's architecture one the runtime can convert and serve? Answered before anything is
converted (the dry run included), from the runtime's own lists: vLLM's model registry, transformers'
config types and its GGUF architectures. Read once per runtime (about 5 s, vLLM's registry; done when the
runtime is created) and kept beside it; a runtime is never changed once complete, so the lists stay true for it."""

from __future__ import annotations

import json
import os
from functools import cache
from typing import TypedDict

from filelock import FileLock

from tasks.checkpoints.errors import CheckpointError
from tasks.checkpoints.results import RuntimeLists
from tasks.checkpoints.runner import run_script
from tasks.runtime.venv import Runtime

# transformers' renames of GGUF architecture names (modeling_gguf_pytorch_utils.load_gguf_checkpoint)
GGUF_RENAMES = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss", "minimax-m2": "minimax_m2"}


class HfConfig(TypedDict, total=False):
    """The keys of an HF config.json that say what it is (the file holds many more)."""

    architectures: list[str]
    model_type: str


@cache
def _lists(runtime: Runtime) -> RuntimeLists:
    file = runtime.architectures_file  # written when the runtime was created (older runtimes: here, once)
    with FileLock(str(runtime.path / f".{file.name}.lock")):
        if not file.is_file():
            found = run_script(
                runtime, "list_architectures.py", [], "listing the runtime's architectures", RuntimeLists
            )
            tmp = file.with_suffix(f".tmp-{os.getpid()}")
            tmp.write_text(json.dumps(found.model_dump(), indent=1))
            os.replace(tmp, file)
    return RuntimeLists.model_validate_json(file.read_text())


def runtime_lists(runtime: Runtime) -> RuntimeLists | None:
    """The runtime's lists, or None while it is not installed (a dry run before the first run)."""
    return _lists(runtime) if runtime.is_complete() else None


def check_gguf_architecture(source: str, architecture: str | None, runtime: Runtime) -> None:
    lists = runtime_lists(runtime)
    if lists is None:
        return
    if not architecture:
        raise CheckpointError(f"model.source {source!r}: the GGUF names no general.architecture")
    known = set(lists.gguf_architectures)
    name = GGUF_RENAMES.get(architecture, "t5" if "t5" in architecture else architecture)
    if architecture not in known and name not in known:
        raise CheckpointError(
            f"model.source {source!r}: GGUF architecture {architecture!r} is unknown to this runtime's transformers "
            f"{lists.transformers}, which converts GGUF files (it reads {', '.join(sorted(known))}); convert it "
            "with llama.cpp's tools to an HF folder, or use the model's HF release"
        )


def check_hf_architecture(source: str, config: HfConfig, runtime: Runtime) -> None:
    """vLLM serves what its registry names, and other transformers models through its Transformers backend."""
    lists = runtime_lists(runtime)
    if lists is None:
        return
    architectures = config.get("architectures") or []
    model_type = config.get("model_type")
    if any(a in lists.vllm_architectures for a in architectures) or model_type in lists.model_types:
        return
    named = ", ".join(architectures) or "none"
    raise CheckpointError(
        f"model.source {source!r}: architecture {named} (model_type {model_type!r}) is unknown to this runtime's "
        f"vLLM {lists.vllm} and transformers {lists.transformers}; check config.json, or use a runtime "
        "that supports it"
    )
