"""The default blocks (blocks/defaults.yaml) saved by name: `evalflow local blocks` calls `save_defaults`.

The `runs` store comes from EVALFLOW_STORE_URL when set (credentials from AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, endpoint from AWS_ENDPOINT_URL), so credentials go from
the operator's environment into a secret block field, never into a file or a deployment.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from prefect.blocks.core import Block

from blocks.run_store import RunStoreBlock
from blocks.vllm_server import VLLMServerBlock
from tasks.prefect_sync import sync_call

DEFAULTS = Path(__file__).with_name("defaults.yaml")
REPO_ROOT = Path(__file__).resolve().parent.parent
TYPES: dict[str, type[Block]] = {"evalflow-vllm-server": VLLMServerBlock, "evalflow-run-store": RunStoreBlock}


def store_fields(fields: dict[str, Any]) -> dict[str, Any]:
    url = os.environ.get("EVALFLOW_STORE_URL")
    if not url:
        path = Path(fields["url"])
        return {**fields, "url": str(path if path.is_absolute() or "://" in fields["url"] else REPO_ROOT / path)}
    options: dict[str, Any] = {}
    if os.environ.get("AWS_ENDPOINT_URL"):
        options["client_kwargs"] = {"endpoint_url": os.environ["AWS_ENDPOINT_URL"]}
    env = {"key": "AWS_ACCESS_KEY_ID", "secret": "AWS_SECRET_ACCESS_KEY", "token": "AWS_SESSION_TOKEN"}
    secrets = {field: os.environ[var] for field, var in env.items() if os.environ.get(var)}
    return {"url": url, "storage_options": options, **secrets}


def default_blocks() -> dict[str, dict[str, dict[str, Any]]]:
    """blocks/defaults.yaml: {block type slug: {block name: its fields}}."""
    return yaml.safe_load(DEFAULTS.read_text())


def save_defaults(overwrite: bool = False) -> list[str]:
    """Register the types, save each default block that is missing (or all, with overwrite)."""
    saved = []
    for slug, blocks in default_blocks().items():
        block_cls = TYPES[slug]
        sync_call(block_cls.register_type_and_schema)
        for name, fields in blocks.items():
            if not overwrite:
                try:
                    sync_call(block_cls.load, name)
                    print(f"{slug}/{name}: exists, kept")
                    continue
                except ValueError:
                    pass
            block = block_cls(**(store_fields(fields) if block_cls is RunStoreBlock else fields))
            sync_call(block.save, name, overwrite=True)
            saved.append(f"{slug}/{name}")
            print(f"{slug}/{name}: saved")
    return saved
