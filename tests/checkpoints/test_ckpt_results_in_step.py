"""The runtime scripts' result TypedDicts and evalflow's models of them (tasks/checkpoints/results.py) declare
the same fields, so a field added on one side fails here, not at the first conversion on a GPU node."""

from __future__ import annotations

import importlib
import typing

import pytest
from pydantic import BaseModel

from tasks.checkpoints import results
from tasks.runtime.scripts import SCRIPTS_DIR

PAIRS = [
    ("hf_check", "FolderValidation"),
    ("gguf_to_hf", "GgufConversion"),
    ("gguf_to_hf", "GgufSeconds"),
    ("dcp_to_hf", "DcpConversion"),
    ("dcp_to_hf", "DcpSeconds"),
    ("dcp_to_hf", "DcpJob"),
    ("dcp_check", "DcpCheck"),
    ("list_architectures", "RuntimeLists"),
    ("count_prompt_tokens", "PromptTokenCounts"),
    ("hf_to_dcp", "DcpExport"),
    ("count_prompt_tokens", "Request"),
]


def _fields(kind: type) -> list[str]:
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return list(kind.model_fields)
    return list(typing.get_type_hints(kind))


@pytest.mark.parametrize(("script", "name"), PAIRS, ids=[f"{s}.{n}" for s, n in PAIRS])
def test_script_result_and_model_declare_the_same_fields(
    script: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the scripts run as files from their folder (they import their sibling _runtime_io), as the runtime runs them
    monkeypatch.syspath_prepend(str(SCRIPTS_DIR))
    declared = getattr(importlib.import_module(f"tasks.runtime.scripts.{script}"), name)
    model = getattr(results, {"Request": "PromptRequest"}.get(name, name))
    assert sorted(_fields(declared)) == sorted(_fields(model))
