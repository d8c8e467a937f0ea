"""What a checkpoint folder is, from its file listing alone (local or remote: no file is opened).

A listing maps relative paths to sizes. `detect` recognises an HF folder, a DCP checkpoint in the
NeMo RL layouts (`step_N/policy/weights/` with keys wrapped under `model.`, or the flat
`step_N/policy/weights/model/`; also when pointed at the weights folder itself), and names the
files a conversion reads, so a remote checkpoint is downloaded without its optimizer state.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from tasks.checkpoints.errors import CheckpointError
from tasks.runtime.scripts._runtime_io import TOKENIZER_FILES

# where the DCP weights sit under a step folder, most specific first
DCP_DIRS = ("policy/weights/model", "policy/weights", "weights/model", "weights", "model", "")
TOKENIZER_DIRS = ("policy/tokenizer", "tokenizer")
TOKENIZER_CORE = ("tokenizer.json", "tokenizer.model", "vocab.json")
WEIGHT_SUFFIXES = (".safetensors", ".bin")
STEP = re.compile(r"^(step_\d+|iter_\d+|checkpoint-\d+)$")
V = TypeVar("V")  # what a listing maps each path to: its size here, its details in a training run's listing


@dataclass(frozen=True)
class Layout:
    kind: str  # "hf", "dcp" or "gguf"
    needed: tuple[str, ...]  # relative paths the conversion (or the server) reads
    weights_dir: str = ""  # dcp: folder holding .metadata and the *.distcp shards
    config_yaml: str | None = None  # dcp: the training config (policy.model_name)
    tokenizer_dir: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def dcp_layout(self) -> str:
        return "flat (weights/model)" if self.weights_dir.endswith("model") else "nemo-rl (policy/weights)"


def children(files: Mapping[str, V], folder: str) -> dict[str, V]:
    """Direct children (files) of `folder` in a listing."""
    prefix = f"{folder}/" if folder else ""
    out: dict[str, V] = {}
    for rel, size in files.items():
        if rel.startswith(prefix) and "/" not in rel[len(prefix) :]:
            out[rel[len(prefix) :]] = size
    return out


def join(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


def find_dcp(files: Mapping[str, object]) -> str | None:
    for folder in DCP_DIRS:
        names = children(files, folder)
        if ".metadata" in names or any(n.endswith(".distcp") for n in names):
            return folder
    return None


def find_tokenizer(files: Mapping[str, int]) -> str | None:
    for folder in TOKENIZER_DIRS:
        if any(name in TOKENIZER_CORE for name in children(files, folder)):
            return folder
    return None


def detect(files: Mapping[str, int], where: str) -> Layout:
    """Classify a folder listing; raise CheckpointError saying what was expected and what was found."""
    top = children(files, "")
    if "config.json" in top and any(n.endswith(WEIGHT_SUFFIXES) for n in top):
        return Layout("hf", tuple(sorted(top)))
    weights = find_dcp(files)
    if weights is not None:
        shards = children(files, weights)
        if ".metadata" not in shards:
            raise CheckpointError(
                f"{where}: DCP shards {sorted(shards)[:3]} in {join(weights, '') or './'} but no .metadata: "
                "the checkpoint is incomplete (its save did not finish) or not a DCP checkpoint"
            )
        needed = [join(weights, n) for n in shards if n == ".metadata" or n.endswith(".distcp")]
        config_yaml = "config.yaml" if "config.yaml" in top else None
        tokenizer = find_tokenizer(files)
        if config_yaml:
            needed.append(config_yaml)
        if tokenizer:
            needed += [join(tokenizer, n) for n in children(files, tokenizer) if n in TOKENIZER_FILES]
            needed += [join(tokenizer, n) for n in children(files, tokenizer) if n == "generation_config.json"]
        return Layout("dcp", tuple(sorted(needed)), weights, config_yaml, tokenizer)
    steps = sorted({rel.split("/", 1)[0] for rel in files if "/" in rel and STEP.match(rel.split("/", 1)[0])})
    if steps:
        raise CheckpointError(
            f"{where} holds several checkpoints ({', '.join(steps[:6])}{', ...' if len(steps) > 6 else ''}): "
            "point model.source at one of them"
        )
    if "config.json" in top:
        raise CheckpointError(f"{where}: config.json but no weights (*.safetensors / *.bin) next to it")
    sample = sorted(files)[:8]
    raise CheckpointError(
        f"{where} is not a checkpoint: expected an HF folder (config.json + *.safetensors), a DCP checkpoint "
        f"(.metadata + *.distcp, e.g. step_N/policy/weights/) or a .gguf file; found {sample or 'nothing'}"
    )
