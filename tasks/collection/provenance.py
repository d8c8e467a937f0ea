"""What produced a run, recorded in metrics.json and the report: evalflow's version and commit, the vLLM
runtime's package versions, the server settings that change samples, the hardware, and per benchmark
the environment version, the dataset's content hash and the prompt templates' hash.

Two runs whose provenance matches sampled the same way; where numbers differ between runs, this is
the first place to look. Nothing here is secret (no environment variables, no URLs with credentials).
"""

from __future__ import annotations

import hashlib
import platform
import subprocess
from functools import cache
from importlib import metadata
from pathlib import Path

from core.config import EvalConfig
from core.record import BenchmarkProvenance, EvalflowVersion, Hardware, Provenance
from envs.base import canonical_json
from envs.datasets import rows_hash
from tasks.collection.plan import Benchmark
from tasks.runtime.venv import Runtime, runtime_versions
from tasks.serving.cpu_settings import CpuChoice, cpu_info
from tasks.serving.sample_settings import sample_settings

REPO_ROOT = Path(__file__).resolve().parents[2]


@cache
def evalflow_version() -> EvalflowVersion:
    """The installed version, and the git commit (with a dirty flag) when running from a checkout."""
    version = _version("evalflow")
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=5)
        if head.returncode == 0:
            status = subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=REPO_ROOT, capture_output=True, text=True, timeout=5,
            )  # fmt: skip
            return EvalflowVersion(version=version, commit=head.stdout.strip(), dirty=bool(status.stdout.strip()))
    except (OSError, subprocess.TimeoutExpired):
        pass
    return EvalflowVersion(version=version)


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


@cache
def gpus() -> list[str]:
    """GPU names from nvidia-smi ([] without one)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def hardware() -> Hardware:
    info = cpu_info()
    return Hardware(cpu=info.model, cores=info.cores, gpus=gpus(), machine=platform.machine())


def benchmark_provenance(benchmark: Benchmark, source: str | None) -> BenchmarkProvenance:
    env = benchmark.env
    templates = canonical_json(env.prompt_templates())
    return BenchmarkProvenance(
        benchmark=benchmark.name,
        env=env.name,
        env_version=env.version,
        env_ref=benchmark.env_ref,
        env_fingerprint=env.fingerprint(),
        env_source_sha256=env.source_digest(),
        options=env.options,
        max_tokens=benchmark.sampling.max_tokens if benchmark.sampling else None,
        dataset=source or env.default_dataset,
        rows=len(benchmark.rows),
        dataset_hash=rows_hash(benchmark.rows),
        prompt_template_hash=hashlib.sha256(templates.encode()).hexdigest()[:16],
    )


def provenance(
    config: EvalConfig, benchmarks: list[Benchmark], runtime: Runtime | None, cpu: CpuChoice | None
) -> Provenance:
    """The run's provenance record. `runtime`/`cpu`: the managed server's, None otherwise."""
    server = {"mode": config.server.mode, **sample_settings(config.server)}
    if cpu is not None:
        server["cpu"] = cpu.as_record()
    return Provenance(
        evalflow=evalflow_version(),
        python=platform.python_version(),
        prefect=_version("prefect"),
        runtime=runtime_versions(runtime) if runtime is not None else None,
        server=server,
        hardware=hardware(),
        benchmarks=[benchmark_provenance(b, c.dataset) for b, c in zip(benchmarks, config.benchmarks, strict=True)],
    )
