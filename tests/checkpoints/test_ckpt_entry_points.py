"""Model preparation as a user meets it, from another working directory than the repo: relative paths
mean the caller's files, a conversion that wrote nothing is never a cache entry, and every entry point
(`evalflow prepare`, `evalflow run`, their dry runs) says what is wrong in one line with exit status 2."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.main import app
from core.config import ModelConfig
from tasks.checkpoints.decide import decide
from tasks.checkpoints.errors import CheckpointError
from tasks.checkpoints.hashing import MARKER
from tasks.checkpoints.prepare import PreparedModel, plan_model, prepare_model_impl
from tasks.checkpoints.sources import find_default_gguf
from tasks.runtime.venv import Runtime
from tests.checkpoints.conftest import link_step
from tests.checkpoints.test_ckpt_bad_sources import WEIGHTS, flip
from tests.conftest import REPO_ROOT

EVALFLOW = str(Path(sys.executable).with_name("evalflow"))
EMPTY_SHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def evalflow(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`evalflow ARGS` as a user runs it: its own process, in `cwd`."""
    env = {k: v for k, v in os.environ.items() if k not in ("EVALFLOW_CHECKPOINT_CACHE",)}
    return subprocess.run([EVALFLOW, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def here(monkeypatch: pytest.MonkeyPatch) -> Callable[..., subprocess.CompletedProcess[str]]:
    """`evalflow ARGS` in this process, in `cwd` (saves each dry run the 2 s of a new process's imports)."""
    monkeypatch.delenv("EVALFLOW_CHECKPOINT_CACHE", raising=False)

    def invoke(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
        monkeypatch.chdir(cwd)
        result = CliRunner().invoke(app, list(args), prog_name="evalflow")
        return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)

    return invoke


def one_line(done: subprocess.CompletedProcess[str], starts: str) -> str:
    """The command failed with status 2 and one line on stderr (log lines before it aside), no traceback."""
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(starts), done.stderr[-3000:]
    return last


@pytest.fixture
def default_gguf(runtime: Runtime) -> Path:
    return find_default_gguf(runtime)


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A working directory that is not the repo root."""
    cwd = tmp_path / "work"
    cwd.mkdir()
    return cwd


def test_a_truncated_gguf_fails_every_dry_run_saying_so(default_gguf: Path, elsewhere: Path, here: Any) -> None:
    size = default_gguf.stat().st_size
    with default_gguf.open("rb") as src:
        (elsewhere / "cut.gguf").write_bytes(src.read(size // 2))  # an interrupted download
        src.seek(0)
        (elsewhere / "head.gguf").write_bytes(src.read(4096))  # cut inside the header
    line = one_line(here(elsewhere, "prepare", "cut.gguf", "--dry-run"), "checkpoint error: source ")
    assert f"{elsewhere / 'cut.gguf'} is truncated: {size // 2} bytes, its 272 tensors need {size}" in line
    line = one_line(here(elsewhere, "run", "--dry-run", "model.source=head.gguf"), "checkpoint error: model.source ")
    assert "is truncated: the file ends inside its header, after 4096 bytes" in line
    line = one_line(evalflow(elsewhere, "run", "model.source=cut.gguf", "benchmarks.0.limit=1"), "checkpoint error: ")
    assert "is truncated" in line


def test_an_unknown_architecture_fails_the_dry_run(
    default_gguf: Path, base_model: PreparedModel, dcp_nemo: Path, elsewhere: Path, here: Any
) -> None:
    data = default_gguf.read_bytes()
    at = data.index(b"general.architecture") + len(b"general.architecture") + 12  # type (4), length (8)
    assert data[at : at + 5] == b"llama"
    (elsewhere / "other.gguf").write_bytes(data[:at] + b"lxama" + data[at + 5 :])
    line = one_line(here(elsewhere, "prepare", "other.gguf", "--dry-run"), "checkpoint error: source ")
    assert "GGUF architecture 'lxama' is unknown to this runtime's transformers" in line

    link_step(dcp_nemo, elsewhere / "run" / "step_1")
    hf = elsewhere / "arch"  # the architecture config given by the user: a model this runtime does not know
    hf.mkdir()
    config = json.loads(Path(base_model.path, "config.json").read_text())
    (hf / "config.json").write_text(json.dumps({**config, "architectures": ["FooForCausalLM"], "model_type": "foo"}))
    done = here(elsewhere, "run", "--dry-run", "model.source=run/step_1", "model.config_path=arch")
    line = one_line(done, "checkpoint error: model.source ")
    assert "architecture FooForCausalLM (model_type 'foo') is unknown to this runtime's vLLM" in line


def test_a_dcp_config_error_names_the_option_typed(dcp_flat: Path, elsewhere: Path, here: Any) -> None:
    link_step(dcp_flat, elsewhere / "step_1")
    line = one_line(here(elsewhere, "prepare", "step_1", "--dry-run"), "checkpoint error: source ")
    assert "--config-path" in line and "model.config_path" not in line


def test_a_dcp_missing_a_shard_fails_the_dry_run(dcp_nemo: Path, elsewhere: Path, here: Any) -> None:
    """`.metadata` is read against the shard files in the plan (no tensor loaded), not minutes later."""
    step = link_step(dcp_nemo, elsewhere / "step_1")
    (step / "policy/weights/__0_1.distcp").unlink()
    done = here(elsewhere, "run", "--dry-run", "model.source=step_1", "model.cache_dir=c")
    line = one_line(done, f"checkpoint error: checking model.source {step}: ")
    assert line.endswith(f"{step / 'policy/weights/__0_1.distcp'} is missing: .metadata lists it")


def test_an_entry_without_its_files_is_no_hit(default_gguf: Path, tmp_path: Path) -> None:
    """Written by an older evalflow that published an empty conversion: the marker alone is not a model."""
    cache = tmp_path / "cache"
    cfg = ModelConfig(source=str(default_gguf), cache_dir=str(cache))
    decision = decide(cfg)
    assert decision.action == "convert" and decision.entry is not None
    entry = decision.entry.path
    entry.mkdir(parents=True)
    (entry / MARKER).write_text(json.dumps({"fingerprint": EMPTY_SHA, "key": decision.job.key}))  # type: ignore[union-attr]
    assert decide(cfg).action == "convert"  # not "hit"
    assert plan_model(cfg).cache == "miss"


def test_a_conversion_that_writes_nothing_is_not_published(
    default_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tasks.checkpoints import jobs

    monkeypatch.setattr(jobs, "run_script", lambda *args, **kwargs: {"files": []})  # exit 0, folder empty
    cache = tmp_path / "cache"
    with pytest.raises(CheckpointError, match=r"wrote no loadable model: .* has no config\.json"):
        prepare_model_impl(ModelConfig(source=str(default_gguf), cache_dir=str(cache)))
    assert [p.name for p in cache.iterdir() if not p.name.startswith(".")] == []


# two real conversions (~20 s each) and a temporary Prefect API, but no vLLM server: in the fast lane, handed out
# first (tests/conftest.py LONGEST_FIRST), its waits overlap the other workers' tests
def test_relative_paths_from_another_directory_convert_and_fail_in_one_line(
    default_gguf: Path, dcp_nemo: Path, elsewhere: Path
) -> None:
    os.link(default_gguf, elsewhere / "model.Q4_1.gguf")  # the README's own example, from its folder
    done = evalflow(elsewhere, "prepare", "model.Q4_1.gguf", "--cache-dir", "ckpts")
    assert done.returncode == 0, done.stderr[-3000:]
    folder = Path(done.stdout.strip().splitlines()[-1])
    assert folder.parent == elsewhere / "ckpts" and (folder / "config.json").is_file()
    assert (folder / "model.safetensors").stat().st_size > 100e6
    fingerprint = json.loads((folder / MARKER).read_text())["fingerprint"]
    assert fingerprint != EMPTY_SHA and "prepared" in done.stderr
    assert f"converting {elsewhere / 'model.Q4_1.gguf'} (gguf, 98 MB, bfloat16) -> {folder}" in done.stderr  # progress
    assert not (REPO_ROOT / "tasks/checkpoints/ckpts").exists()  # nothing written into the package
    again = evalflow(elsewhere, "prepare", "model.Q4_1.gguf", "--cache-dir", "ckpts", "--dry-run")
    assert json.loads(again.stdout)["cache"] == "hit"

    # a shard corrupt inside (same size) is only seen by the conversion: `evalflow run` says it in one line
    step = link_step(dcp_nemo, elsewhere / "run" / "step_1", own=(f"{WEIGHTS}/__0_1.distcp",))
    flip(step / WEIGHTS / "__0_1.distcp", 200_000_000)
    done = evalflow(elsewhere, "run", "model.source=run/step_1", "model.cache_dir=ckpts", "benchmarks.0.limit=1")
    line = one_line(done, "checkpoint error: converting model.source ")
    assert f"{step / WEIGHTS / '__0_1.distcp'}" in line and "fails its check" in line
    frames = [line for line in done.stderr.splitlines() if line.lstrip().startswith('File "')]
    assert frames == []  # Prefect's task and flow runs log their failure as a line, not a traceback
    entries = [p for p in (elsewhere / "ckpts").iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert entries == [folder]  # the failed conversion left no entry


def test_prepare_says_what_it_does_on_stderr_and_the_path_on_stdout(dcp_nemo: Path, elsewhere: Path) -> None:
    """Before, `log_to_stderr` was a `basicConfig` after Prefect had configured logging: nothing showed."""
    link_step(dcp_nemo, elsewhere / "step_1")
    done = evalflow(elsewhere, "prepare", "step_1", "--cache-dir", "c")
    assert done.returncode == 0, done.stderr[-3000:]
    folder = elsewhere / "c" / done.stdout.strip().rsplit("/", 1)[-1]
    assert done.stdout.strip().splitlines() == [str(folder)]
    assert (
        f"converting {elsewhere / 'step_1'} (dcp, " in done.stderr
        and f"converted {elsewhere / 'step_1'} in " in done.stderr
    )
    assert "shard 1/1: " in done.stderr  # the converter's own progress lines


def test_the_heartbeat_says_written_bytes_rate_and_time_left(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging
    import threading
    import time

    from tasks.checkpoints import runner

    out = tmp_path / "out"
    out.mkdir()
    stop = threading.Event()
    caplog.set_level(logging.INFO)
    runner.PROGRESS_S, saved = 0.2, runner.PROGRESS_S
    try:
        beat = threading.Thread(target=runner._heartbeat, args=("converting x", runner.Watch(out, 4_000_000), stop))
        beat.start()
        time.sleep(0.3)
        (out / "model.safetensors").write_bytes(b"\0" * 1_000_000)
        time.sleep(0.3)
        stop.set()
        beat.join()
    finally:
        runner.PROGRESS_S = saved
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("converting x: 0 s, written 0 of about 4 MB") and "left" not in lines[0]
    assert re.search(r"written 1 of about 4 MB \(\d+\.\d MB/s, about \d+ s left\)$", lines[-1]), lines
