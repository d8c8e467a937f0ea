"""Every server command evalflow can build is accepted by vLLM's own argument parser (no server started):
a flag that a vLLM upgrade renames or removes fails here, not on a GPU node at night."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from core.config import REPO_ROOT, ServerConfig
from tasks.checkpoints.prepare import PreparedModel
from tasks.runtime.venv import Runtime, runtime_for
from tasks.serving import vllm_args
from tasks.serving.cpu_settings import CpuChoice
from tasks.serving.server import VLLMServer
from tasks.serving.vllm_args import ServerArgsError, check_server_args, parse_results, vllm_argv

CPU = runtime_for("cpu")
MODEL = PreparedModel("/models/m", "m", "fp", "src", "hf")
needs_runtime = pytest.mark.skipif(not CPU.is_complete(), reason="no vLLM runtime installed (`make runtime`)")


def block_settings() -> dict[str, dict[str, Any]]:
    return yaml.safe_load((REPO_ROOT / "blocks" / "defaults.yaml").read_text())["evalflow-vllm-server"]


def command(settings: dict[str, Any]) -> list[str]:
    """The exact command VLLMServer starts for these settings, for the flavour they ask for (a GPU one is
    built as on a GPU node: the parser is the same code in both packages)."""
    cfg = ServerConfig.model_validate(settings)
    flavor = "gpu" if cfg.runtime == "gpu" else "cpu"
    cpu = CpuChoice("bfloat16", 0, "test") if flavor == "cpu" else None
    server = VLLMServer(Runtime(flavor=flavor, path=CPU.path), MODEL, cfg, Path("/tmp/vllm.log"), cpu=cpu)
    server.port = 8000
    return server.command()


def all_commands() -> dict[str, list[str]]:
    """Every server block, and every deployment's server (its block with the deployment's overrides)."""
    blocks = block_settings()
    commands = {f"block {name}": command(spec["settings"]) for name, spec in blocks.items()}
    for deployment in yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())["deployments"]:
        server = dict((deployment["parameters"].get("config") or {}).get("server") or {})
        name = server.pop("block", None)
        if name:
            commands[f"deployment {deployment['name']}"] = command({**blocks[name]["settings"], **server})
    return commands


@needs_runtime
def test_every_block_and_deployment_command_parses_and_broken_ones_do_not() -> None:
    """One vLLM import for all: the shipped commands pass; a renamed flag, an unknown tool parser, auto
    tool choice without a parser and an invalid config flag fail, each with vLLM's own reason."""
    commands = all_commands()
    assert {"block cpu-smoke", "block qwen3-4b-h100", "deployment qwen3-4b", "deployment baselines"} <= set(commands)
    gpu = commands["block qwen3-4b-h100"]
    assert "--tensor-parallel-size" in gpu and "--gpu-memory-utilization" in gpu  # GPU flags are checked too
    parallel = block_settings()["qwen3-4b-h100"]["settings"] | {"tensor_parallel_size": 2, "data_parallel_size": 2}
    commands["tp 2 x dp 2"] = command(parallel)
    assert commands["tp 2 x dp 2"][commands["tp 2 x dp 2"].index("--data-parallel-size") + 1] == "2"
    parser_value = gpu.index("--tool-call-parser") + 1
    broken = [
        [a.replace("--tensor-parallel-size", "--tensor-paralel-size") for a in gpu],
        [*gpu[:parser_value], "nosuchparser", *gpu[parser_value + 1 :]],
        [a for a in gpu if a not in ("--tool-call-parser", "hermes")],
        [*gpu, "--structured-outputs-config", '{"disable_any_whitespace": true, "backend": "outlines"}'],
        [a.replace("--data-parallel-size", "--data-paralel-size") for a in commands["tp 2 x dp 2"]],
        [*gpu[: gpu.index("--reasoning-parser") + 1], "nosuchthinker", *gpu[gpu.index("--reasoning-parser") + 2 :]],
    ]
    verdicts = parse_results(CPU.python, [vllm_argv(c) for c in [*commands.values(), *broken]])
    assert dict(zip(commands, verdicts[: len(commands)], strict=True)) == dict.fromkeys(commands)
    renamed, bad_parser, no_parser, bad_json, bad_dp, bad_reasoning = verdicts[len(commands) :]
    assert "nosuchthinker" in (bad_reasoning or ""), bad_reasoning
    assert "unrecognized arguments: --data-paralel-size" in (bad_dp or "")
    assert "unrecognized arguments: --tensor-paralel-size" in renamed
    assert "nosuchparser" in bad_parser
    assert "--enable-auto-tool-choice requires --tool-call-parser" in no_parser
    assert "disable_any_whitespace is only supported for xgrammar and guidance" in bad_json


def test_rejections_name_each_command_and_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def fake_parse(python: Path, argvs: list[list[str]], env: Any = None) -> list[str | None]:
        seen.extend(argvs)
        return [None, "api_server: error: unrecognized arguments: --x"]

    monkeypatch.setattr(vllm_args, "parse_results", fake_parse)
    server = ["python", "-m", "vllm.entrypoints.openai.api_server"]
    with pytest.raises(
        ServerArgsError, match=r"^vLLM rejects the server arguments of b: .*unrecognized arguments: --x$"
    ):
        check_server_args(Path("python"), {"a": [*server, "--model", "m"], "b": [*server, "--x"]})
    assert seen == [["--model", "m"], ["--x"]]  # the arguments after the module, in order
    with pytest.raises(ValueError, match="not a vLLM server command"):
        vllm_argv(["python", "-m", "http.server"])
