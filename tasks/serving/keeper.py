"""One managed server for a sequence of evaluations: each next checkpoint loaded into it in place, and proven.

A watcher evaluating the steps of a training run (flows/watch.py) opens `keep_servers()`; while it is open, an
evaluation that needs a managed server asks the keeper (`active_keeper()`) instead of starting its own:

- the same checkpoint under the same settings: the server as it is;
- another checkpoint that `swap.swap_key` says the server can take (same server settings, architecture and
  config, tokenizer and chat template, generation config): its weights are loaded in place (tasks/serving/swap.py)
  and proven (tasks/serving/probe.py) before it is handed out;
- anything else, a swap that fails or hangs, a proof that fails, a server that died: the server is stopped and
  a fresh one started, with one line saying why.

A fresh server's probe is kept as the checkpoint's reference. The server is stopped when the block closes, and
by VLLMServer's own exit hooks and reaper if the process dies first; the server slot is held as long as it runs.
`server.swap_weights: false` turns swapping off (every checkpoint then gets a fresh server, as without a keeper).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from core.config import ServerConfig
from core.logs import get_logger
from tasks.checkpoints.prepare import PreparedModel
from tasks.runtime.venv import Runtime
from tasks.serving import probe as proof
from tasks.serving.server import VLLMServer
from tasks.serving.slots import Slot, server_slot
from tasks.serving.swap import SwapError, SwapKey, differences, swap_key, swap_weights

SWAP_TIMEOUT_S = 600.0  # a reload of a large checkpoint from a slow disk; a hang beyond it restarts the server

_ACTIVE: ContextVar[ServerKeeper | None] = ContextVar("evalflow_server_keeper", default=None)


@dataclass
class Served:
    """What the keeper handed out: the server, its slot, and how it came to hold the checkpoint."""

    server: VLLMServer
    slot: Slot
    how: Literal["started", "swapped", "kept"]
    seconds: float = 0.0  # the start or the swap, proof included
    why: str = ""  # why a server was started rather than swapped
    probe: proof.Probe | None = None  # what the server answered the probe with, holding this checkpoint


@dataclass
class _Held:
    server: VLLMServer
    slot: Slot
    stack: contextlib.AsyncExitStack
    key: SwapKey | None
    fingerprint: str
    probe: proof.Probe | None


class ServerKeeper:
    """Holds at most one managed server (and its slot) across evaluations in this process."""

    def __init__(self) -> None:
        self.held: _Held | None = None
        self.starts = 0
        self.swaps = 0

    def _command_key(self, server: VLLMServer) -> SwapKey | None:
        """The server's swap key: its command line without the model's path, name and the port."""
        command, skip = server.command(), {"--model", "--served-model-name", "--port"}
        kept = [a for i, a in enumerate(command) if a not in skip and (i == 0 or command[i - 1] not in skip)]
        env = {k: v for k, v in server.environment().items() if k.startswith(("VLLM_", "CUDA_", "OMP_"))}
        env.pop("VLLM_API_KEY", None)
        return swap_key(server.model.path, kept, env)

    async def serve(
        self, runtime: Runtime, model: PreparedModel, cfg: ServerConfig, log_path: Path, need: int
    ) -> Served:
        """A server that holds `model`, proven; started, swapped or kept as it is."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        candidate = VLLMServer(runtime, model, cfg, log_path, swappable=True)
        key = self._command_key(candidate)
        held, why = self.held, ""
        if held is not None and not held.server.alive():
            why = "the kept server is not running"
        elif held is not None and (key is None or held.key is None):
            why = "the model is not a local folder"
        elif held is not None and held.key != key:
            assert key is not None and held.key is not None
            why = differences(held.key, key)
        elif held is not None and held.fingerprint == model.fingerprint:
            return Served(held.server, held.slot, "kept", probe=held.probe)
        elif held is not None:
            try:
                await self._swap(held, model, key)
                return Served(held.server, held.slot, "swapped", loop.time() - started, probe=held.probe)
            except Exception as exc:  # any failure (HTTP, a dead server, the hashing): start afresh
                why = f"the swap was not proven: {' '.join(str(exc).split())[:300] or type(exc).__name__}"
        if held is not None:
            get_logger().info("starting a fresh server for %s: %s", model.path, why)
            await self.close()
        await self._start(candidate, runtime, key, need)
        assert self.held is not None
        return Served(self.held.server, self.held.slot, "started", loop.time() - started, why, self.held.probe)

    async def _start(self, server: VLLMServer, runtime: Runtime, key: SwapKey | None, need: int) -> None:
        stack = contextlib.AsyncExitStack()
        try:
            slot = await stack.enter_async_context(server_slot(runtime.flavor, need))
            server.pin = slot.env
            stack.callback(server.stop)
            await asyncio.to_thread(server.start)
            probe = await asyncio.to_thread(proof.run_probe, server.base_url, server.served_as, server.api_key)
        except BaseException:
            await stack.aclose()
            raise
        if key is not None:
            proof.record_reference(server.model.fingerprint, key.digest, probe)
        self.held = _Held(server, slot, stack, key, server.model.fingerprint, probe)
        self.starts += 1

    async def _swap(self, held: _Held, model: PreparedModel, key: SwapKey | None) -> None:
        """Load `model` into the held server and prove it, or raise SwapError (the caller starts afresh)."""
        server, logger = held.server, get_logger()
        assert key is not None
        logger.info("loading %s into the running server (was %s)", model.path, server.model.path)
        previous = held.probe
        server.model = model  # from here on a restart of this server (the watchdog's) loads the new checkpoint
        held.fingerprint, held.probe = "", None  # what it holds is unknown until proven
        await asyncio.to_thread(swap_weights, server.root_url, model.path, SWAP_TIMEOUT_S)
        if not server.alive():
            raise SwapError("the server exited during the swap")
        probe = await asyncio.to_thread(proof.run_probe, server.base_url, server.served_as, server.api_key)
        if previous is not None and probe.same_as(previous):
            raise SwapError(f"the probe equals the previous checkpoint's ({probe.gap(previous)}): weights unchanged")
        reference = proof.reference(model.fingerprint, key.digest)
        vouched = ""
        if reference is not None:
            if not probe.same_as(reference):
                raise SwapError(f"the probe differs from a fresh server's for this checkpoint ({probe.gap(reference)})")
            vouched = "the probe equals a fresh server's"
        else:
            compared, wrong = await asyncio.to_thread(self._weights, server, model, _dtype(server, key))
            if wrong:
                raise SwapError(f"the loaded weights differ from the checkpoint's: {', '.join(wrong[:5])}")
            if not compared:
                raise SwapError("no fresh server's probe of this checkpoint and no weight checksum to compare")
            vouched = f"{compared} weight checksums equal the checkpoint's"
        held.fingerprint, held.probe = model.fingerprint, probe
        self.swaps += 1
        logger.info("swap proven: the probe differs from the previous checkpoint's and %s", vouched)

    @staticmethod
    def _weights(server: VLLMServer, model: PreparedModel, dtype: str) -> tuple[int, list[str]]:
        if not dtype or dtype == "auto":
            return 0, []
        loaded = proof.server_checksums(server.root_url)
        expected = proof.checkpoint_digests(server.runtime, model.path, dtype)
        return proof.weights_match(loaded, expected)

    async def close(self) -> None:
        held, self.held = self.held, None
        if held is not None:
            await held.stack.aclose()


def _dtype(server: VLLMServer, key: SwapKey) -> str:
    """The dtype the server holds its weights in: the CPU choice, `server.dtype`, else the checkpoint's own."""
    if server.cpu is not None and server.cpu.dtype:
        return server.cpu.dtype
    if server.cfg.dtype != "auto":
        return str(server.cfg.dtype)
    return str(key.config.get("torch_dtype") or key.config.get("dtype") or "")


@contextlib.asynccontextmanager
async def keep_servers() -> AsyncIterator[ServerKeeper]:
    """While open, managed servers of this context outlive an evaluation and take the next checkpoint in place."""
    keeper = ServerKeeper()
    token = _ACTIVE.set(keeper)
    try:
        yield keeper
    finally:
        _ACTIVE.reset(token)
        await keeper.close()


def active_keeper() -> ServerKeeper | None:
    return _ACTIVE.get()
