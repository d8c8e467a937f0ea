"""`evalflow local ...` against real Prefect servers on loopback, no vLLM: blocks, work pools, the server.

Block types register from any directory without PYTHONPATH; the default blocks and work pools are
created once and kept; a background server is started and stopped through Prefect's own CLI.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import Result

from core.ports import free_port
from ops import local
from tests.cli.conftest import EVALFLOW, PREFECT
from tests.conftest import wait_for


def read(api: str, fn: Callable[[Any], Any]) -> Any:
    from prefect.client.orchestration import PrefectClient

    async def go() -> Any:
        async with PrefectClient(api) as client:
            return await fn(client)

    return asyncio.run(go())


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without PYTHONPATH: the project must be importable because it is installed."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PREFECT_API_URL")}
    return {**env, **extra}


def test_block_types_register_from_any_directory(prefect_server: tuple[str, Path], tmp_path: Path) -> None:
    api, _ = prefect_server
    out = subprocess.run([PREFECT, "block", "register", "-m", "blocks"], cwd=tmp_path,
                         env=clean_env(PREFECT_API_URL=api), capture_output=True, text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    slugs = {t.slug for t in read(api, lambda c: c.read_block_types())}
    assert {"evalflow-vllm-server", "evalflow-run-store"} <= slugs


def test_local_blocks_saves_the_defaults_once(prefect_server: tuple[str, Path], tmp_path: Path) -> None:
    api, _ = prefect_server
    # the lane's server is shared: start from none of evalflow's blocks (another test may have saved them)
    documents = read(api, lambda c: c.read_block_documents())
    for doc in documents:
        if doc.block_type.slug.startswith("evalflow-"):
            read(api, lambda c, doc_id=doc.id: c.delete_block_document(doc_id))
    store = tmp_path / "store"
    env = clean_env(PREFECT_API_URL=api, EVALFLOW_STORE_URL=str(store))
    first = subprocess.run([EVALFLOW, "local", "blocks"], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=600)  # fmt: skip
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    again = subprocess.run([EVALFLOW, "local", "blocks"], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=600)  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    assert "evalflow-run-store/runs: exists, kept" in again.stdout
    documents = read(api, lambda c: c.read_block_documents())
    runs = next(d for d in documents if d.name == "runs" and d.block_type.slug == "evalflow-run-store")
    assert runs.data["url"] == str(store)


def test_work_pools_are_created_then_kept(
    prefect_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    api, _ = prefect_server
    monkeypatch.setenv("PREFECT_API_URL", api)
    local.pools()
    local.pools()
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2:] == [f"work pool {pool}: exists" for pool in local.POOLS]
    assert {p.name: p.type for p in read(api, lambda c: c.read_work_pools())} == {
        "evalflow-cpu": "process",
        "evalflow-gpu": "process",
    }


def test_local_server_uses_the_server_that_answers(
    prefect_server: tuple[str, Path], evalflow: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    api, _ = prefect_server
    monkeypatch.setenv("PREFECT_API_URL", api)
    result = evalflow("local", "server")
    assert result.exit_code == 0, result.output
    assert "(already running)" in result.stdout

    monkeypatch.setenv("PREFECT_API_URL", f"http://127.0.0.1:{free_port()}/api")
    result = evalflow("local", "server")  # a named server that does not answer: nothing is started
    assert result.exit_code == 1 and "does not answer" in result.stderr


def test_background_server_starts_once_and_stops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`prefect server start` in its own session and home, its output in a file (not on a pipe that
    closes when the starter exits: the server would die of it when it first logs), then stopped."""
    port = free_port()
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setattr(local, "HOME", tmp_path / ".prefect")
    monkeypatch.setattr(local, "PORT", port)
    monkeypatch.setattr(local, "DEFAULT_API", f"http://127.0.0.1:{port}/api")
    try:
        local.server()
        assert local.healthy()
        pid = int((tmp_path / ".prefect" / "server.pid").read_text())
        log = tmp_path / ".prefect" / "server.log"
        assert os.readlink(f"/proc/{pid}/fd/1") == os.readlink(f"/proc/{pid}/fd/2") == str(log)
        assert "prefect config set PREFECT_API_URL" in log.read_text()  # Prefect's banner, kept
        settings = httpx.get(f"http://127.0.0.1:{port}/api/admin/settings", timeout=10).json()
        assert settings["server"]["analytics_enabled"] is False
    finally:
        local.stop()
    wait_for(lambda: not local.healthy(), 60, "the server to stop")
    assert not (tmp_path / ".prefect" / "server.pid").exists()
