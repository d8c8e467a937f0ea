"""A managed server for one evaluation: its own (started in a server slot, stopped when the evaluation ends), or
the keeper's when a watcher keeps one server for a training run's steps (tasks/serving/keeper.py)."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from core.config import ServerConfig
from core.record import ServerInfo, Slot
from tasks.checkpoints.prepare import PreparedModel
from tasks.runtime.venv import ensure_runtime
from tasks.serving.keeper import ServerKeeper, active_keeper
from tasks.serving.server import VLLMServer
from tasks.serving.slots import server_slot


@dataclass
class Managed:
    server: VLLMServer
    info: ServerInfo
    keeper: ServerKeeper | None  # the server is the keeper's: not stopped by the evaluation

    async def release(self, failed: bool) -> None:
        """After the evaluation: stop the server it started; a kept server stays up, unless the evaluation
        failed with it (then the next one starts afresh rather than trust it)."""
        if self.keeper is None:
            await asyncio.to_thread(self.server.stop)
        elif failed:
            await self.keeper.close()


async def start_managed(
    stack: contextlib.AsyncExitStack, cfg: ServerConfig, model: PreparedModel, log_path: Path
) -> Managed:
    """A server holding `model`, ready; a server slot of this host held on `stack` for one of its own."""
    runtime = ensure_runtime(cfg.runtime)
    need = cfg.tensor_parallel_size * cfg.data_parallel_size if runtime.flavor == "gpu" else 1
    keeper = active_keeper() if cfg.swap_weights else None
    if keeper is not None:
        served = await keeper.serve(runtime, model, cfg, log_path, need)
        server, slot = served.server, served.slot
        how: Literal["started", "swapped", "kept"] | None = served.how
        seconds: float | None = round(served.seconds, 1)
        probe = served.probe.model_dump() if served.probe is not None else None
        why = served.why or None
    else:
        slot = await stack.enter_async_context(server_slot(runtime.flavor, need))
        server = VLLMServer(runtime, model, cfg, log_path, pin=slot.env)
        await asyncio.to_thread(server.start)
        how, seconds, probe, why = None, None, None, None
    info = ServerInfo(
        pid=server.pid, port=server.port, log=str(server.log_path),
        slot=Slot(kind=slot.kind, devices=list(slot.devices), waited_s=round(slot.waited_s, 1)),
        how=how, ready_s=seconds, probe=probe, why=why,
    )  # fmt: skip
    return Managed(server, info, keeper)
