"""A training run's checkpoints, from one listing: which steps exist, which are ready to evaluate.

A trainer writes checkpoints into a run folder (locally or on an object store) while evalflow watches
it: NeMo RL `step_N/` (DCP weights, `.metadata` written last), the Hugging Face trainer's
`checkpoint-N/`, or any layout named by a pattern with `{step}`. The run is listed with ONE recursive
fsspec `find` (sizes and modification times come with it), never one request per step, so polling a
run of hundreds of steps on S3 stays cheap; local folders go through the same code (LocalFileSystem).
A step is ready when its files say the save finished AND none of them changed for `settle_s`: a save
still being flushed (optimizer state, a late shard) is not evaluated half-written.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, cast

import fsspec

from core.store import Store
from core.training_steps import StepsSpec
from tasks.checkpoints import remote
from tasks.checkpoints.errors import CheckpointError
from tasks.checkpoints.layout import STEP, WEIGHT_SUFFIXES, children, detect, find_dcp
from tasks.checkpoints.sources import GENERIC, readable

StepLayout = Literal["nemo-rl", "hf", "pattern"]
PLACEHOLDER = "{step}"
INDEXES = {"model.safetensors.index.json": ".safetensors", "pytorch_model.bin.index.json": ".bin"}
SHARD = re.compile(r"^(?P<stem>.+)-(?P<i>\d+)-of-(?P<n>\d+)(?P<ext>\.safetensors|\.bin)$")
MTIME_FIELDS = ("mtime", "LastModified", "last_modified", "updated", "modified", "created")
# folder names that say nothing about which training run it is (for training_run_id)
RUN_GENERIC = GENERIC | {"checkpoints", "checkpoint", "ckpt", "ckpts", "results", "outputs", "output", "hf"}


@dataclass(frozen=True)
class Step:
    """One checkpoint of a training run, as its listing shows it now."""

    step: int
    source: str  # what a single-checkpoint run's model.source would be
    layout: StepLayout
    ready: bool
    reason: str  # why not ready, one line; "" when ready
    newest_mtime: float | None  # newest modification time among its files (epoch seconds), if the store gives one


@dataclass(frozen=True)
class _File:
    size: int
    mtime: float | None


@dataclass
class _Group:
    """Everything listed under one step: all its files (for settling) and the checkpoint folder's own."""

    step: int
    label: str  # the step folder (pattern: its matched path), for messages
    source: str
    layout: StepLayout
    base: str  # the checkpoint folder's fsspec path (to read a non-standard index json)
    files: dict[str, _File] = field(default_factory=dict)
    checkpoint: dict[str, _File] = field(default_factory=dict)


# -- listing -------------------------------------------------------------------------------------------
def _mtime(meta: dict[str, Any]) -> float | None:
    """Epoch seconds from fsspec details: local `mtime` (a float), s3fs `LastModified` (a datetime), GCS
    `updated` (an ISO string); None when the store gives none."""
    for key in MTIME_FIELDS:
        value = meta.get(key)
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str) and value:
            try:
                return datetime.fromisoformat(value).timestamp()
            except ValueError:
                continue
    return None


def _open(source: str, store: Store | None) -> tuple[fsspec.AbstractFileSystem, str]:
    url = source.removeprefix("file://")
    if not remote.is_url(url):
        url = os.path.expanduser(url)
    return remote.open_fs(store or Store(url), url)


def _list(fs: fsspec.AbstractFileSystem, root: str, source: str) -> tuple[dict[str, _File], set[str]]:
    """Files (relative path -> size, mtime) and folders under `root`, from one recursive listing."""
    root = root.rstrip("/") or "/"
    try:
        fs.invalidate_cache(root)  # a poll must see what landed since the last one
        found = cast(dict[str, dict[str, Any]], fs.find(root, detail=True, withdirs=True))  # path -> its info
        if not found and not fs.exists(root):
            raise FileNotFoundError(root)
    except FileNotFoundError as exc:
        raise CheckpointError(f"{source}: no such folder (check the path, the bucket and the prefix)") from exc
    except Exception as exc:  # s3fs raises a zoo of botocore/aiohttp errors
        raise CheckpointError(
            f"cannot list {source} ({type(exc).__name__}: {exc}); check the URL and model.storage_options"
        ) from exc
    files: dict[str, _File] = {}
    folders: set[str] = set()
    for full, meta in found.items():
        rel = full[len(root) :].strip("/") if full.startswith(root.rstrip("/") + "/") else ""
        if not rel:
            continue
        if meta.get("type", "file") == "directory":
            folders.add(rel)
        else:
            files[rel] = _File(int(meta.get("size") or 0), _mtime(meta))
    return files, folders


def _step_number(name: str) -> int:
    """The number a STEP name ends with (`step_100`, `checkpoint-100`, `iter_100`)."""
    return int(re.split(r"[_-]", name)[-1])


def _folder_groups(source: str, root: str, files: dict[str, _File], folders: set[str]) -> dict[str, _Group]:
    """`step_N/`, `iter_N/`, `checkpoint-N/` children of a run folder."""
    groups: dict[str, _Group] = {}
    shown = source.rstrip("/")
    for rel in [*folders, *files]:
        name = rel.split("/", 1)[0]
        if not STEP.match(name) or (rel == name and rel in files):
            continue
        if name not in groups:
            layout: StepLayout = "hf" if name.startswith("checkpoint-") else "nemo-rl"
            groups[name] = _Group(_step_number(name), name, f"{shown}/{name}", layout, f"{root.rstrip('/')}/{name}")
        if rel in files:
            inner = rel[len(name) + 1 :]
            groups[name].files[inner] = groups[name].checkpoint[inner] = files[rel]
    return groups


def _split_pattern(source: str) -> tuple[str, list[str], list[str]]:
    """(the folder above the first `{step}` component, the components down to the last one, the rest)."""
    scheme, sep, rest = source.partition("://") if "://" in source else ("", "", source)
    parts = rest.split("/")
    at = [i for i, part in enumerate(parts) if PLACEHOLDER in part]
    if "{" in source.replace(PLACEHOLDER, "") or "}" in source.replace(PLACEHOLDER, ""):
        raise CheckpointError(f"{source}: only {PLACEHOLDER} is understood in a checkpoint pattern")
    if scheme and at[0] < 1:
        raise CheckpointError(f"{source}: {PLACEHOLDER} must come after the bucket, in the path")
    root = "/".join(parts[: at[0]]) or ("/" if rest.startswith("/") else ".")
    return f"{scheme}{sep}{root}", parts[at[0] : at[-1] + 1], [p for p in parts[at[-1] + 1 :] if p]


def _pattern_regex(components: list[str]) -> re.Pattern[str]:
    pieces, first = [], True
    for comp in components:
        out = []
        for j, text in enumerate(comp.split(PLACEHOLDER)):
            if j:
                out.append(r"(?P<step>\d+)" if first else r"(?P=step)")
                first = False
            out.append(re.escape(text))
        pieces.append("".join(out))
    return re.compile("/".join(pieces))


def _pattern_groups(
    source: str, root: str, components: list[str], tail: list[str], files: dict[str, _File], folders: set[str]
) -> dict[str, _Group]:
    """The folders a `{step}` pattern names, with every file under their step-numbered part."""
    regex, depth, groups = _pattern_regex(components), len(components), {}
    for rel in [*folders, *files]:
        parts = rel.split("/")
        match = regex.fullmatch("/".join(parts[:depth])) if len(parts) >= depth else None
        if match is None or (len(parts) == depth and rel in files):
            continue
        key = match.group(0)
        if key not in groups:
            label, number = "/".join([key, *tail]), match.group("step")
            filled = source.replace(PLACEHOLDER, number)
            groups[key] = _Group(int(number), label, filled, "pattern", f"{root.rstrip('/')}/{label}")
        if rel in files:
            inner = parts[depth:]
            groups[key].files["/".join(inner)] = files[rel]
            if len(inner) > len(tail) and inner[: len(tail)] == tail:
                groups[key].checkpoint["/".join(inner[len(tail) :])] = files[rel]
    return groups


# -- readiness -----------------------------------------------------------------------------------------
def _dcp_reason(files: dict[str, _File], weights: str, label: str) -> str:
    names = children(files, weights)
    if ".metadata" not in names:
        return f"{label}: no .metadata yet (the save is not finished)"
    if not any(n.endswith(".distcp") for n in names):
        return f"{label}: .metadata but no *.distcp shards in {weights or './'}"
    return ""


def _expected_shards(shards: list[re.Match[str]]) -> set[str]:
    """The shard names an index json lists, from the standard `model-0000i-of-0000N` names alone: no read."""
    names = set()
    for m in shards:
        width, total = len(m["i"]), int(m["n"])
        names |= {f"{m['stem']}-{i:0{width}d}-of-{m['n']}{m['ext']}" for i in range(1, total + 1)}
    return names


def _hf_reason(files: dict[str, _File], label: str, read_index: Callable[[str], set[str]]) -> str:
    top = children(files, "")
    if "config.json" not in top:
        return f"{label}: no config.json yet"
    weights = [n for n in top if n.endswith(WEIGHT_SUFFIXES)]
    if not weights:
        return f"{label}: config.json but no weights (*.safetensors / *.bin) yet"
    index = next((name for name in INDEXES if name in top), None)
    shards = [m for n in weights if (m := SHARD.match(n))]
    if index is None:
        if shards:
            return f"{label}: {len(shards)} weight shards but no index json yet (the save is not finished)"
        return ""
    named = [m for m in shards if m["ext"] == INDEXES[index]]
    try:
        expected = _expected_shards(named) if named else read_index(index)
    except Exception as exc:  # unreadable or half-written json, a store error
        return f"{label}: {index} cannot be read ({type(exc).__name__}: {exc})"
    missing = sorted(expected - set(top))
    if missing:
        return f"{label}: {len(missing)} of {len(expected)} shards named by {index} missing ({missing[0]}, ...)"
    return ""


def _content_reason(group: _Group, read_index: Callable[[str], set[str]]) -> tuple[str, StepLayout]:
    """Why the checkpoint folder is not a finished checkpoint ("" if it is), and its layout by content."""
    files, label = group.checkpoint, group.label
    if not files:
        return f"{label}: does not exist yet" if group.layout == "pattern" else f"{label}: no files yet", group.layout
    weights = find_dcp(files)
    top = children(files, "")
    if weights is not None and not ("config.json" in top and any(n.endswith(WEIGHT_SUFFIXES) for n in top)):
        layout: StepLayout = "pattern" if group.layout == "pattern" else "nemo-rl"
        reason = _dcp_reason(files, weights, label)
    elif "config.json" in top or any(n.endswith(WEIGHT_SUFFIXES) or n in INDEXES for n in top):
        layout = "pattern" if group.layout == "pattern" else "hf"
        reason = _hf_reason(files, label, read_index)
    else:
        sample = sorted(files)[:3]
        return (
            f"{label}: not a checkpoint (neither policy/weights/.metadata + *.distcp nor config.json + "
            f"*.safetensors / *.bin); found {sample}",
            group.layout,
        )
    if not reason:
        try:
            detect({rel: f.size for rel, f in files.items()}, label)
        except CheckpointError as exc:
            reason = str(exc).splitlines()[0]
    return reason, layout


def _judge(group: _Group, fs: fsspec.AbstractFileSystem, settle_s: float, now: float) -> Step:
    def read_index(name: str) -> set[str]:
        return set(json.loads(fs.cat_file(f"{group.base}/{name}"))["weight_map"].values())

    mtimes = [f.mtime for f in group.files.values() if f.mtime is not None]
    newest = max(mtimes) if mtimes else None
    reason, layout = _content_reason(group, read_index)
    if not reason and newest is not None and newest > now - settle_s:
        reason = f"{group.label}: files changed {max(now - newest, 0):.0f} s ago (settle time {settle_s:g} s)"
    return Step(group.step, group.source, layout, not reason, reason, newest)


def list_steps(
    source: str, store: Store | None = None, *, settle_s: float = 60.0, now: float | None = None
) -> list[Step]:
    """Every step of a training run (a folder of `step_N/`, `iter_N/` or `checkpoint-N/`, or a pattern
    with `{step}`), sorted by step number, ready or not.

    One recursive listing with details serves every step (one request per 1000 objects on S3). A
    step is ready when its checkpoint is complete (DCP: `.metadata`, which torch writes last; HF:
    config.json, the weights and every shard the index names, inferred from the standard
    `-0000i-of-0000N` names without reading the index) AND no file of the step changed within
    `settle_s` of `now` (a store's clock ahead of ours only delays readiness). A store that gives no
    modification times is taken as settled. `store` opens a URL with its options and credentials (the
    model's: model.storage_options). Raises CheckpointError (one line) when `source` is
    missing or holds no step folders (a single checkpoint, a typo)."""
    now = time.time() if now is None else now
    text = source.strip()
    if "{step" in text:  # `{step:06d}` too, to refuse it clearly
        root_source, components, tail = _split_pattern(text)
        fs, root = _open(root_source, store)
        files, folders = _list(fs, root, f"{root_source} (the folder of {text})")
        groups = _pattern_groups(text, root, components, tail, files, folders)
        if not groups:
            raise CheckpointError(
                f"no folder in {root_source} matches {text}; name a training run's folder or a pattern with {{step}}"
            )
    else:
        fs, root = _open(text, store)
        files, folders = _list(fs, root, text)
        groups = _folder_groups(text, root, files, folders)
        if not groups:
            single = " (it looks like one checkpoint: give it as model.source)" if _looks_like_step(text) else ""
            raise CheckpointError(
                f"no step_N/ or checkpoint-N/ folders in {text}{single}; "
                "name a training run's folder or a pattern with {step}"
            )
    steps = [_judge(group, fs, settle_s, now) for group in groups.values()]
    return sorted(steps, key=lambda s: (s.step, s.source))


def _looks_like_step(source: str) -> bool:
    return any(STEP.match(part) for part in source.rstrip("/").split("/"))


# -- selection -----------------------------------------------------------------------------------------
def select_steps(steps: list[Step], spec: StepsSpec) -> list[Step]:
    """The READY steps `spec` asks for, in step order ("latest": the newest ready step, if any)."""
    ready = sorted((s for s in steps if s.ready), key=lambda s: (s.step, s.source))
    if spec.kind == "all":
        return ready
    if spec.kind == "latest":
        return ready[-1:]
    if spec.kind == "every":
        return [s for s in ready if s.step % spec.every == 0]
    wanted = set(spec.steps)
    return [s for s in ready if s.step in wanted]


# -- identity ------------------------------------------------------------------------------------------
def _normalised(source: str) -> str:
    """One spelling per run: a local path made absolute (`~`, `./x`, `x/` alike), a URL without trailing '/'."""
    text = source.strip().removeprefix("file://")
    if remote.is_url(text):
        scheme, _, rest = text.partition("://")
        return f"{scheme.lower()}://{re.sub('/+', '/', rest).rstrip('/')}"
    return os.path.normpath(os.path.abspath(os.path.expanduser(text)))


def training_run_id(source: str) -> str:
    """`grpo-qwen3-1a2b3c4d`: the run folder's telling name (generic trailing names like `checkpoints`
    skipped; a pattern's folder above `{step}`) plus 8 hex of the normalised source's sha256, so two
    runs with the same folder name in different places never share an id. Letters, digits, `._-`."""
    normal = _normalised(source)
    path = normal.split("://", 1)[-1]
    parts = [p for p in path.split(PLACEHOLDER, 1)[0].split("/") if p]
    if PLACEHOLDER in path and parts and not path.split(PLACEHOLDER, 1)[0].endswith("/"):
        parts.pop()  # `ckpt_{step}`: the component holding {step} names a step, not the run
    while len(parts) > 1 and parts[-1].lower() in RUN_GENERIC:
        parts.pop()
    name = readable(parts[-1]) if parts and parts[-1].lower() not in RUN_GENERIC else "run"
    digest = hashlib.sha256(normal.encode("utf-8")).hexdigest()[:8]
    return f"{name[:50]}-{digest}"


def same_source(a: str, b: str) -> bool:
    """Whether two spellings name the same checkpoint (`./run/step_1/`, its absolute path, `file://...`)."""
    return _normalised(a) == _normalised(b)
