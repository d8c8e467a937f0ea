"""Live progress and kill-safe batches, no model server: rollouts come from a stand-in `rollout` coroutine
the test releases one by one, so counts, cadence and snapshots are exact."""

from __future__ import annotations

import asyncio
import io
import logging
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from prefect.logging.handlers import PrefectConsoleHandler

from core.config import CollectionConfig, SamplingConfig, ServerConfig
from core.ports import free_port
from core.store import Store
from envs.registry import get_env
from tasks.checkpoints.prepare import PreparedModel
from tasks.collection import batch as batch_module
from tasks.collection.batch import collect_batch_impl, partial_url
from tasks.collection.failures import BatchFailed, RolloutFailed
from tasks.collection.plan import Batch, BatchResult, Planned, batch_url
from tasks.collection.progress import Progress
from tasks.collection.rollout import CollectContext
from tasks.collection.schedule import collect_all
from tasks.runtime.venv import Runtime
from tasks.serving.server import Endpoint, ServerStartError, VLLMServer
from tests.tasks.conftest import rollout as record

INTERVAL = 0.05


class Rollouts:
    """Stands in for `tasks.collection.batch.rollout`: each rollout waits until the test releases it
    (or fails if its prompt id is in `fail`), and is counted."""

    def __init__(self, fail: frozenset[str] = frozenset()) -> None:
        self.calls: list[tuple[str, int]] = []
        self.release = asyncio.Semaphore(0)
        self.fail = fail

    async def __call__(self, ctx: CollectContext, env: Any, batch: Batch, row: dict, repeat: int) -> dict:
        self.calls.append((row["id"], repeat))
        await self.release.acquire()
        if row["id"] in self.fail:
            raise RolloutFailed("transient", "HTTP 503 from the server")
        return record(batch_key=batch.key, prompt_id=row["id"], repeat=repeat, completion_tokens=10)


def context(tmp_path: Path) -> CollectContext:
    return CollectContext(
        "r1", str(tmp_path / "runs" / "r1"), Endpoint("http://127.0.0.1:9/v1", "m"), "fp", SamplingConfig(),
        CollectionConfig(concurrency=8), Store(str(tmp_path)), progress_interval_s=INTERVAL,
    )  # fmt: skip


def batch(n: int, index: int = 0) -> Batch:
    rows = tuple({"id": f"b{index}q{i}", "question": f"q {i}?", "answer": "#### 1"} for i in range(n))
    return Batch("gsm8k", index, f"key-{index}", rows, (0, 1))


async def until(predicate: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_an_open_batch_snapshots_its_finished_rollouts_and_a_retry_after_a_kill_generates_only_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env, planned = get_env("gsm8k"), batch(3)  # 6 rollouts
    partial = Path(partial_url(Store(str(tmp_path)), planned))

    async def killed() -> None:
        first = Rollouts()
        monkeypatch.setattr(batch_module, "rollout", first)
        attempt = asyncio.create_task(collect_batch_impl(context(tmp_path), env, planned))
        await until(lambda: len(first.calls) == 6)
        first.release.release()
        first.release.release()  # 2 of 6 finish
        await until(partial.exists)
        await asyncio.sleep(3 * INTERVAL)  # no new rollouts: no new write
        mtime = partial.stat().st_mtime_ns
        await asyncio.sleep(3 * INTERVAL)
        assert partial.stat().st_mtime_ns == mtime
        attempt.cancel()  # what a kill leaves: the snapshot, no batch file
        with pytest.raises(asyncio.CancelledError):
            await attempt

    asyncio.run(killed())
    assert len(pq.read_table(partial).to_pylist()) == 2
    assert not Path(batch_url(context(tmp_path).run_dir, planned)).exists()  # never a finished batch

    second = Rollouts()
    monkeypatch.setattr(batch_module, "rollout", second)

    async def rerun() -> BatchResult:
        ctx = context(tmp_path)
        attempt = asyncio.create_task(collect_batch_impl(ctx, env, planned))
        await until(lambda: len(second.calls) == 4)
        for _ in range(4):
            second.release.release()
        result = await attempt
        assert ctx.progress.cached == 2 and ctx.progress.generated == 4  # the snapshot counts as cached
        return result

    result = asyncio.run(rerun())
    assert len(second.calls) == 4  # only the rollouts the snapshot did not hold
    rows = pq.read_table(result.url).to_pylist()
    assert sorted((r["prompt_id"], r["repeat"]) for r in rows) == [(f"b0q{i}", r) for i in range(3) for r in (0, 1)]
    assert not partial.exists()  # removed once the batch finished


def test_a_retry_in_the_same_run_counts_each_rollout_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env, planned = get_env("gsm8k"), batch(2)  # 4 rollouts, one fails the first time
    ctx = context(tmp_path)
    ctx.progress = Progress(4)

    async def attempt(rollouts: Rollouts) -> BatchResult:
        monkeypatch.setattr(batch_module, "rollout", rollouts)
        task = asyncio.create_task(collect_batch_impl(ctx, env, planned))
        await until(lambda: len(rollouts.calls) == 4 - ctx.progress.generated)
        for _ in rollouts.calls:
            rollouts.release.release()
        return await task

    with pytest.raises(BatchFailed):
        asyncio.run(attempt(Rollouts(fail=frozenset({"b0q1"}))))
    assert (ctx.progress.done, ctx.progress.errors) == (2, 2)  # 2 finished (kept), 2 failed
    asyncio.run(attempt(Rollouts()))
    assert (ctx.progress.done, ctx.progress.cached, ctx.progress.generated) == (4, 0, 4)


def test_collect_all_reports_rollouts_as_they_finish_on_a_time_cadence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """One open batch of 8 rollouts, released one at a time: progress lines come while it is open (the
    old code logged once per finished batch), with cached and generated apart, then a final line."""
    caplog.set_level(logging.INFO, logger="evalflow")
    env = get_env("gsm8k")
    ctx = context(tmp_path)
    cached = BatchResult(str(tmp_path / "old.parquet"), 4, 0, 40, 1.0)
    Path(cached.url).write_bytes(b"")
    work = [Planned(env, batch(2, 0), cached=cached), Planned(env, batch(4, 1))]
    rollouts = Rollouts()
    monkeypatch.setattr(batch_module, "rollout", rollouts)
    lines_while_open: list[str] = []

    async def go() -> None:
        task = asyncio.create_task(collect_all(ctx, work, collect_batch_impl))
        await until(lambda: len(rollouts.calls) == 8)
        for _ in range(7):
            rollouts.release.release()
            await asyncio.sleep(2.5 * INTERVAL)
        lines_while_open.extend(r.getMessage() for r in caplog.records if r.getMessage().startswith("collect "))
        rollouts.release.release()
        await task

    asyncio.run(go())
    progress = [r.getMessage() for r in caplog.records if r.getMessage().startswith("collect ")]
    done = [int(re.match(r"collect (\d+)/12", line).group(1)) for line in lines_while_open]  # type: ignore[union-attr]
    assert done == sorted(done) and len(set(done)) >= 5 and done[-1] == 11  # per rollout, the batch still open
    assert re.fullmatch(
        r"collect 12/12 rollouts \(100%; 4 cached, 8 generated, 0 errors\) · [\d.]+ rollouts/s · [\d,]+ tokens/s · "
        r"ETA 0:00:00 · finished in 0:00:0\d",
        progress[-1],
    )


def test_the_default_cadence_is_every_10_s_everywhere() -> None:
    """README: a progress line every 10 s. The e2e lane checks the cadence on a real flow run's logs at
    a shorter `collection.progress_interval_s` (tests/flows/test_progress_e2e.py); this pins the default."""
    from tasks.collection.progress import PROGRESS_INTERVAL_S

    assert CollectionConfig().progress_interval_s == PROGRESS_INTERVAL_S == Progress(1).interval_s == 10.0


def test_line_format() -> None:
    progress = Progress(3200)
    progress.add_cached(200)
    for _ in range(1034):
        progress.add_rollout("k", {"completion_tokens": 50, "error": None})
    progress.add_failure()
    progress.started = time.monotonic() - 100
    # no ETA until a batch this run generated has finished, or a tenth of what it generates is done: the early
    # rate is that of a pipeline filling
    early = Progress(3200)
    for _ in range(319):
        early.add_rollout("k", {"completion_tokens": 50, "error": None})
    assert early.line().endswith("ETA after the first batch")
    early.add_rollout("k", {"completion_tokens": 50, "error": None})  # 320 of 3200: a tenth
    assert "ETA after" not in early.line()
    early.batch_done("k", 320)
    assert early.batches_generated == 1
    assert re.fullmatch(
        r"collect 1,234/3,200 rollouts \(39%; 200 cached, 1,034 generated, 1 errors\) · 10\.3 rollouts/s · "
        r"517 tokens/s · ETA 0:03:1\d",
        progress.line(),
    )


def test_on_a_terminal_a_bar_replaces_the_progress_lines_and_other_logs_print_above_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    console_out = io.StringIO()
    handler = PrefectConsoleHandler(stream=console_out)
    logger = logging.getLogger("evalflow")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    terminal = io.StringIO()
    progress = Progress(4, interval_s=INTERVAL)

    async def go() -> None:
        async with progress.reporting(terminal=terminal):
            for _ in range(4):
                progress.add_rollout("k", {"completion_tokens": 5})
                await asyncio.sleep(2 * INTERVAL)
            logger.warning("vLLM restarted")

    try:
        asyncio.run(go())
        assert "4/4 rollouts" in terminal.getvalue() and "vLLM restarted" in terminal.getvalue()
        assert console_out.getvalue() == ""  # progress lines skipped, the warning went through the bar's console
        logger.info("after")
        assert "after" in console_out.getvalue()  # the handler is restored
    finally:
        logger.removeHandler(handler)


def test_server_start_notes_its_elapsed_time_every_10_s_and_fails_with_the_log_tail(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="evalflow")
    log = tmp_path / "vllm.log"
    log.write_text("INFO loading weights\nINFO still loading shard 3\n")
    model = PreparedModel("/m", "m", "fp", "/m", "hf")
    server = VLLMServer(Runtime("gpu", tmp_path / "rt"), model, ServerConfig(), log)
    server.port = free_port()  # nothing listens there
    with subprocess.Popen(["sleep", "30"]) as proc:
        server.proc = proc
        with pytest.raises(ServerStartError, match="still loading shard 3"):
            server.wait_ready(11.5)
        proc.kill()
    notes = [r.getMessage() for r in caplog.records if "waiting for vLLM" in r.getMessage()]
    assert len(notes) == 1 and re.search(r"\(1[01] s so far\): INFO still loading shard 3$", notes[0])  # was 30 s
