"""A GGUF file's header read without torch or numpy: its architecture, its tensors, and whether the file
holds every byte they need, so the dry run refuses a truncated download in milliseconds, as the
conversion would 15-60 s later with a less helpful message.

Layout (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md): magic `GGUF`, version, tensor and
key-value counts, the key-values, one info per tensor (name, dims, ggml type, offset in the data
section), padding to `general.alignment`, then the data. The data's size follows from each tensor's
type: `elements / block_size * type_size` (ggml's table below; tests compare it with gguf-py's).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from tasks.checkpoints.errors import CheckpointError

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

GgufScalar = int | float | bool | str  # what a key-value holds, arrays left out

# ggml type id: (elements per block, bytes per block), as gguf-py's GGML_QUANT_SIZES
GGML_BLOCKS: dict[int, tuple[int, int]] = {
    0: (1, 4),  # F32
    1: (1, 2),  # F16
    2: (32, 18),  # Q4_0
    3: (32, 20),  # Q4_1
    6: (32, 22),  # Q5_0
    7: (32, 24),  # Q5_1
    8: (32, 34),  # Q8_0
    9: (32, 40),  # Q8_1
    10: (256, 84),  # Q2_K
    11: (256, 110),  # Q3_K
    12: (256, 144),  # Q4_K
    13: (256, 176),  # Q5_K
    14: (256, 210),  # Q6_K
    15: (256, 292),  # Q8_K
    16: (256, 66),  # IQ2_XXS
    17: (256, 74),  # IQ2_XS
    18: (256, 98),  # IQ3_XXS
    19: (256, 50),  # IQ1_S
    20: (32, 18),  # IQ4_NL
    21: (256, 110),  # IQ3_S
    22: (256, 82),  # IQ2_S
    23: (256, 136),  # IQ4_XS
    24: (1, 1),  # I8
    25: (1, 2),  # I16
    26: (1, 4),  # I32
    27: (1, 8),  # I64
    28: (1, 8),  # F64
    29: (256, 56),  # IQ1_M
    30: (1, 2),  # BF16
    34: (256, 54),  # TQ1_0
    35: (256, 66),  # TQ2_0
    39: (32, 17),  # MXFP4
    40: (64, 36),  # NVFP4
    41: (128, 18),  # Q1_0
}

# key-value types: struct format of the scalar ones; 8 is a string, 9 an array
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9
MAX_COUNT = 1 << 28  # more keys, tensors or array items than any model has: not a GGUF header


class _Truncated(Exception):
    """The file ended inside the header."""


@dataclass(frozen=True)
class GgufHeader:
    version: int
    architecture: str | None
    metadata: dict[str, GgufScalar]  # scalar and string values only (arrays such as the vocabulary are skipped)
    tensors: int
    elements: int  # of all tensors: the converted folder holds about this many values
    data_start: int
    needed_bytes: int  # the file size the tensors need
    file_bytes: int


class _Reader:
    def __init__(self, fh: BinaryIO) -> None:
        self.fh = fh

    def take(self, fmt: str) -> Any:
        size = struct.calcsize("<" + fmt)
        raw = self.fh.read(size)
        if len(raw) < size:
            raise _Truncated
        return struct.unpack("<" + fmt, raw)[0]

    def count(self, what: str) -> int:
        value = self.take("Q")
        if value > MAX_COUNT:
            raise CheckpointError(f"{what} count {value} is not plausible")
        return value

    def string(self) -> str:
        length = self.count("string length")
        raw = self.fh.read(length)
        if len(raw) < length:
            raise _Truncated
        return raw.decode("utf-8", errors="replace")

    def value(self, kind: int) -> GgufScalar | None:
        if kind in SCALARS:
            return self.take(SCALARS[kind])
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            item_kind, n = self.take("I"), self.count("array item")
            if item_kind in SCALARS and item_kind != STRING:  # skip the bytes in one seek
                self.fh.seek(struct.calcsize("<" + SCALARS[item_kind]) * n, 1)
            else:
                for _ in range(n):
                    self.value(item_kind)
            return None
        raise CheckpointError(f"unknown key-value type {kind}")


def read_header(path: Path) -> GgufHeader:
    """The header of the GGUF file at `path`; CheckpointError says what is wrong (not a GGUF, truncated at
    byte N of the M its tensors need, an unknown tensor type)."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        if fh.read(4) != MAGIC:
            raise CheckpointError(f"{path} is not a GGUF file (no GGUF magic bytes)")
        reader = _Reader(fh)
        try:
            version = reader.take("I")
            if version not in (2, 3):
                raise CheckpointError(f"{path}: GGUF version {version} is not one this converter reads (2 or 3)")
            n_tensors, n_kv = reader.count("tensor"), reader.count("key-value")
            metadata: dict[str, GgufScalar] = {}
            for _ in range(n_kv):
                key, kind = reader.string(), reader.take("I")
                value = reader.value(kind)
                if value is not None:
                    metadata[key] = value
            end = total = 0
            for _ in range(n_tensors):
                name = reader.string()
                dims = [reader.take("Q") for _ in range(reader.take("I"))]
                ggml_type, offset = reader.take("I"), reader.take("Q")
                if ggml_type not in GGML_BLOCKS:
                    raise CheckpointError(f"{path}: tensor {name} has ggml type {ggml_type}, unknown to this reader")
                block, type_size = GGML_BLOCKS[ggml_type]
                elements = 1
                for dim in dims:
                    elements *= dim
                end = max(end, offset + elements // block * type_size)
                total += elements
            header_end = fh.tell()
        except _Truncated:
            raise CheckpointError(
                f"{path} is truncated: the file ends inside its header, after {size} bytes (an interrupted "
                "download or copy?); fetch it again"
            ) from None
    alignment = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT)) or DEFAULT_ALIGNMENT
    data_start = -(-header_end // alignment) * alignment
    needed = data_start + end
    if size < needed:
        raise CheckpointError(
            f"{path} is truncated: {size} bytes, its {n_tensors} tensors need {needed} (an interrupted download "
            "or copy?); fetch it again"
        )
    architecture = metadata.get("general.architecture")
    if not isinstance(architecture, str):  # a GGUF that names none (or not as a string)
        architecture = None
    return GgufHeader(version, architecture, metadata, n_tensors, total, data_start, needed, size)
