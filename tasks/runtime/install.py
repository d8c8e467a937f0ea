"""Installing packages into the vLLM runtime: with uv where it can (parallel downloads, no bytecode compiled
for the thousands of modules never imported; bench/runtime_install.py on a 2-core EPYC, empty caches, the
whole runtime: uv 62 s, pip 173 s), with pip's own configuration carried over, else with pip.

The CPU torch wheel, a private mirror or a constraints file reach a machine through pip's configuration
(pip.conf, PIP_* variables), which uv does not read: `uv_options` turns what `pip config list` reports into
uv's options, so both installers see the same indexes, wheels and caps.
"""

from __future__ import annotations

import ast
import logging
import shutil
import subprocess
import time
from pathlib import Path

from errors import EvalflowError

log = logging.getLogger("evalflow.runtime")

# a line this often while an installer works: a first install takes a while with nothing else on the terminal
NOTE_EVERY_S = 10.0


class RuntimeSetupError(EvalflowError, RuntimeError):
    """The vLLM runtime could not be created; the message carries the installer's log tail."""

    kind = "server"


def find_uv() -> str | None:
    """uv's binary: the one installed with evalflow (the `uv` package), else one on PATH."""
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def run_logged(cmd: list[str], logfile: Path, what: str, started: float, env: dict[str, str]) -> None:
    """Run an installer, its output appended to `logfile`; a line every NOTE_EVERY_S seconds says it is
    alive, and a failure raises RuntimeSetupError with the log's last lines."""
    with logfile.open("a") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
        while True:
            try:
                proc.wait(timeout=NOTE_EVERY_S)
                break
            except subprocess.TimeoutExpired:
                elapsed = round(time.monotonic() - started)
                log.info("creating the vLLM runtime: %s, %d s so far (log: %s)", what, elapsed, logfile)
    if proc.returncode != 0:
        tail = "\n".join(logfile.read_text(errors="replace").splitlines()[-25:])
        raise RuntimeSetupError(f"{what} failed (exit {proc.returncode}); log {logfile}:\n{tail}")


def pip_config(python: Path, env: dict[str, str]) -> dict[str, str]:
    """pip's settings as that Python's pip resolves them: {option: value}, the `install` section over
    `global`, environment variables over both (pip's own precedence)."""
    out = subprocess.run([str(python), "-m", "pip", "config", "list"], capture_output=True, text=True, env=env)
    ranked: dict[str, tuple[int, str]] = {}
    for line in out.stdout.splitlines():
        key, sep, raw = line.partition("=")
        section, _, option = key.rpartition(".")
        rank = {"global": 0, "install": 1, ":env:": 2}.get(section)
        if not sep or rank is None:
            continue
        try:
            value = str(ast.literal_eval(raw))  # pip prints repr(value)
        except (ValueError, SyntaxError):
            value = raw
        option = option.replace("_", "-")
        if option not in ranked or rank >= ranked[option][0]:
            ranked[option] = (rank, value)
    return {option: value for option, (_, value) in ranked.items()}


# pip options that take a list (whitespace-separated in a config file) and uv's flag for each item
_LISTS = {
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
    "trusted-host": "--allow-insecure-host",
}
_TRUE = ("1", "true", "yes", "on")


def uv_options(config: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """uv pip install's options and environment for pip's settings `config` (from `pip_config`).

    `--index-strategy unsafe-best-match` is pip's behaviour across indexes: the best version on any of
    them (uv's default takes the first index that has the package, which would miss a CPU torch wheel
    found through find-links beside PyPI's)."""
    args = ["--index-strategy", "unsafe-best-match"]
    env: dict[str, str] = {}
    if config.get("index-url"):
        args += ["--index-url", config["index-url"]]
    for option, flag in _LISTS.items():
        for item in config.get(option, "").split():
            args += [flag, item]
    if config.get("no-index", "").lower() in _TRUE:
        args.append("--no-index")
    if config.get("pre", "").lower() in _TRUE:
        args += ["--prerelease", "allow"]
    for option, flag in (("only-binary", "--only-binary"), ("no-binary", "--no-binary")):
        if config.get(option):
            args += [flag, config[option]]
    if config.get("cert"):
        env["SSL_CERT_FILE"] = config["cert"]
    if config.get("proxy"):
        env["HTTPS_PROXY"] = env["HTTP_PROXY"] = config["proxy"]
    timeout = config.get("timeout") or config.get("default-timeout")
    if timeout:
        env["UV_HTTP_TIMEOUT"] = timeout
    return args, env
