"""The GGUF header reader (no torch, no numpy): the size its tensors need is the file's size, to the byte,
for the shipped model, and a cut file says where it ends; its ggml type table is gguf-py's."""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

import pytest

from tasks.checkpoints.errors import CheckpointError
from tasks.checkpoints.gguf_header import GGML_BLOCKS, read_header
from tasks.checkpoints.sources import find_default_gguf
from tasks.runtime.venv import Runtime


def test_the_shipped_gguf_needs_exactly_its_size_and_names_its_architecture(runtime: Runtime) -> None:
    gguf = find_default_gguf(runtime)
    header = read_header(gguf)
    assert (header.version, header.architecture, header.tensors) == (3, "llama", 272)
    assert header.needed_bytes == header.file_bytes == gguf.stat().st_size
    assert header.metadata["llama.block_count"] == 30


@pytest.mark.parametrize("keep", [3, 4096, 1_000_000, -1])
def test_a_cut_file_is_truncated_and_says_how_far_it_got(runtime: Runtime, tmp_path: Path, keep: int) -> None:
    gguf = find_default_gguf(runtime)
    size = gguf.stat().st_size
    cut = tmp_path / "cut.gguf"
    with gguf.open("rb") as fh:
        cut.write_bytes(fh.read(size - 1 if keep < 0 else keep))
    with pytest.raises(CheckpointError) as info:
        read_header(cut)
    message = str(info.value)
    if keep == 3:
        assert "is not a GGUF file (no GGUF magic bytes)" in message
    elif keep < 0:
        assert message.startswith(f"{cut} is truncated: {size - 1} bytes, its 272 tensors need {size}")
    else:
        assert message.startswith(f"{cut} is truncated: the file ends inside its header, after {keep} bytes")


def test_implausible_counts_and_unknown_types_fail_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 1 << 40, 0))
    with pytest.raises(CheckpointError, match="tensor count 1099511627776 is not plausible"):
        read_header(bad)
    name = b"t"
    bad.write_bytes(
        b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + struct.pack("<Q", 1) + name + struct.pack("<IQIQ", 1, 4, 99, 0)
    )
    with pytest.raises(CheckpointError, match="tensor t has ggml type 99, unknown to this reader"):
        read_header(bad)


def test_the_type_table_is_gguf_pys(runtime: Runtime) -> None:
    script = "import json, gguf; print(json.dumps({int(t): list(v) for t, v in gguf.GGML_QUANT_SIZES.items()}))"
    out = subprocess.run(
        [str(runtime.python), "-c", script], capture_output=True, text=True, check=True, env=runtime.env()
    )
    theirs = {int(k): tuple(v) for k, v in json.loads(out.stdout).items()}
    assert {k: v for k, v in theirs.items() if k in GGML_BLOCKS} == GGML_BLOCKS
    assert set(GGML_BLOCKS) >= set(theirs) - {4, 5, 31, 32, 33, 36, 37, 38}  # removed types, none in use
