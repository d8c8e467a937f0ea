"""What the scripts that run inside the vLLM runtime print as their result, read on evalflow's side.

The scripts (hf_check, gguf_to_hf, dcp_to_hf, dcp_check, list_architectures, count_prompt_tokens,
hf_to_dcp) run in the runtime's own Python and cannot import evalflow: each declares its result as a
TypedDict of the same name (stdlib only). `runner.run_script` validates the printed JSON against the
model named here, so the two must be kept in step; extra="forbid" makes a field one side adds and the
other does not know fail the first run of the script, not pass silently. Field order is the scripts'.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, with_config
from typing_extensions import TypedDict  # pydantic needs typing_extensions' TypedDict before Python 3.12


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


_STRICT = ConfigDict(extra="forbid")


class FolderValidation(_Result):
    """hf_check.py: a full validation of an HF folder (the architecture instantiated on `meta`)."""

    architecture: str
    tensors: int
    tied: list[str]
    parameters: int
    safetensors_dtypes: list[str]
    weight_files: list[str]
    chat_template: bool


# a TypedDict, not a model: a model's field may not be called `validate`
@with_config(_STRICT)
class GgufSeconds(TypedDict):
    convert: float
    validate: float


class GgufConversion(FolderValidation):
    """gguf_to_hf.py: the converted folder's validation and what the conversion took."""

    dtype: str
    source_bytes: int
    files: list[str]
    seconds: GgufSeconds
    pid: int


@with_config(_STRICT)
class DcpSeconds(TypedDict):
    check: float
    tensors: float
    validate: float


class DcpConversion(FolderValidation):
    """dcp_to_hf.py: the converted folder's validation and what the conversion found and took."""

    dtype: str
    source_bytes: int
    source_dtypes: list[str]
    key_prefix_stripped: bool
    dropped_tied: list[str]
    ignored_non_tensors: int
    tokenizer_files: list[str]
    files: list[str]
    seconds: DcpSeconds
    pid: int


Conversion = GgufConversion | DcpConversion


class DcpJob(_Result):
    """The job file dcp_to_hf.py reads (written by jobs.py)."""

    weights_dir: str
    config_dir: str
    tokenizer_dir: str
    out_dir: str
    dtype: str
    max_shard_bytes: int


class DcpCheck(_Result):
    """dcp_check.py: a DCP checkpoint's `.metadata` read against its shard files."""

    bytes: int
    tensors: int


class RuntimeLists(_Result):
    """list_architectures.py: what the runtime can load (kept beside it as evalflow-architectures.json)."""

    vllm: str
    transformers: str
    vllm_architectures: list[str]
    model_types: list[str]
    gguf_architectures: list[str]


class PromptTokenCounts(_Result):
    """count_prompt_tokens.py: each request's prompt tokens, in the job's order."""

    counts: list[int]


class PromptRequest(TypedDict, total=False):
    """count_prompt_tokens.py's Request: a plain prompt, or chat messages with their tools."""

    prompt: str
    messages: list[dict[str, Any]]  # an environment's messages and tools (envs.base), as the request carries them
    tools: list[dict[str, Any]] | None


class DcpExport(_Result):
    """hf_to_dcp.py: the DCP checkpoint written from an HF folder (tests and benchmarks)."""

    weights_dir: str
    tensors: int
    bytes: int
    files: list[str]


class NormDigests(_Result):
    """norm_digests.py: the sha256 of each normalisation weight of an HF folder, as vLLM's weight checker hashes."""

    digests: dict[str, str]
