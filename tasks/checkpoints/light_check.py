"""A quick look at an HF folder without torch: enough to refuse what vLLM would refuse.

Reads config.json, the safetensors headers (8-byte length + JSON: names, shapes, byte ranges, so a
truncated file shows) and the index, and looks for tokenizer files. It catches the classic
`model.safetensors` next to an index that expects `model-00001-of-00001.safetensors`. It does not
compare the tensors with the architecture: `hf_check.py` does that, inside the runtime.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import TypedDict

from tasks.checkpoints.errors import CheckpointError
from tasks.checkpoints.layout import TOKENIZER_CORE
from tasks.checkpoints.records import FolderCheck

INDEX = "model.safetensors.index.json"
MAX_HEADER = 100 << 20


class TensorHeader(TypedDict):
    """One tensor's entry in a safetensors header (the format's own JSON)."""

    dtype: str
    shape: list[int]
    data_offsets: list[int]  # [start, end) within the data after the header


def safetensors_header(path: Path) -> dict[str, TensorHeader]:
    """{tensor name: {dtype, shape, data_offsets}}; raise if the file is shorter than it says."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        raw = fh.read(8)
        if len(raw) < 8:
            raise CheckpointError(f"{path} is not a safetensors file ({size} bytes)")
        (length,) = struct.unpack("<Q", raw)
        if length > MAX_HEADER or 8 + length > size:
            raise CheckpointError(f"{path} is truncated or not a safetensors file (header of {length} bytes)")
        try:
            header = json.loads(fh.read(length))
        except ValueError as exc:
            raise CheckpointError(f"{path}: the safetensors header does not parse ({exc})") from exc
    header.pop("__metadata__", None)
    end = max((t["data_offsets"][1] for t in header.values()), default=0)
    if 8 + length + end > size:
        raise CheckpointError(f"{path} is truncated: {size} bytes, its header needs {8 + length + end}")
    return header


def check_hf_folder(folder: Path) -> FolderCheck:
    """Raise CheckpointError with what is wrong; return a small summary."""
    config_path = folder / "config.json"
    try:
        config = json.loads(config_path.read_text())
    except FileNotFoundError as exc:
        raise CheckpointError(f"{folder} has no config.json: not an HF checkpoint folder") from exc
    except ValueError as exc:
        raise CheckpointError(f"{config_path} does not parse: {exc}") from exc
    if "model_type" not in config and "architectures" not in config:
        raise CheckpointError(f"{config_path} names no model_type or architectures")
    tensors: dict[str, TensorHeader] = {}
    index_path = folder / INDEX
    shards = sorted(p.name for p in folder.glob("*.safetensors"))
    if index_path.exists():
        weight_map: dict[str, str] = json.loads(index_path.read_text()).get("weight_map", {})
        named = sorted(set(weight_map.values()))
        absent = [n for n in named if not (folder / n).is_file()]
        if absent:
            raise CheckpointError(
                f"{index_path} names {absent[:3]} but the folder has {shards}: the index and the weights were not "
                "written together (vLLM will not load this); rewrite them with save_pretrained or drop the index"
            )
        for name in named:
            for key, meta in safetensors_header(folder / name).items():
                if weight_map.get(key) != name:
                    raise CheckpointError(f"{folder / name} holds {key}, which {INDEX} places elsewhere")
                tensors[key] = meta
        if set(weight_map) != set(tensors):
            raise CheckpointError(
                f"{INDEX} lists tensors the shards lack: {sorted(set(weight_map) - set(tensors))[:5]}"
            )
    elif len(shards) > 1:
        raise CheckpointError(f"{folder}: {len(shards)} safetensors shards but no {INDEX}")
    elif shards:
        tensors = safetensors_header(folder / shards[0])
    elif not any(folder.glob("*.bin")):
        raise CheckpointError(f"{folder} holds no weights (*.safetensors or *.bin)")
    if not any((folder / name).is_file() for name in TOKENIZER_CORE):
        raise CheckpointError(f"{folder} has no tokenizer ({' / '.join(TOKENIZER_CORE)})")
    tokenizer_config = folder / "tokenizer_config.json"
    chat = (folder / "chat_template.jinja").exists() or (folder / "chat_template.json").exists()
    if not chat and tokenizer_config.exists():
        chat = "chat_template" in json.loads(tokenizer_config.read_text())
    return FolderCheck(
        architecture=(config.get("architectures") or [config.get("model_type")])[0],
        tensors=len(tensors),
        dtypes=sorted({t["dtype"] for t in tensors.values()}),
        chat_template=chat,
    )
