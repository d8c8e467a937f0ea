"""One vLLM CPU server for a training run's steps: each next step's weights loaded in place and proven.

Four DCP steps of the 2-layer test model (steps 100-300: the same model, each with its own final-norm noise;
step 400: a 3-layer model, another architecture) are evaluated one after another as the watcher does (each
step's `eval` run inside one `keep_servers()`), greedy and one request at a time:
- steps 100-300 take one server start and two swaps, counted in the server's own log;
- each swapped step's probe equals a fresh server's probe of that step and differs from its neighbours';
- each swapped step's completions equal a fresh server's evaluation of that step, rollout by rollout;
- step 400 restarts the server, saying that the architecture's config differs;
- a server killed during a swap costs a restart: the keeper then serves the checkpoint it was asked for, proven,
  and the completions collected on it equal the swapped run's of that step.
Seven step runs, four server starts (two of them the fresh servers the swapped steps are compared with). The
steps are converted to several safetensors shards and an index (vLLM's harder case, at start and in a reload).
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import duckdb
import pytest

from core.config import EvalConfig
from core.record import RunRecord
from flows.eval import eval_flow
from tasks.checkpoints import jobs
from tasks.checkpoints.prepare import PreparedModel
from tasks.runtime.venv import Runtime
from tasks.serving import keeper as keeper_module
from tasks.serving.keeper import keep_servers
from tasks.serving.probe import Probe
from tests.checkpoints.conftest import build_dcp, built_once, cut_model
from tests.conftest import FAST_START

pytestmark = pytest.mark.e2e

STEPS = (100, 200, 300)
OTHER = 400  # another architecture: three decoder layers instead of two


@pytest.fixture(scope="module")
def training_run(
    smollm2: PreparedModel, base_model: PreparedModel, runtime: Runtime, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    def build(root: Path) -> None:
        for step in STEPS:
            build_dcp(runtime, base_model.path, root / f"step_{step}", "nemo-rl", noise_seed=step)
        three = cut_model(runtime, Path(smollm2.path), root / "smollm2-3l", 3)  # the full model, cut to 3 layers
        build_dcp(runtime, str(three), root / f"step_{OTHER}", "nemo-rl", model_name=str(three), noise_seed=OTHER)

    return built_once(tmp_path_factory, "swap-run", build)


def config(run: Path, step: int, store: Path, cache: Path, **server: Any) -> EvalConfig:
    return EvalConfig.model_validate({
        "run_name": f"swap step {step}",
        "model": {"source": str(run / f"step_{step}"), "cache_dir": str(cache), "training_run": "swap", "step": step},
        "server": {"mode": "managed", "extra_args": FAST_START, **server},
        "sampling": {"temperature": 0.0, "max_tokens": 16},
        "benchmarks": [{"task": "examples/tasks/science_mc.yaml", "limit": 4, "repeats": 1}],
        "collection": {"batch_size": 4, "concurrency": 1},
        "store": {"url": str(store)},
    })  # fmt: skip


def completions(record: RunRecord) -> list[tuple[str, str]]:
    files = sorted(str(p) for p in Path(record.collection.run_dir).glob("rollouts/*/*.parquet"))
    return duckdb.sql(f"select prompt_id, completion from read_parquet({files}) order by 1").fetchall()


def probe_of(record: RunRecord) -> Probe:
    assert record.collection.server.probe is not None
    return Probe.model_validate(record.collection.server.probe)


def test_one_server_takes_each_step_in_place_proven_and_restarts_when_it_must(
    training_run: Path, prefect_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache, store, fresh = tmp_path / "ckpt-cache", tmp_path / "store", tmp_path / "fresh"
    # converted to several shards and an index: what vLLM loads at start and reloads in place, its harder case
    monkeypatch.setattr(jobs, "MAX_SHARD_BYTES", 40_000_000)
    real_swap = keeper_module.swap_weights
    keys: list[tuple[str, Path]] = []

    def killed_swap(root_url: str, weights_path: str, timeout_s: float) -> float:
        """The server is SIGKILLed as the swap begins."""
        victims = [s for s in keeper_module.VLLMServer._live if s.root_url == root_url]
        assert victims and victims[0].pid
        keys.append((victims[0].api_key, victims[0].log_path))
        os.killpg(victims[0].pid, signal.SIGKILL)
        return real_swap(root_url, weights_path, timeout_s)

    async def watched() -> tuple[dict[int, RunRecord], dict[int, RunRecord]]:
        async with keep_servers() as keeper:
            records = {s: await eval_flow(config(training_run, s, store, cache)) for s in (*STEPS, OTHER)}
            assert (keeper.starts, keeper.swaps) == (2, 2)
            # back from the other architecture: a fresh server of step 300 (a store of its own: nothing cached)
            alone = {300: await eval_flow(config(training_run, 300, fresh, cache))}
            # then the swap to step 200 meets a server killed under it: a fresh server of step 200
            monkeypatch.setattr(keeper_module, "swap_weights", killed_swap)
            alone[200] = await eval_flow(config(training_run, 200, fresh, cache))
            assert (keeper.starts, keeper.swaps) == (4, 2)
        return records, alone

    records, alone = asyncio.run(watched())
    servers = {s: r.collection.server for s, r in records.items()}
    assert [servers[s].how for s in (*STEPS, OTHER)] == ["started", "swapped", "swapped", "started"]
    assert all(r.run_info.status.state == "complete" for r in [*records.values(), *alone.values()])
    # the server's own log: one start and two weight reloads for steps 100-300
    assert {servers[s].log for s in STEPS} == {servers[100].log}
    log = Path(str(servers[100].log)).read_text()
    assert log.count("Starting vLLM server on") == 1
    assert log.count('"POST /collective_rpc HTTP/1.1" 200') == 2
    # step 400 (3 layers) is not loaded in place: a server of its own
    assert servers[OTHER].log != servers[100].log
    assert servers[OTHER].why == "config.json num_hidden_layers 2 -> 3"
    assert Path(str(servers[OTHER].log)).read_text().count("Starting vLLM server on") == 1
    converted = [p for p in cache.iterdir() if p.is_dir() and p.name != "downloads" and not p.name.startswith(".")]
    assert len(converted) == 4 and all(len(list(p.glob("*.safetensors"))) >= 2 for p in converted)
    assert all((p / "model.safetensors.index.json").is_file() for p in converted)
    probes = {s: probe_of(records[s]) for s in (*STEPS, OTHER)}
    assert not probes[100].same_as(probes[200]) and not probes[200].same_as(probes[300])

    # each swapped step against a fresh server of it: the same probe, the same completions rollout by rollout
    for step in (200, 300):
        assert alone[step].collection.server.how == "started"
        assert probe_of(alone[step]).same_as(probes[step]), probe_of(alone[step]).gap(probes[step])
        assert completions(alone[step]) == completions(records[step])
    # the killed swap cost a restart (its server's log ends with no reload answered), not a wrong rollout
    assert str(alone[200].collection.server.why).startswith("the swap was not proven: pausing generation:")
    ((key, killed_log),) = keys
    assert killed_log == Path(str(alone[300].collection.server.log))
    assert '"POST /collective_rpc HTTP/1.1" 200' not in killed_log.read_text()
    # the swappable server's own API key (given in its environment) is in no log it wrote
    assert len(key) >= 24 and key not in killed_log.read_text() and key not in log
