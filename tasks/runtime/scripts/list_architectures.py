"""What this vLLM runtime can load: run once per runtime (`python list_architectures.py`), its result
cached beside the runtime by `architectures.py`. vLLM's registry is read without importing its models.

The runtime's creation runs it as its import check: `--write FILE` also writes the result to FILE (where
`architectures.py` then finds it), `--import MODULE` imports more (the server's entry point), so the one
process that imports vLLM and transformers for the check also lists them.
"""

from __future__ import annotations

import importlib
import json
import os
from typing import TypedDict

from _runtime_io import run_main  # sibling module: this file runs as a script


class RuntimeLists(TypedDict):
    """The result (evalflow reads it as results.RuntimeLists: keep the two in step)."""

    vllm: str
    transformers: str
    vllm_architectures: list[str]
    model_types: list[str]
    gguf_architectures: list[str]


def main(argv: list[str]) -> RuntimeLists:
    options = dict(zip(argv[::2], argv[1::2], strict=True))
    if options.get("--import"):
        importlib.import_module(options["--import"])
    lists = read_lists()
    if options.get("--write"):
        tmp = f"{options['--write']}.tmp-{os.getpid()}"
        with open(tmp, "w") as fh:
            json.dump(lists, fh, indent=1)
        os.replace(tmp, options["--write"])
    return lists


def read_lists() -> RuntimeLists:
    import transformers
    import vllm
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from vllm.model_executor.models.registry import ModelRegistry

    return RuntimeLists(
        vllm=vllm.__version__,
        transformers=transformers.__version__,
        vllm_architectures=sorted(ModelRegistry.get_supported_archs()),
        model_types=sorted(CONFIG_MAPPING_NAMES),
        gguf_architectures=sorted(set(GGUF_SUPPORTED_ARCHITECTURES) - {"general", "tokenizer"}),
    )


if __name__ == "__main__":
    run_main(main)
