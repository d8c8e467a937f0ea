"""Convert a GGUF file to a Hugging Face folder (safetensors, config, tokenizer, chat template).

Runs inside the vLLM runtime (it needs torch and transformers), as
`python gguf_to_hf.py GGUF_PATH OUT_DIR DTYPE`; transformers dequantizes the GGUF, the model is
cast to DTYPE and saved, and `hf_check` validates the folder before the result line is printed.
"""

from __future__ import annotations

import os
import time
from typing import TypedDict

from _runtime_io import Failure, progress, run_main  # sibling modules: this file runs as a script
from hf_check import FolderValidation, check_folder


class GgufSeconds(TypedDict):
    convert: float
    validate: float


class GgufConversion(FolderValidation):
    """The result (evalflow reads it as results.GgufConversion: keep the two in step)."""

    dtype: str
    source_bytes: int
    files: list[str]
    seconds: GgufSeconds
    pid: int


def share_gguf_parsing() -> None:
    """One parse of the GGUF instead of three, one tensor-name map instead of hundreds.

    transformers reads the file's metadata once for the config, once for the tokenizer and once for the
    weights (gguf's reader walks a large vocabulary element by element: seconds each), and builds gguf's
    tensor-name map once per module of the model; both are pure functions of their arguments (the reader is
    only read), so each is built once here. transformers looks both up in `gguf` when it calls them, which is
    where they are swapped; one that imported them otherwise would only be slower, never wrong.
    SmolLM2-135M's Q4_1 file on a 2-core EPYC: 25 s to dequantize before, about 8 s after.
    """
    import functools

    import gguf

    readers: dict[tuple[str, str], gguf.GGUFReader] = {}
    reader_class = gguf.GGUFReader

    def reader(path: str | os.PathLike[str], mode: str = "r") -> gguf.GGUFReader:
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = reader_class(path, mode)  # pyright: ignore[reportArgumentType]  # why: gguf's Literal
        return readers[key]

    gguf.GGUFReader = reader  # pyright: ignore[reportAttributeAccessIssue]  # why: a factory in the class's place
    gguf.get_tensor_name_map = functools.cache(gguf.get_tensor_name_map)


def convert(gguf_path: str, out_dir: str, dtype_name: str) -> GgufConversion:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    share_gguf_parsing()

    started = time.monotonic()
    dtype = getattr(torch, dtype_name)
    folder, name = os.path.split(os.path.abspath(gguf_path))
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, torch_dtype=dtype)
    except Exception as exc:
        raise Failure(f"{gguf_path} does not load as a GGUF model ({type(exc).__name__}: {exc})") from exc
    progress(f"dequantized {name} in {time.monotonic() - started:.1f} s")
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
        raise Failure(f"{gguf_path}: the GGUF carries no chat template; give the model one explicitly")
    written = time.monotonic()
    summary = check_folder(out_dir, dtype_name)
    return GgufConversion(
        **summary,
        dtype=dtype_name,
        source_bytes=os.path.getsize(gguf_path),
        files=sorted(os.listdir(out_dir)),
        seconds=GgufSeconds(convert=round(written - started, 3), validate=round(time.monotonic() - written, 3)),
        pid=os.getpid(),
    )


def main(argv: list[str]) -> GgufConversion:
    if len(argv) != 3:
        raise Failure("usage: gguf_to_hf.py GGUF_PATH OUT_DIR DTYPE")
    return convert(*argv)


if __name__ == "__main__":
    # One thread: on small CPU machines torch is fastest that way and does not fight the server.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    run_main(main)
