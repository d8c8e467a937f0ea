"""Scripts that run inside the vLLM runtime's own interpreter (torch, transformers, vllm), never in evalflow's.

Each file here runs as `python <file> ...` with the runtime's python (tasks.checkpoints.runner.run_script):
the converters (gguf_to_hf, dcp_to_hf, hf_to_dcp), the checks (hf_check, dcp_check) and the listings
(list_architectures, count_prompt_tokens). The contract, checked by `lint-imports`: they import the standard
library, the runtime's packages and each other (as bare sibling modules, `from _runtime_io import ...`), and
nothing of evalflow's orchestrator side, which the runtime does not have. Results cross back as one JSON line
(`_runtime_io`), read by the pydantic models in tasks.checkpoints.results.

This `__init__` is read only by the orchestrator (for the folder's path); the runtime never imports it.
"""

from pathlib import Path

SCRIPTS_DIR = Path(__file__).resolve().parent
