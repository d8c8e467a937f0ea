"""Convert a GGUF file to a Hugging Face folder (safetensors, config, tokenizer, chat template).

Runs inside the vLLM runtime (it needs torch and transformers), as
`python gguf_to_hf.py GGUF_PATH OUT_DIR DTYPE`, and prints one JSON line describing the result.
It imports nothing from evalflow so that it works under the runtime's interpreter.
"""

from __future__ import annotations

import json
import os
import sys

# One thread: on small CPU machines torch is fastest that way and does not fight the server.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def convert(gguf_path: str, out_dir: str, dtype_name: str) -> dict:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    dtype = getattr(torch, dtype_name)
    folder, name = os.path.split(os.path.abspath(gguf_path))
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, torch_dtype=dtype)
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        # transformers dequantized the GGUF; without this the saved config claims it is still quantized
        quantizer.remove_quantization_config(model)
    model = model.to(dtype)
    model.config.torch_dtype = dtype
    # safetensors and its index are written together by save_pretrained (never the
    # model.safetensors vs model-00001-of-00001 mismatch that vLLM refuses)
    model.save_pretrained(out_dir, safe_serialization=True, max_shard_size="2GB")
    tokenizer.save_pretrained(out_dir)
    if not tokenizer.chat_template:
        raise SystemExit(f"{gguf_path}: the GGUF carries no chat template; give the model one explicitly")

    # validate what we wrote: the config loads and the tensors match the architecture
    AutoConfig.from_pretrained(out_dir)
    reloaded = AutoModelForCausalLM.from_pretrained(out_dir, torch_dtype=dtype)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    got = {k: tuple(v.shape) for k, v in reloaded.state_dict().items()}
    if expected != got:
        raise SystemExit(f"converted tensors do not match the architecture: {sorted(set(expected) ^ set(got))[:5]}")
    return {
        "architecture": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "dtype": dtype_name,
        "files": sorted(os.listdir(out_dir)),
    }


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit("usage: gguf_to_hf.py GGUF_PATH OUT_DIR DTYPE")
    print(json.dumps(convert(*sys.argv[1:])))
