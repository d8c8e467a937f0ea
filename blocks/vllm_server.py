"""The `evalflow-vllm-server` block: a named set of vLLM server settings (a GPU profile, a CPU profile,
an external endpoint with its API key), shared by deployments and overridable per run."""

from __future__ import annotations

from prefect.blocks.core import Block
from pydantic import Field, field_validator

from core.config import ServerConfig


class VLLMServerBlock(Block):
    """vLLM server settings: how the eval flow starts its server, or which endpoint it calls."""

    _block_type_name = "evalflow vLLM server"
    _block_type_slug = "evalflow-vllm-server"
    _description = "vLLM server settings for evalflow runs (EvalConfig.server); the API key stays secret."

    settings: ServerConfig = Field(default_factory=ServerConfig, description="the EvalConfig.server fields")

    @field_validator("settings")
    @classmethod
    def _no_nested_block(cls, value: ServerConfig) -> ServerConfig:
        if value.block:
            raise ValueError("a server block's settings cannot name another block")
        return value
