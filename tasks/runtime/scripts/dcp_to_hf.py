"""Convert a PyTorch DCP checkpoint (NeMo RL layouts) to an HF folder that vLLM serves.

Runs inside the vLLM runtime as `python dcp_to_hf.py JOB.json`; the job names the DCP weights
folder, the folder with the HF config.json, the tokenizer folder, the output folder, the dtype and
the largest shard size. One process, no process group: `FileSystemReader` + a partial load per
output shard, so memory stays near one shard whatever the model size. Before reading any tensor
data it checks that every shard is long enough and that the names and shapes in `.metadata` match
the architecture; each tensor's record (a zip written by `torch.save`) has its CRC-32s checked just
before it is loaded, because torch does not check them and a flipped byte in tensor data would
otherwise convert silently; after writing, `hf_check` validates the folder as vLLM will see it.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import time
import zipfile
import zlib
from pathlib import Path
from typing import Any, TypedDict

from _runtime_io import TOKENIZER_FILES, Failure, progress, run_main  # sibling modules: this file runs as a script
from hf_check import INDEX, SINGLE, FolderValidation, architecture, check_folder, describe_mismatch

WRAPPER = "model."  # NeMo RL wraps the HF model: model.model.layers.0... / model.lm_head.weight
BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
CHUNK = 1 << 24  # bytes read at a time by the CRC check
DAMAGED = "the checkpoint was damaged after it was saved (a bad copy or disk): copy it again, or use another step"


class DcpJob(TypedDict):
    """The job file (evalflow writes it from results.DcpJob)."""

    weights_dir: str
    config_dir: str
    tokenizer_dir: str
    out_dir: str
    dtype: str
    max_shard_bytes: int


class DcpSeconds(TypedDict):
    check: float
    tensors: float
    validate: float


class DcpConversion(FolderValidation):
    """The result (evalflow reads it as results.DcpConversion: keep the two in step)."""

    dtype: str
    source_bytes: int
    source_dtypes: list[str]
    key_prefix_stripped: bool
    dropped_tied: list[str]
    ignored_non_tensors: int
    tokenizer_files: list[str]
    files: list[str]
    seconds: DcpSeconds
    pid: int


def read_metadata(weights_dir: str) -> Any:
    from torch.distributed.checkpoint import FileSystemReader

    if not os.path.isfile(os.path.join(weights_dir, ".metadata")):
        raise Failure(f"{weights_dir} has no .metadata: the checkpoint is incomplete or not a DCP checkpoint")
    try:
        return FileSystemReader(weights_dir).read_metadata()
    except Exception as exc:
        raise Failure(f"{weights_dir}/.metadata is corrupt or unreadable ({torch_reason(exc)}): {DAMAGED}") from exc


def check_shards(weights_dir: str, metadata: Any) -> int:
    """Every byte range the metadata points at must exist: a truncated shard fails here, by name."""
    needed: dict[str, int] = {}
    for info in metadata.storage_data.values():
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
    total = 0
    for name, end in sorted(needed.items()):
        path = os.path.join(weights_dir, name)
        if not os.path.isfile(path):
            raise Failure(f"{path} is missing: .metadata lists it")
        size = os.path.getsize(path)
        if size < end:
            raise Failure(f"{path} is truncated: {size} bytes, .metadata needs at least {end}")
        total += size
    return total


def tensor_table(metadata: Any) -> dict[str, tuple[tuple[int, ...], Any]]:
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    return {
        k: (tuple(v.size), v.properties.dtype)
        for k, v in metadata.state_dict_metadata.items()
        if isinstance(v, TensorStorageMetadata)
    }


def name_map(keys: list[str], expected: dict[str, tuple[int, ...]], tied: dict[str, str]) -> dict[str, str]:
    """{HF name: checkpoint name}: NeMo RL's `model.` wrapper is stripped when that is what fits."""
    known = set(expected) | set(tied)
    plain = {k: k for k in keys}
    if all(k.startswith(WRAPPER) for k in keys):
        stripped = {k[len(WRAPPER) :]: k for k in keys}
        if len(known & set(stripped)) > len(known & set(plain)):
            return stripped
    return plain


def plan_shards(names: list[str], shapes: dict[str, tuple[int, ...]], item: int, limit: int) -> list[list[str]]:
    shards: list[list[str]] = [[]]
    size = 0
    for name in names:
        n = item
        for d in shapes[name]:
            n *= d
        if shards[-1] and size + n > limit:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += n
    return shards


class Window(io.RawIOBase):
    """Bytes [start, start + length) of an open file as a seekable file of their own: one record, for zipfile."""

    def __init__(self, fh: io.FileIO, start: int, length: int) -> None:
        super().__init__()
        self.fh, self.start, self.length, self.pos = fh, start, length, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self.pos, os.SEEK_END: self.length}[whence]
        self.pos = min(max(base + offset, 0), self.length)
        return self.pos

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), self.length - self.pos)
        if n <= 0:
            return 0
        self.fh.seek(self.start + self.pos)
        got = self.fh.readinto(memoryview(buffer)[:n]) or 0
        self.pos += got
        return got


def stored_crc(record: Window, member: zipfile.ZipInfo, buffer: memoryview) -> int:
    """CRC-32 of an uncompressed member, read straight into `buffer` (3x faster than zipfile's reader)."""
    record.seek(member.header_offset)
    head = record.read(30)
    if len(head) < 30 or head[:4] != b"PK\x03\x04":
        raise zipfile.BadZipFile(f"no local header for {member.filename!r}")
    name_len, extra_len = struct.unpack("<HH", head[26:30])
    record.seek(member.header_offset + 30 + name_len + extra_len)
    left, crc = member.compress_size, 0
    while left:
        got = record.readinto(buffer[: min(left, len(buffer))])
        if not got:
            raise zipfile.BadZipFile(f"{member.filename!r} is cut short")
        crc = zlib.crc32(buffer[:got], crc)
        left -= got
    return crc


def verify_records(weights_dir: str, metadata: Any, keys: list[str]) -> None:
    """Every zip member of the records holding `keys` must match its CRC-32 (0: saved without CRCs)."""
    wanted = set(keys)
    buffer = memoryview(bytearray(CHUNK))
    for index, info in metadata.storage_data.items():
        if index.fqn not in wanted or info.transform_descriptors:  # transformed (e.g. compressed): not a plain zip
            continue
        path = os.path.join(weights_dir, info.relative_path)
        with open(path, "rb", buffering=0) as fh:
            window = Window(fh, info.offset, info.length)
            try:
                with zipfile.ZipFile(window) as record:
                    for member in record.infolist():
                        if member.CRC == 0:
                            continue
                        if member.compress_type != zipfile.ZIP_STORED:
                            record.read(member)  # zipfile checks the CRC
                        elif stored_crc(window, member, buffer) != member.CRC:
                            raise zipfile.BadZipFile(f"Bad CRC-32 for file {member.filename!r}")
            except Exception as exc:  # zipfile raises BadZipFile, but also struct, zlib and encoding errors
                raise Failure(
                    f"{path} is corrupt: the record of {index.fqn} (bytes {info.offset}-{info.offset + info.length}) "
                    f"fails its check ({exc}); {DAMAGED}"
                ) from exc


def torch_reason(exc: BaseException) -> str:
    """The first telling line of what torch raised (a CheckpointException wraps the real error)."""
    failures = getattr(exc, "failures", None)
    if failures:
        exc = next(iter(failures.values()))[0]
    text = str(exc)
    marker = "WeightsUnpickler error:"
    if marker in text:  # skip torch's advice to load with weights_only=False: that would run the file's code
        text = text.split(marker, 1)[1]
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return f"{type(exc).__name__}: {line[:200]}"


def load(
    weights_dir: str, metadata: Any, table: dict[str, tuple[tuple[int, ...], Any]], keys: list[str]
) -> dict[str, Any]:  # name -> torch tensor (torch is not importable where this file is type-checked)
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import CheckpointException, FileSystemReader
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    verify_records(weights_dir, metadata, keys)
    state = {k: torch.empty(table[k][0], dtype=table[k][1]) for k in keys}
    try:
        dcp.load(state, storage_reader=FileSystemReader(weights_dir), planner=DefaultLoadPlanner(), no_dist=True)
    except (Exception, CheckpointException) as exc:  # CheckpointException is a BaseException
        raise Failure(
            f"{weights_dir} is corrupt or unreadable: torch cannot read its tensors ({torch_reason(exc)}); {DAMAGED}"
        ) from exc
    return state


def cast(tensor: Any, dtype: Any) -> Any:
    """Floating tensors (RL runs save fp32) to the served dtype; integer buffers stay as they are."""
    return (tensor.to(dtype) if tensor.is_floating_point() else tensor).contiguous()


def write_config(config_dir: str, out: Path, dtype: str) -> None:
    """The training config's config.json with the served dtype; edited as JSON so nothing else changes."""
    data = json.loads(Path(config_dir, "config.json").read_text())
    data.pop("quantization_config", None)
    data["dtype"] = dtype
    if "torch_dtype" in data:
        data["torch_dtype"] = dtype
    (out / "config.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_generation_config(config_dir: str, tokenizer_dir: str, out: Path, config: Any) -> None:
    for folder in (config_dir, tokenizer_dir):
        src = Path(folder, "generation_config.json")
        if src.is_file():
            shutil.copyfile(src, out / src.name)
            return
    from transformers import GenerationConfig

    GenerationConfig.from_model_config(config).save_pretrained(str(out))


def copy_tokenizer(tokenizer_dir: str, out: Path) -> list[str]:
    copied = [name for name in TOKENIZER_FILES if Path(tokenizer_dir, name).is_file()]
    if not copied:
        raise Failure(f"{tokenizer_dir} holds no tokenizer files ({', '.join(TOKENIZER_FILES[:3])}, ...)")
    for name in copied:
        shutil.copyfile(Path(tokenizer_dir, name), out / name)
    return copied


def convert(job: DcpJob) -> DcpConversion:
    import torch
    from safetensors.torch import save_file

    started = time.monotonic()
    weights_dir, out = job["weights_dir"], Path(job["out_dir"])
    dtype_name, limit = job["dtype"], int(job["max_shard_bytes"])
    dtype = getattr(torch, dtype_name)
    metadata = read_metadata(weights_dir)
    source_bytes = check_shards(weights_dir, metadata)
    table = tensor_table(metadata)
    config, expected, tied = architecture(job["config_dir"])
    mapping = name_map(sorted(table), expected, tied)
    got = {hf: table[ck][0] for hf, ck in mapping.items() if hf not in tied}
    problem = describe_mismatch(expected, got, weights_dir, job["config_dir"])
    if problem:
        raise Failure(problem)
    prepared = time.monotonic()

    out.mkdir(parents=True, exist_ok=True)
    names = list(expected)  # the architecture's order: readable shards, embeddings first
    shards = plan_shards(names, expected, BYTES[dtype_name], limit)
    files = (
        [SINGLE]
        if len(shards) == 1
        else [f"model-{i:05d}-of-{len(shards):05d}.safetensors" for i in range(1, len(shards) + 1)]
    )
    weight_map: dict[str, str] = {}
    total = 0
    for i, (shard, filename) in enumerate(zip(shards, files, strict=True), 1):
        state = load(weights_dir, metadata, table, [mapping[k] for k in shard])
        tensors = {k: cast(state.pop(mapping[k]), dtype) for k in shard}
        total += sum(t.numel() * t.element_size() for t in tensors.values())
        save_file(tensors, str(out / filename), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard, filename))
        progress(f"shard {i}/{len(shards)}: {len(shard)} tensors -> {filename}")
        del tensors, state
    if len(files) > 1:  # the index and the shards it names are written together, never apart
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (out / INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")

    dropped = sorted(hf for hf in mapping if hf in tied)
    for name in dropped:  # a tied copy that differs would change the model: refuse to drop it
        pair = load(weights_dir, metadata, table, [mapping[name], mapping[tied[name]]])
        if not torch.equal(pair[mapping[name]], pair[mapping[tied[name]]]):
            raise Failure(
                f"the config ties {name} to {tied[name]} (tie_word_embeddings) but the checkpoint's values differ: "
                "use a config with tie_word_embeddings=false"
            )
    written = time.monotonic()

    write_config(job["config_dir"], out, dtype_name)
    write_generation_config(job["config_dir"], job["tokenizer_dir"], out, config)
    tokenizer_files = copy_tokenizer(job["tokenizer_dir"], out)
    summary = check_folder(str(out), dtype_name)
    return DcpConversion(
        **summary,
        dtype=dtype_name,
        source_bytes=source_bytes,
        source_dtypes=sorted({str(d).removeprefix("torch.") for _, d in table.values()}),
        key_prefix_stripped=any(hf != ck for hf, ck in mapping.items()),
        dropped_tied=dropped,
        ignored_non_tensors=len(metadata.state_dict_metadata) - len(table),
        tokenizer_files=tokenizer_files,
        files=sorted(os.listdir(out)),
        seconds=DcpSeconds(
            check=round(prepared - started, 3),
            tensors=round(written - prepared, 3),
            validate=round(time.monotonic() - written, 3),
        ),
        pid=os.getpid(),
    )


def main(argv: list[str]) -> DcpConversion:
    if len(argv) != 1:
        raise Failure("usage: dcp_to_hf.py JOB.json")
    return convert(json.loads(Path(argv[0]).read_text()))


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    run_main(main)
