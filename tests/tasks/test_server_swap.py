"""When one server may take another checkpoint in place, how the proof judges a swapped server, and how the
weight routes are enabled only on a swappable managed server (no server started here; the real swaps are in
tests/checkpoints/test_ckpt_swap_e2e.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from core.config import EvalConfig, ServerConfig
from core.training_steps import config_key
from tasks.checkpoints.prepare import PreparedModel
from tasks.runtime.venv import Runtime
from tasks.serving import probe as proof
from tasks.serving.cpu_settings import CpuChoice
from tasks.serving.keeper import ServerKeeper
from tasks.serving.server import VLLMServer
from tasks.serving.swap import SwapError, differences, swap_key, swap_weights

CONFIG = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "hidden_size": 576, "torch_dtype": "bfloat16"}


def folder(root: Path, name: str, **changes: object) -> Path:
    path = root / name
    path.mkdir(parents=True)
    config = {**CONFIG, "_name_or_path": f"/trainer/{name}", "transformers_version": "4.0", **changes}
    (path / "config.json").write_text(json.dumps(config))
    (path / "tokenizer.json").write_text('{"vocab": 1}')
    (path / "generation_config.json").write_text('{"temperature": 0.6}')
    (path / "model.safetensors").write_bytes(name.encode())  # the weights: never part of the key
    return path


def test_steps_of_one_run_share_a_key_whatever_their_weights_and_writer(tmp_path: Path) -> None:
    a, b = folder(tmp_path, "step_100"), folder(tmp_path, "step_200", transformers_version="4.1")
    key_a, key_b = swap_key(str(a), ["serve"], {}), swap_key(str(b), ["serve"], {})
    assert key_a is not None and key_b is not None and key_a == key_b and key_a.digest == key_b.digest


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            {"config": {"architectures": ["Qwen3ForCausalLM"]}},
            "architecture ['LlamaForCausalLM'] -> ['Qwen3ForCausalLM']",
        ),
        ({"config": {"num_hidden_layers": 3}}, "config.json num_hidden_layers 2 -> 3"),
        ({"tokenizer": '{"vocab": 2}'}, "tokenizer or chat template files differ"),
        ({"generation": '{"temperature": 1.0}'}, "generation_config.json differ"),
        ({"command": ["serve", "--max-model-len", "4096"]}, "server settings differ"),
    ],
)
def test_anything_but_the_weights_changed_means_a_restart_and_says_which(
    tmp_path: Path, change: dict[str, object], said: str
) -> None:
    old = folder(tmp_path, "old")
    new = folder(tmp_path, "new", **change.get("config", {}))  # type: ignore[arg-type]
    if "tokenizer" in change:
        (new / "tokenizer.json").write_text(str(change["tokenizer"]))
    if "generation" in change:
        (new / "generation_config.json").write_text(str(change["generation"]))
    command = change.get("command", ["serve"])
    key_old, key_new = swap_key(str(old), ["serve"], {}), swap_key(str(new), command, {})  # type: ignore[arg-type]
    assert key_old is not None and key_new is not None and key_old != key_new
    assert said in differences(key_old, key_new)


def test_a_hub_id_or_a_folder_without_config_cannot_be_swapped(tmp_path: Path) -> None:
    assert swap_key("Qwen/Qwen3-4B", ["serve"], {}) is None
    assert swap_key(str(tmp_path), ["serve"], {}) is None


def probe(*logprobs: float, tokens: tuple[str, ...] = ("a", "b")) -> proof.Probe:
    return proof.Probe(tokens=[list(tokens)], logprobs=[list(logprobs)])


def test_probes_are_equal_within_the_tolerance_and_differ_beyond_it_or_on_any_token() -> None:
    base = probe(-0.25, -1.5)
    assert base.same_as(probe(-0.2501, -1.5004))
    assert not base.same_as(probe(-0.25, -1.51))
    assert not base.same_as(probe(-0.25, -1.5, tokens=("a", "c")))
    assert base.gap(probe(-0.25, -1.51)) == "same tokens, logprobs up to 0.01 apart"
    assert base.gap(probe(-0.25, -1.5, tokens=("a", "c"))) == "1 of 1 continuations differ"


def test_a_fresh_servers_probe_is_kept_whole_per_checkpoint_and_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALFLOW_PROBE_BOOK", str(tmp_path / "book"))
    assert proof.reference("fp-1", "key") is None
    proof.record_reference("fp-1", "key", probe(-0.5, -1.0))
    assert proof.reference("fp-1", "key") == probe(-0.5, -1.0)
    assert proof.reference("fp-1", "other-settings") is None and proof.reference("fp-2", "key") is None
    assert [p.suffix for p in (tmp_path / "book").iterdir()] == [".json"]  # no temporary file left


def test_weights_match_compares_every_ranks_real_digest_and_names_the_wrong_ones() -> None:
    expected = {"model.norm.weight": "n1", "model.layers.0.input_layernorm.weight": "l0"}
    loaded = {
        "dp0:pp0:pcp0:tp0:model.norm.weight": "n1",
        "dp0:pp0:pcp0:tp1:model.norm.weight": "n1",
        "dp0:pp0:pcp0:tp0:model.layers.0.input_layernorm.weight": "stale",
        "dp0:pp0:pcp0:tp0:model.layers.0.self_attn.qkv_proj.weight": proof.EMPTY_DIGEST,  # repacked: not compared
    }
    assert proof.weights_match(loaded, expected) == (3, ["model.layers.0.input_layernorm.weight"])
    assert proof.weights_match({"dp0:pp0:pcp0:tp0:x": proof.EMPTY_DIGEST}, expected) == (0, [])


MODEL = PreparedModel("/models/step_100", "step_100", "fp", "src", "hf")


def test_only_a_swappable_server_gets_the_weight_routes_and_a_key_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "from-the-users-shell")
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "1")
    cpu = CpuChoice("float32", 0, "test")
    plain = VLLMServer(Runtime("cpu", Path("/rt")), MODEL, ServerConfig(), Path("/tmp/l"), cpu=cpu)
    env = plain.environment()
    assert "VLLM_SERVER_DEV_MODE" not in env and "VLLM_API_KEY" not in env and plain.endpoint.api_key == "EMPTY"
    swappable = VLLMServer(Runtime("cpu", Path("/rt")), MODEL, ServerConfig(), Path("/tmp/l"), cpu=cpu, swappable=True)
    env = swappable.environment()
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["VLLM_API_KEY"] == swappable.api_key
    assert len(swappable.api_key) >= 24 and swappable.api_key not in " ".join(swappable.command())
    assert "--host" in swappable.command() and "127.0.0.1" in swappable.command()
    swappable.model = PreparedModel("/models/step_200", "step_200", "fp2", "src", "hf")  # after a swap
    assert swappable.endpoint.model == "step_100"  # the name vLLM serves it under, fixed at start


def test_the_keepers_key_ignores_the_checkpoint_path_name_and_port(tmp_path: Path) -> None:
    a, b = folder(tmp_path, "step_100"), folder(tmp_path, "step_200")
    cpu = CpuChoice("float32", 0, "test")

    def server(path: Path, port: int) -> VLLMServer:
        model = PreparedModel(str(path), path.name, path.name, str(path), "hf")
        s = VLLMServer(Runtime("cpu", Path("/rt")), model, ServerConfig(), Path("/tmp/l"), cpu=cpu, swappable=True)
        s.port = port
        return s

    keeper = ServerKeeper()
    assert keeper._command_key(server(a, 8000)) == keeper._command_key(server(b, 9000))
    other = server(b, 9000)
    other.cfg = ServerConfig(max_model_len=4096)
    assert "server settings differ" in differences(keeper._command_key(server(a, 8000)), keeper._command_key(other))  # type: ignore[arg-type]
    shutil.rmtree(b)
    assert keeper._command_key(server(b, 9000)) is None


def test_a_swap_against_nothing_listening_fails_in_one_line() -> None:
    with pytest.raises(SwapError, match=r"^pausing generation: ConnectError"):
        swap_weights("http://127.0.0.1:9", "/models/step_200", timeout_s=2.0)


def test_turning_swapping_off_does_not_make_a_watcher_evaluate_its_steps_again() -> None:
    base = {"model": {"source": "run/"}, "benchmarks": [{"name": "gsm8k"}]}
    on = EvalConfig.model_validate(base).model_dump(mode="json")
    off = EvalConfig.model_validate({**base, "server": {"swap_weights": False}}).model_dump(mode="json")
    other = EvalConfig.model_validate({**base, "server": {"max_model_len": 4096}}).model_dump(mode="json")
    assert config_key(on) == config_key(off) != config_key(other)


def test_any_failure_after_the_reload_restarts_the_server_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reload answered 200 by a server that then fails its probe (it died, or answers garbage): the keeper
    starts a fresh server for the checkpoint instead of letting the evaluation fail or trust it."""
    import asyncio
    import contextlib

    import httpx

    from tasks.serving import keeper as keeper_module
    from tasks.serving.keeper import _Held
    from tasks.serving.slots import Slot

    a, b = folder(tmp_path, "step_100"), folder(tmp_path, "step_200")
    first = PreparedModel(str(a), "step_100", "fp-a", str(a), "hf")
    second = PreparedModel(str(b), "step_200", "fp-b", str(b), "hf")
    # the CPU settings this machine chooses, as the keeper's candidate gets them (bf16 or not, its cores)
    held_server = VLLMServer(Runtime("cpu", Path("/rt")), first, ServerConfig(), Path("/tmp/l"), swappable=True)
    monkeypatch.setattr(held_server, "alive", lambda: True)
    keeper = ServerKeeper()
    started: list[str] = []

    async def fake_start(self: ServerKeeper, server: VLLMServer, runtime: Runtime, key: object, need: int) -> None:
        started.append(server.model.path)
        self.held = _Held(server, Slot("cpu", ("",)), contextlib.AsyncExitStack(), None, server.model.fingerprint, None)

    def dead_probe(*_: object, **__: object) -> proof.Probe:
        raise httpx.ConnectError("Connection refused")

    monkeypatch.setattr(ServerKeeper, "_start", fake_start)
    monkeypatch.setattr(keeper_module, "swap_weights", lambda *_: 0.5)
    monkeypatch.setattr(proof, "run_probe", dead_probe)

    async def go() -> keeper_module.Served:
        keeper.held = _Held(
            held_server, Slot("cpu", ("",)), contextlib.AsyncExitStack(), keeper._command_key(held_server), "fp-a",
            probe(-0.5),
        )  # fmt: skip
        return await keeper.serve(Runtime("cpu", Path("/rt")), second, ServerConfig(), Path("/tmp/l"), 1)

    served = asyncio.run(go())
    assert served.how == "started" and started == [str(b)]
    assert served.why == "the swap was not proven: Connection refused"
    assert keeper.swaps == 0
