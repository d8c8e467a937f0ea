"""Prefect blocks: the vLLM server settings and the run store, saved by name on the Prefect server.

Register the types with `prefect block register -m blocks` (or `make blocks`, which also saves the
defaults from `blocks/defaults.yaml`); deployments name a block in `server.block` / `store.block`.
"""

from blocks.run_store import RunStoreBlock
from blocks.vllm_server import VLLMServerBlock
from errors.module_run import refuse_module_run

__all__ = ["RunStoreBlock", "VLLMServerBlock"]

refuse_module_run(__name__)  # `python -m blocks.X` runs nothing: say what to run instead
