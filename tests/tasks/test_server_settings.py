"""The CPU server's settings for the CPU it runs on, the server settings in the batch cache key, and the
run's provenance record."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.config import EvalConfig, ServerConfig
from core.store import Store
from tasks.checkpoints.prepare import PreparedModel
from tasks.collection.plan import load_benchmarks
from tasks.collection.provenance import provenance
from tasks.runtime.venv import Runtime
from tasks.serving.cpu_settings import CpuInfo, choose
from tasks.serving.sample_settings import flag_values, sample_settings, samples_fingerprint
from tasks.serving.server import VLLMServer

ZEN4 = CpuInfo("AMD EPYC", 2, frozenset({"avx2", "avx512f", "avx512_bf16"}))
ZEN2 = CpuInfo("AMD EPYC", 2, frozenset({"avx2", "fma"}))
SAPPHIRE = CpuInfo("Intel Xeon Platinum 8480", 112, frozenset({"avx2", "avx512f", "avx512_bf16", "amx_bf16"}))


def test_dtype_and_reserved_cores_follow_the_cpu() -> None:
    small = choose("auto", None, ZEN2)
    assert (small.dtype, small.reserved_cores) == ("float32", 0)  # bf16 emulated, one core of two is half
    assert "no bf16 instructions" in small.reason and "2 usable cores" in small.reason
    assert (choose("auto", None, ZEN4).dtype, choose("auto", None, ZEN4).reserved_cores) == ("bfloat16", 0)
    big = choose("auto", None, SAPPHIRE)
    assert (big.dtype, big.reserved_cores) == ("bfloat16", None)  # AMX: native bf16; vLLM's reserved core
    forced = choose("bfloat16", 1, ZEN4)
    assert (forced.dtype, forced.reserved_cores) == ("bfloat16", 1)
    assert "server.dtype" in forced.reason and "server.cpu_reserved_cores" in forced.reason


def _server(tmp_path: Path, flavor: str, cfg: ServerConfig, info: CpuInfo = ZEN4) -> VLLMServer:
    model = PreparedModel("/m", "m", "fp", "src", "hf")
    cpu = choose(cfg.dtype, cfg.cpu_reserved_cores, info) if flavor == "cpu" else None
    return VLLMServer(Runtime(flavor, tmp_path / "rt"), model, cfg, tmp_path / "vllm.log", cpu=cpu)


def test_the_command_line_and_environment_carry_the_choice(tmp_path: Path) -> None:
    cpu = _server(tmp_path, "cpu", ServerConfig(), ZEN2)
    cmd = cpu.command()
    assert cmd[cmd.index("--dtype") + 1] == "float32"
    assert cpu.environment()["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    big = _server(tmp_path, "cpu", ServerConfig(), SAPPHIRE)
    assert big.command()[big.command().index("--dtype") + 1] == "bfloat16"
    assert big.environment().get("VLLM_CPU_NUM_OF_RESERVED_CPU") == os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU")
    gpu = _server(tmp_path, "gpu", ServerConfig(runtime="gpu"))
    assert "--dtype" not in gpu.command()  # auto on GPU: the model's dtype, vLLM's choice
    gpu16 = _server(tmp_path, "gpu", ServerConfig(runtime="gpu", dtype="float16"))
    assert gpu16.command()[gpu16.command().index("--dtype") + 1] == "float16"


def test_a_cpu_server_prefills_whole_prompts_so_seeded_requests_cannot_kill_its_engine(tmp_path: Path) -> None:
    """vllm-cpu 0.32's engine dies when a seeded prefill is chunked (tests/flows/test_eval_e2e.py sends 96 seeded
    requests at once, in the full tier): a CPU server never chunks unless the user's flags say otherwise."""
    cmd = _server(tmp_path, "cpu", ServerConfig(), ZEN2).command()
    assert "--no-enable-chunked-prefill" in cmd and int(cmd[cmd.index("--max-num-batched-tokens") + 1]) >= 2048
    own = _server(tmp_path, "cpu", ServerConfig(extra_args=["--enable-chunked-prefill"]), ZEN2).command()
    assert "--no-enable-chunked-prefill" not in own
    assert "--no-enable-chunked-prefill" not in _server(tmp_path, "gpu", ServerConfig(runtime="gpu")).command()


def test_extra_args_flags_that_change_samples() -> None:
    args = ["--enforce-eager", "--quantization", "fp8", "--kv-cache-dtype=fp8_e5m2", "-q", "awq", "--seed", "3"]
    assert flag_values(args) == {"--quantization": "awq", "--kv-cache-dtype": "fp8_e5m2"}


def test_sample_changing_settings_change_the_batch_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALFLOW_VLLM_FLAVOR", "cpu")
    base = ServerConfig(runtime="cpu", dtype="float32")
    fp = samples_fingerprint("model", base)
    assert samples_fingerprint("model", ServerConfig(runtime="cpu", dtype="float32")) == fp  # stable
    assert samples_fingerprint("model", ServerConfig(runtime="cpu", dtype="bfloat16")) != fp
    assert samples_fingerprint("model", ServerConfig(runtime="cpu", dtype="float32", extra_args=["-q", "fp8"])) != fp
    # an explicit --dtype in extra args is what vLLM uses (it comes last), so it is what the key holds
    via_args = ServerConfig(runtime="cpu", dtype="float32", extra_args=["--dtype", "bfloat16"])
    assert sample_settings(via_args)["dtype"] == "bfloat16"
    bf16 = ServerConfig(runtime="cpu", dtype="bfloat16")
    assert samples_fingerprint("model", via_args) == samples_fingerprint("model", bf16)
    # speed-only settings stay out of the key
    assert samples_fingerprint("model", base.model_copy(update={"cpu_reserved_cores": 1, "cpu_kv_cache_gib": 8})) == fp
    eager = ServerConfig(runtime="cpu", dtype="float32", extra_args=["--enforce-eager"])
    assert samples_fingerprint("model", eager) == fp
    assert sample_settings(base)["vllm"].startswith("vllm-cpu==")
    external = ServerConfig(mode="external", base_url="http://127.0.0.1:9/v1")
    assert samples_fingerprint("external:m", external) == "external:m"


def test_provenance_names_versions_hardware_and_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALFLOW_VLLM_FLAVOR", "cpu")
    config = EvalConfig.model_validate(
        {"benchmarks": [{"name": "gsm8k", "limit": 3, "repeats": 1}], "store": {"url": str(tmp_path)}}
    )
    benchmarks = load_benchmarks(config, Store(str(tmp_path)))
    record = provenance(config, benchmarks, None, choose("auto", None, ZEN4))
    assert record.evalflow.version and len(record.evalflow.commit or "x" * 40) == 40
    assert record.server["dtype"] in ("float32", "bfloat16") and record.server["cpu"]["reserved_cores"] == 0
    assert (record.hardware.cores or 0) >= 1 and record.runtime is None
    [bench] = record.benchmarks
    assert (bench.benchmark, bench.rows, bench.dataset) == ("gsm8k", 3, "data/gsm8k/test.jsonl")
    assert len(bench.dataset_hash) == 64 and len(bench.prompt_template_hash) == 16
    other = EvalConfig.model_validate(
        {"benchmarks": [{"name": "gsm8k", "limit": 4, "repeats": 1}], "store": {"url": str(tmp_path)}}
    )
    [bench4] = provenance(other, load_benchmarks(other, Store(str(tmp_path))), None, None).benchmarks
    assert bench4.dataset_hash != bench.dataset_hash
    assert bench4.prompt_template_hash == bench.prompt_template_hash
