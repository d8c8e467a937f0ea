"""Apply the Prefect blocks a config names, and open its run store: a block's values are the
defaults, fields set in the run win.

Blocks are loaded by their type slug; Prefect imports their classes through the package's
`prefect.collections` entry point, so this layer never imports `blocks/` (which sits on top).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from prefect.blocks.core import Block

from core.config import EvalConfig, ServerConfig, StoreConfig
from core.store import Store
from errors import ConfigError

SERVER_BLOCK = "evalflow-vllm-server"
STORE_BLOCK = "evalflow-run-store"


class BlockNotFound(ConfigError):
    """A config names a block that is not saved on the Prefect server it talks to."""


@dataclass(frozen=True)
class Resolved:
    """A config with its blocks applied, and the store it writes to (credentials inside the Store only)."""

    config: EvalConfig
    store: Store


def _load(slug: str, name: str, field: str) -> Any:
    try:
        # Prefect's async_dispatch takes `_sync` (the sync version, even inside an event loop) without declaring it
        load = cast("Callable[..., Block]", Block.load)
        return load(f"{slug}/{name}", _sync=True)
    except ValueError as exc:  # Prefect: "Unable to find block document named ..."
        raise BlockNotFound(
            f"{field}: no saved {slug} block named {name!r}; save it with `make blocks` (defaults in "
            f"blocks/defaults.yaml) or in the Prefect UI (Blocks), or remove {field} to use the settings "
            f"in the config ({exc})"
        ) from exc


def _explicit(model: Any) -> dict[str, Any]:
    """The fields a run set itself (YAML, UI form, dotted override), not defaults."""
    return model.model_dump(exclude_unset=True)


def open_store(config: StoreConfig, credentials: dict[str, Any] | None = None) -> Store:
    return Store(config.url, config.storage_options, credentials)


def resolve(config: EvalConfig) -> Resolved:
    """`config` with `server.block` / `store.block` applied (a no-op when none is named), and its store.

    Raises BlockNotFound (naming the field) before anything is started.
    """
    judge_block = config.judge.server.block if config.judge is not None else None
    if not config.server.block and not config.store.block and not judge_block:
        return Resolved(config, open_store(config.store))
    resolved = config.model_copy(deep=True)
    credentials: dict[str, Any] = {}
    if config.server.block:
        block = _load(SERVER_BLOCK, config.server.block, "server.block")
        merged = {**block.settings.model_dump(exclude={"block"}), **_explicit(config.server)}
        resolved.server = ServerConfig.model_validate(merged)
    if config.judge is not None and resolved.judge is not None and judge_block:  # the judge's server, alike
        block = _load(SERVER_BLOCK, judge_block, "judge.server.block")
        merged = {**block.settings.model_dump(exclude={"block"}), **_explicit(config.judge.server)}
        resolved.judge.server = ServerConfig.model_validate(merged)
    if config.store.block:
        block = _load(STORE_BLOCK, config.store.block, "store.block")
        base = {"url": block.url, "storage_options": block.storage_options}
        resolved.store = StoreConfig.model_validate({**base, **_explicit(config.store)})
        credentials = block.credentials()
    return Resolved(resolved, open_store(resolved.store, credentials))
