"""The sha256 of each normalisation weight of an HF folder, computed exactly as vLLM's weight checker computes
the loaded model's (`vllm/model_executor/model_loader/weight_checksum.py`: the tensor's bytes, contiguous, in
the server's dtype), so a swapped server's `/weight_checker` checksums can be compared with the checkpoint's own.

Norm weights are chosen because vLLM loads them as they are: not fused (as q/k/v are), not sharded by tensor
parallelism (as embeddings are), not repacked by the CPU backend (as linear layers are), and small.

`python norm_digests.py FOLDER DTYPE` inside the vLLM runtime; the result is {name: digest}.
"""

from __future__ import annotations

import glob
import hashlib
import os
from typing import TypedDict

from _runtime_io import Failure, run_main  # sibling module: this file runs as a script


class NormDigests(TypedDict):
    """The result (evalflow reads it as results.NormDigests: keep the two in step)."""

    digests: dict[str, str]


def main(argv: list[str]) -> NormDigests:
    if len(argv) != 2:
        raise Failure("usage: norm_digests.py FOLDER DTYPE")
    folder, dtype_name = argv
    import torch
    from safetensors import safe_open

    dtype = getattr(torch, dtype_name, None)
    if not isinstance(dtype, torch.dtype):
        raise Failure(f"not a torch dtype: {dtype_name}")
    files = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
    if not files:
        raise Failure(f"no safetensors files in {folder}")
    digests: dict[str, str] = {}
    for path in files:
        with safe_open(path, framework="pt") as fh:
            for name in fh.keys():  # noqa: SIM118 - safe_open has no __iter__
                if name.endswith("norm.weight"):
                    tensor = fh.get_tensor(name).to(dtype).contiguous()
                    digests[name] = hashlib.sha256(tensor.view(-1).view(torch.uint8).numpy()).hexdigest()
    return {"digests": digests}


if __name__ == "__main__":
    run_main(main)
