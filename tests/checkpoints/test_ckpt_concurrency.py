"""Conversions under concurrency and crashes: separate processes sharing one cache convert once, and a
SIGKILL mid-conversion leaves nothing that looks complete (and no converter running on)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.config import ModelConfig
from tasks.checkpoints import entries, jobs
from tasks.checkpoints.hashing import MARKER
from tasks.checkpoints.light_check import check_hf_folder
from tasks.checkpoints.prepare import plan_model, prepare_model_impl
from tests.checkpoints.conftest import SMALL_LAYERS, cache_entries

REPO = Path(__file__).resolve().parents[2]
CONVERT = """
import dataclasses, json, logging, sys
logging.basicConfig(level=logging.INFO, format="%(process)d %(message)s")
from core.config import ModelConfig
from tasks.checkpoints import jobs, prepare
if len(sys.argv) > 3:
    jobs.MAX_SHARD_BYTES = int(sys.argv[3])
model = prepare.prepare_model_impl(ModelConfig(source=sys.argv[1], cache_dir=sys.argv[2]))
print("RESULT " + json.dumps(dataclasses.asdict(model)), flush=True)
"""
STARTED = re.compile(r"converting \S+ \(dcp, ")  # the log line of a conversion that starts


def test_four_processes_convert_once(dcp_nemo: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    command = [sys.executable, "-c", CONVERT, str(dcp_nemo), str(cache)]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    procs = [subprocess.Popen(command, cwd=REPO, **pipes) for _ in range(4)]  # type: ignore[call-overload]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err[-2000:] for _, err in outs]
    results = [json.loads(out.split("RESULT ", 1)[1]) for out, _ in outs]
    logs = "\n".join(err for _, err in outs)

    assert len(STARTED.findall(logs)) == 1, logs  # exactly one conversion
    assert sorted(r["cache_hit"] for r in results) == [False, True, True, True]
    assert len({r["path"] for r in results}) == 1 and len({r["fingerprint"] for r in results}) == 1
    marker = json.loads((Path(results[0]["path"]) / MARKER).read_text())
    assert marker["converted_by"]["pid"] in [p.pid for p in procs]
    waited = logs.count("another process is preparing")
    print(f"{waited} of 3 processes logged that they waited for the converter's lock")
    assert waited >= 1  # they started together: at least one found the lock held and said so
    assert cache_entries(cache) == [Path(results[0]["path"]).name]


def child_pids(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_sigkill_mid_conversion_then_convert_again(
    dcp_nemo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    shard_bytes = 5_000_000  # several shards (the two-layer model: the embedding's, then three of layers)
    proc = subprocess.Popen(
        [sys.executable, "-c", CONVERT, str(dcp_nemo), str(cache), str(shard_bytes)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        temp: Path | None = None
        while temp is None:
            assert proc.poll() is None, "the conversion ended before it could be killed"
            assert time.monotonic() < deadline
            # killed once the temporary folder exists and the converter runs: mid-conversion, whatever it has
            # written yet (with the small model the shards after the first take milliseconds: no window to aim at)
            for folder in cache.glob(".*.tmp-*") if cache.exists() else []:
                converters = child_pids(proc.pid)
                temp = folder if converters else None
            time.sleep(0.02)
        assert converters, "no converter process found"
        os.kill(proc.pid, signal.SIGKILL)  # the orchestrator only: its converter must not outlive it
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in converters) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in converters), "the converter outlived its killed parent"

    cfg = ModelConfig(source=str(dcp_nemo), cache_dir=str(cache))
    monkeypatch.setattr(jobs, "MAX_SHARD_BYTES", shard_bytes)
    assert temp.exists() and not (temp / MARKER).exists()
    assert plan_model(cfg).cache == "miss"  # the half-written temporary folder is not an entry

    model = prepare_model_impl(cfg)  # the dead holder's lock does not block; its leftovers are removed
    assert not model.cache_hit
    folder = Path(model.path)
    assert (folder / MARKER).exists() and (folder / "model.safetensors.index.json").exists()
    assert len(list(folder.glob("model-*-of-*.safetensors"))) >= 3
    assert check_hf_folder(folder).tensors == 2 + 9 * SMALL_LAYERS  # embedding, norm; 9 per layer
    assert entries.temp_folders(folder) == [] and not temp.exists()
    assert cache_entries(cache) == [folder.name]
