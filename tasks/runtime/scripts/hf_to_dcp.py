"""Write an HF folder as a NeMo RL-style DCP checkpoint: round-trip checks, tests and benchmarks.

Runs inside the vLLM runtime: `python hf_to_dcp.py HF_DIR STEP_DIR [--layout nemo-rl|flat]
[--model-name NAME] [--files N] [--noise-seed S] [--no-crc] [--dtype float32|bfloat16]`. Weights are saved
in fp32 by default, as RL runs save them (bf16 with --dtype, as a bf16 trainer's are), with
`torch.distributed.checkpoint.save` in one process (no process group) and the tied `lm_head.weight` present,
as NeMo RL writes it.
  nemo-rl: STEP_DIR/policy/weights/ with keys wrapped under `model.`
  flat:    STEP_DIR/policy/weights/model/ with the HF names
Both get STEP_DIR/config.yaml (policy.model_name = NAME, default HF_DIR) and STEP_DIR/policy/tokenizer/
(the tokenizer files, copied). `--noise-seed` perturbs one tensor: a different checkpoint, same shapes.
`--no-crc` saves without zip CRC-32s (`torch.serialization.set_crc32_options(False)`), as some writers do.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path
from typing import Any, TypedDict

from _runtime_io import TOKENIZER_FILES, Failure, progress, run_main  # sibling modules: this file runs as a script


class DcpExport(TypedDict):
    """The result (evalflow reads it as results.DcpExport: keep the two in step)."""

    weights_dir: str
    tensors: int
    bytes: int
    files: list[str]


def export(args: argparse.Namespace) -> DcpExport:
    import torch
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import load_file
    from torch.distributed.checkpoint import FileSystemWriter
    from transformers import AutoTokenizer

    hf_dir, step = Path(args.hf_dir), Path(args.step_dir)
    files = sorted(hf_dir.glob("*.safetensors"))
    if not files:
        raise Failure(f"{hf_dir} holds no safetensors files")
    state: dict[str, Any] = {}  # name -> torch tensor
    for file in files:
        state.update({k: v.to(getattr(torch, args.dtype)) for k, v in load_file(str(file)).items()})
    config = json.loads((hf_dir / "config.json").read_text())
    if config.get("tie_word_embeddings") and "lm_head.weight" not in state:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    if args.noise_seed is not None:
        generator = torch.Generator().manual_seed(args.noise_seed)
        norm = state["model.norm.weight"]
        noise = 1e-2 * torch.randn(norm.shape, generator=generator)
        state["model.norm.weight"] = (norm.float() + noise).to(norm.dtype)
    if args.layout == "nemo-rl":
        weights = step / "policy" / "weights"
        state = {f"model.{k}": v for k, v in state.items()}
    else:
        weights = step / "policy" / "weights" / "model"
    weights.mkdir(parents=True, exist_ok=True)
    torch.serialization.set_crc32_options(not args.no_crc)
    dcp.save(state, storage_writer=FileSystemWriter(str(weights), thread_count=args.files), no_dist=True)
    progress(f"wrote {len(state)} tensors to {weights}")

    # the tokenizer files as they are (save_pretrained would record load-time flags such as
    # local_files_only in tokenizer_config.json): the converted folder can then be compared byte for byte
    tokenizer = step / "policy" / "tokenizer"
    tokenizer.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (hf_dir / name).is_file():
            shutil.copyfile(hf_dir / name, tokenizer / name)
    AutoTokenizer.from_pretrained(str(tokenizer))  # it loads
    model_name = args.model_name or str(hf_dir)
    (step / "config.yaml").write_text(
        f"policy:\n  model_name: {json.dumps(model_name)}\n  tokenizer:\n    name: {json.dumps(model_name)}\n"
        "  precision: bfloat16\n"
    )
    return DcpExport(
        weights_dir=str(weights),
        tensors=len(state),
        bytes=sum(p.stat().st_size for p in weights.iterdir()),
        files=sorted(p.name for p in weights.iterdir()),
    )


def main(argv: list[str]) -> DcpExport:
    parser = argparse.ArgumentParser(prog="hf_to_dcp.py")
    parser.add_argument("hf_dir")
    parser.add_argument("step_dir")
    parser.add_argument("--layout", choices=["nemo-rl", "flat"], default="nemo-rl")
    parser.add_argument("--model-name")
    parser.add_argument("--files", type=int, default=1, help="shard files (DCP writer threads)")
    parser.add_argument("--noise-seed", type=int)
    parser.add_argument("--no-crc", action="store_true", help="save without zip CRC-32s")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    return export(parser.parse_args(argv))


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    run_main(main)
