"""Check that an HF folder is what its config says: before a converted folder is declared done.

Runs inside the vLLM runtime (torch, transformers, safetensors), as a library for the converters
or as `python hf_check.py FOLDER [DTYPE]`. The architecture is instantiated on the `meta` device
(no memory, no weights) and its state-dict names and shapes are compared with the safetensors
headers; tied weights (lm_head tied to the embeddings) are expected to be absent from the files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, TypedDict

from _runtime_io import Failure, run_main  # sibling module: this file runs as a script

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


def architecture(config_dir: str) -> tuple[Any, dict[str, tuple[int, ...]], dict[str, str]]:
    """(config, {name: shape} the files must hold, {tied name: the name it shares storage with})."""
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(config_dir)
    except Exception as exc:
        raise Failure(f"{config_dir}/config.json does not load as a transformers config: {exc}") from exc
    names = list(getattr(config, "architectures", None) or [])
    cls = getattr(transformers, names[0], None) if names else None
    with torch.device("meta"):
        model = cls(config) if cls is not None else AutoModelForCausalLM.from_config(config)
    first: dict[int, str] = {}
    tied: dict[str, str] = {}
    for name, tensor in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
        if id(tensor) in first:
            tied[name] = first[id(tensor)]
        else:
            first[id(tensor)] = name
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items() if k not in tied}
    return config, expected, tied


def describe_mismatch(
    expected: dict[str, tuple[int, ...]], got: dict[str, tuple[int, ...]], where: str, config_dir: str
) -> str | None:
    """A readable list of missing, extra and mis-shaped tensors, or None when they agree."""
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    shapes = sorted(k for k in set(expected) & set(got) if expected[k] != got[k])
    if not (missing or extra or shapes):
        return None
    lines = [f"the tensors in {where} do not match the architecture in {config_dir}/config.json:"]
    if missing:
        lines.append(f"  {len(missing)} missing, e.g. {', '.join(missing[:5])}")
    if extra:
        lines.append(f"  {len(extra)} unexpected, e.g. {', '.join(extra[:5])}")
    for key in shapes[:5]:
        lines.append(f"  {key}: checkpoint {list(got[key])}, architecture {list(expected[key])}")
    if len(shapes) > 5:
        lines.append(f"  ... {len(shapes)} shape mismatches in all")
    lines.append(
        "check that the config (model.config_path / policy.model_name) is the one this checkpoint was trained with"
    )
    return "\n".join(lines)


def safetensors_tensors(folder: Path) -> tuple[dict[str, tuple[int, ...]], set[str], list[str]]:
    """({name: shape}, dtypes, files) over the folder's safetensors files, checked against the index."""
    from safetensors import safe_open

    index_path = folder / INDEX
    if index_path.exists():
        weight_map: dict[str, str] = json.loads(index_path.read_text())["weight_map"]
        files = sorted(set(weight_map.values()))
        absent = [f for f in files if not (folder / f).is_file()]
        if absent:
            raise Failure(f"{index_path} names {absent[:3]} but they are not in the folder")
    else:
        files = sorted(p.name for p in folder.glob("*.safetensors"))
        if files != [SINGLE]:
            raise Failure(f"{folder}: expected {SINGLE} or {INDEX} with its shards, found {files}")
        weight_map = {}
    shapes: dict[str, tuple[int, ...]] = {}
    dtypes: set[str] = set()
    for name in files:
        with safe_open(str(folder / name), "pt") as fh:
            for key in fh.keys():  # noqa: SIM118 - safe_open is not a mapping
                if weight_map and weight_map.get(key) != name:
                    raise Failure(f"{name} holds {key}, which {INDEX} places in {weight_map.get(key)}")
                part = fh.get_slice(key)
                shapes[key] = tuple(part.get_shape())
                dtypes.add(part.get_dtype())
    if weight_map and set(weight_map) != set(shapes):
        raise Failure(f"{INDEX} and the shards disagree on {sorted(set(weight_map) ^ set(shapes))[:5]}")
    unused = sorted({p.name for p in folder.glob("*.safetensors")} - set(files))
    if unused:
        raise Failure(f"{folder}: {unused} are not in {INDEX}; vLLM would not load them consistently")
    return shapes, dtypes, files


SAFETENSORS_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}
FLOAT_DTYPES = ("BF16", "F16", "F32", "F64", "F8_E4M3", "F8_E5M2")


class FolderValidation(TypedDict):
    """The result (evalflow reads it as results.FolderValidation: keep the two in step)."""

    architecture: str
    tensors: int
    tied: list[str]
    parameters: int
    safetensors_dtypes: list[str]
    weight_files: list[str]
    chat_template: bool


def check_folder(folder: str, dtype: str | None = None) -> FolderValidation:
    """Full validation of an HF folder; raises Failure with what is wrong."""
    path = Path(folder)
    if not (path / "config.json").is_file():
        raise Failure(f"{folder} has no config.json")
    config, expected, tied = architecture(folder)
    got, dtypes, files = safetensors_tensors(path)
    tied_present = sorted(set(got) & set(tied))
    for key in tied_present:  # save_pretrained drops them, but a file that keeps them still loads
        got.pop(key)
    problem = describe_mismatch(expected, got, f"{folder}/*.safetensors", folder)
    if problem:
        raise Failure(problem)
    floats = dtypes & set(FLOAT_DTYPES)
    if dtype and floats - {SAFETENSORS_DTYPES[dtype]}:
        raise Failure(f"{folder}: tensors are {sorted(floats)}, expected {SAFETENSORS_DTYPES[dtype]} only")
    if not any((path / f).is_file() for f in TOKENIZER_FILES):
        raise Failure(f"{folder} has no tokenizer ({' / '.join(TOKENIZER_FILES)})")
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except Exception as exc:
        raise Failure(f"the tokenizer in {folder} does not load: {exc}") from exc
    return FolderValidation(
        architecture=(getattr(config, "architectures", None) or ["?"])[0],
        tensors=len(got),
        tied=sorted(tied),
        parameters=sum(_numel(s) for s in got.values()),
        safetensors_dtypes=sorted(dtypes),
        weight_files=files,
        chat_template=bool(getattr(tokenizer, "chat_template", None)),
    )


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def main(argv: list[str]) -> FolderValidation:
    if len(argv) not in (1, 2):
        raise Failure("usage: hf_check.py FOLDER [DTYPE]")
    return check_folder(argv[0], argv[1] if len(argv) == 2 else None)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    run_main(main)
