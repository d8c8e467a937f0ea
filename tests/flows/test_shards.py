"""Shards without a server: how batches are dealt, what a child is given, and the checks a child runs
before it starts a server (the e2e test runs shards on real workers: test_shards_e2e.py)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import SecretStr

from core.config import EvalConfig
from core.record import ShardRun as ShardRecord
from core.resolve import open_store
from core.store import Store
from envs.registry import get_env
from flows.shards import (
    Shard,
    ShardRun,
    check_marker,
    child_parameters,
    deployment_name,
    lost_batch,
    shard_work,
    split,
    write_marker,
)
from tasks.collection.batch import partial_url
from tasks.collection.plan import Planned, plan_batches


def test_split_deals_round_robin_into_disjoint_shards_covering_every_batch() -> None:
    keys = [f"k{i}" for i in range(7)]
    parts = split(keys, 3)
    assert parts == [["k0", "k3", "k6"], ["k1", "k4"], ["k2", "k5"]]
    assert sorted(k for p in parts for k in p) == sorted(keys)
    assert split(keys[:2], 8) == [["k0"], ["k1"]]  # never an empty shard
    assert split(keys, 1) == [keys]


def test_child_parameters_keep_block_defaults_unset_and_never_shard_again() -> None:
    config = EvalConfig.model_validate({
        "server": {"block": "cpu-smoke", "max_model_len": 1024},
        "collection": {"shards": 4, "batch_size": 8},
    })  # fmt: skip
    params = child_parameters(config)
    assert params["server"] == {"block": "cpu-smoke", "max_model_len": 1024}  # block values stay the block's
    assert params["collection"] == {"shards": 1, "batch_size": 8}
    child = EvalConfig.model_validate(params)
    assert child.server.model_fields_set == {"block", "max_model_len"}


def test_child_parameters_pass_a_given_token_on_and_add_none() -> None:
    given = EvalConfig.model_validate(
        {"server": {"mode": "external", "base_url": "http://h:8000/v1", "api_key": "tok"}}
    )
    assert child_parameters(given)["server"]["api_key"] == "tok"
    assert isinstance(EvalConfig.model_validate(child_parameters(given)).server.api_key, SecretStr)
    assert "api_key" not in child_parameters(EvalConfig()).get("server", {})


def test_deployment_name_needs_a_deployment_or_the_field() -> None:
    config = EvalConfig.model_validate({"collection": {"shards": 2}})
    assert deployment_name(config, "eval", "qwen3-4b") == "eval/qwen3-4b"
    with pytest.raises(ValueError, match=r"collection\.shard_deployment"):
        deployment_name(config, "eval", None)
    named = EvalConfig.model_validate({"collection": {"shards": 2, "shard_deployment": "eval/smoke"}})
    assert deployment_name(named, None, None) == "eval/smoke"


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return open_store(EvalConfig.model_validate({"store": {"url": str(tmp_path / "store")}}).store)


def _work() -> list[Planned]:
    env = get_env("gsm8k")
    rows = [{"id": f"q{i}", "question": f"{i} + 1?", "answer": str(i + 1)} for i in range(6)]
    batches = plan_batches("gsm8k", env, rows, 2, 4, "fp", EvalConfig().sampling)
    return [Planned(env, b) for b in batches]


def test_a_child_takes_only_its_batches_and_refuses_another_fingerprint() -> None:
    work = _work()
    keys = [p.batch.cache_key for p in work]
    shard = Shard(run_id="r", index=1, count=2, batches=split(keys, 2)[1], samples_fingerprint="abc")
    assert [p.batch.cache_key for p in shard_work(shard, work, "abc")] == [keys[1]]
    with pytest.raises(ValueError, match=r"shard 2/2: on host .* the parent planned with abc"):
        shard_work(shard, work, "other")
    strange = shard.model_copy(update={"batches": ["batch-unknown"]})
    with pytest.raises(ValueError, match="not in this worker's plan"):
        shard_work(strange, work, "abc")


def test_a_child_that_cannot_see_the_parents_store_fails_naming_store_and_host(store: Store) -> None:
    run_dir = store.path("runs", "r1")
    with pytest.raises(ValueError, match=r"store.url .* as seen from host .*shards.json is missing"):
        check_marker(store, run_dir)
    write_marker(store, run_dir, [Shard(run_id="r1", index=0, count=1, batches=["k"], samples_fingerprint="f")])
    check_marker(store, run_dir)


def test_a_lost_batch_counts_its_kept_rollouts(store: Store) -> None:
    batch = _work()[0].batch
    lost = lost_batch(store, batch, "shard 1/2 ended Crashed")
    assert (lost.summary.failed, lost.kept_url) == (batch.size, None)
    table = pa.table({"prompt_id": ["q0"], "repeat": [0], "batch_key": [batch.key]})
    with store.open(partial_url(store, batch), "wb") as f:
        pq.write_table(table, f)
    lost = lost_batch(store, batch, "shard 1/2 ended Crashed")
    assert (lost.summary.failed, lost.kept_url) == (batch.size - 1, partial_url(store, batch))
    assert lost.transient and "Crashed" in lost.summary.line()


def test_the_parent_counts_shard_batches_as_their_records_reach_the_store(tmp_path: Path) -> None:
    import asyncio

    from prefect.filesystems import LocalFileSystem
    from prefect.results import ResultStore
    from prefect.serializers import JSONSerializer

    from flows.shards import watch
    from tasks.collection.progress import Progress

    storage = LocalFileSystem(basepath=str(tmp_path / "records"))
    records = ResultStore(result_storage=storage, serializer=JSONSerializer())
    progress = Progress(12, interval_s=0.05)
    record = {"url": "u", "rollouts": 4, "errors": 1, "completion_tokens": 100, "seconds": 1.0}

    async def main() -> None:
        watcher = asyncio.create_task(watch(progress, storage, {"batch-a": 4, "batch-b": 8}))
        await asyncio.sleep(0.2)
        assert progress.done == 0
        await asyncio.to_thread(records.write, obj=record, key="batch-a")
        await asyncio.sleep(0.3)
        assert (progress.done, progress.errors, progress.tokens) == (4, 1, 100)
        await asyncio.to_thread(records.write, obj={**record, "rollouts": 8}, key="batch-b")
        await asyncio.wait_for(watcher, 2)  # every batch counted: the watcher ends

    asyncio.run(main())
    assert progress.done == 12


def test_a_shard_run_is_recorded_as_the_run_records_shard() -> None:
    shard = Shard(run_id="r", index=1, count=2, batches=["k1", "k3"], samples_fingerprint="f")
    run = ShardRun(shard, ["a", "b"], "Completed", "", 61.24)
    record = run.as_record()
    assert isinstance(record, ShardRecord)
    assert record.model_dump() == {"index": 1, "batches": 2, "state": "Completed", "attempts": 2,
                                   "flow_runs": ["a", "b"], "seconds": 61.2, "message": ""}  # fmt: skip
