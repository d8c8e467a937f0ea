"""Apply the blocks a config names: a block's values are the defaults, fields set in the run win."""

from __future__ import annotations

from typing import Any

from core.config import EvalConfig, ServerConfig, StoreConfig


class BlockNotFound(ValueError):
    """A config names a block that is not saved on the Prefect server it talks to."""


def _load(block_cls: Any, name: str, field: str) -> Any:
    try:
        return block_cls.load(name, _sync=True)
    except ValueError as exc:  # Prefect: "Unable to find block document named ..."
        raise BlockNotFound(
            f"{field}: no saved {block_cls.get_block_type_slug()} block named {name!r}; save it with "
            f"`make blocks` (defaults in blocks/defaults.yaml) or in the Prefect UI (Blocks), "
            f"or remove {field} to use the settings in the config ({exc})"
        ) from exc


def _explicit(model: Any) -> dict[str, Any]:
    """The fields a run set itself (YAML, UI form, dotted override), not defaults."""
    return model.model_dump(exclude_unset=True)


def resolve_blocks(config: EvalConfig) -> EvalConfig:
    """A copy of `config` with `server.block` / `store.block` applied; a no-op when none is named.

    Raises BlockNotFound (naming the field) before anything is started.
    """
    if not config.server.block and not config.store.block:
        return config
    from blocks.run_store import RunStoreBlock
    from blocks.vllm_server import VLLMServerBlock

    resolved = config.model_copy(deep=True)
    if config.server.block:
        block = _load(VLLMServerBlock, config.server.block, "server.block")
        merged = {**block.settings.model_dump(exclude={"block"}), **_explicit(config.server)}
        resolved.server = ServerConfig.model_validate(merged)
    if config.store.block:
        block = _load(RunStoreBlock, config.store.block, "store.block")
        base = {"url": block.url, "storage_options": block.storage_options}
        resolved.store = StoreConfig.model_validate({**base, **_explicit(config.store)})
        resolved.store._credentials = block.credentials()
    return resolved
