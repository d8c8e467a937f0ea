"""Server slots: the host's slots from EVALFLOW_SLOTS or its GPUs, the environment that pins a server,
the device locks that keep two servers off one device, and the host's Prefect limit with its leases
(a dead holder's taken back at once)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tasks.serving import slots
from tasks.serving.slots import HostSlots, parse_slots, server_slot, slot_env


def test_parse_slots_gpu_and_cpu_core_sets() -> None:
    assert parse_slots("gpu:0,1,2,3") == HostSlots("gpu", ("0", "1", "2", "3"))
    assert parse_slots("cpu:0-7|8-15") == HostSlots("cpu", ("0-7", "8-15"))
    assert parse_slots("cpu") == HostSlots("cpu", ("",))


@pytest.mark.parametrize("spec", ["tpu:0", "gpu:", "cpu:0-7|eight"])
def test_parse_slots_rejects_what_it_cannot_pin(spec: str) -> None:
    with pytest.raises(ValueError, match="EVALFLOW_SLOTS"):
        parse_slots(spec)


def test_host_slots_from_visible_gpus_else_one_cpu_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVALFLOW_SLOTS", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert slots.host_slots("gpu") == HostSlots("gpu", ("2", "3"))
    assert slots.host_slots("cpu") == HostSlots("cpu", ("",))  # a CPU server never takes a GPU slot
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert slots.host_slots("gpu") == HostSlots("cpu", ("",))
    monkeypatch.setenv("EVALFLOW_SLOTS", "gpu:5")
    assert slots.host_slots("gpu") == HostSlots("gpu", ("5",))


def test_slot_env_pins_gpus_and_cpu_cores() -> None:
    assert slot_env("gpu", ("1", "3")) == {"CUDA_VISIBLE_DEVICES": "1,3"}
    assert slot_env("cpu", ("0-7",)) == {"VLLM_CPU_OMP_THREADS_BIND": "0-7"}
    assert slot_env("cpu", ("",)) == {}  # every core: vLLM's own binding


def test_limit_name_is_a_valid_prefect_name() -> None:
    assert slots.limit_name("gpu-node.cluster.local") == "evalflow-slot-gpu-node-cluster-local"


@pytest.fixture
def local_slots(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("EVALFLOW_SLOT_LOCKS", str(tmp_path))
    monkeypatch.setattr(slots, "POLL_S", 0.05)
    return tmp_path


def test_two_servers_take_distinct_gpus_and_a_third_waits(monkeypatch: pytest.MonkeyPatch, local_slots: Path) -> None:
    monkeypatch.setenv("EVALFLOW_SLOTS", "gpu:0,1")
    order: list[str] = []

    async def server(name: str, hold: float) -> tuple[str, ...]:
        async with server_slot("gpu", use_prefect=False) as slot:
            order.append(f"{name}+")
            await asyncio.sleep(hold)
            order.append(f"{name}-")
            return slot.devices

    async def main() -> list[tuple[str, ...]]:
        first = asyncio.create_task(server("a", 0.4))
        second = asyncio.create_task(server("b", 0.4))
        await asyncio.sleep(0.1)
        third = asyncio.create_task(server("c", 0.0))
        return list(await asyncio.gather(first, second, third))

    got = asyncio.run(main())
    assert sorted(got[:2]) == [("0",), ("1",)]
    assert order.index("c+") > min(order.index("a-"), order.index("b-"))  # the third waited for a free GPU


def test_a_tensor_parallel_server_takes_two_gpus_and_too_many_fails(
    monkeypatch: pytest.MonkeyPatch, local_slots: Path
) -> None:
    monkeypatch.setenv("EVALFLOW_SLOTS", "gpu:0,1")

    async def main(need: int) -> dict[str, str]:
        async with server_slot("gpu", need=need, use_prefect=False) as slot:
            return slot.env

    assert asyncio.run(main(2)) == {"CUDA_VISIBLE_DEVICES": "0,1"}
    with pytest.raises(ValueError, match=r"needs 3 GPU slots .* this host has 2"):
        asyncio.run(main(3))


def test_a_killed_holder_frees_its_slot(monkeypatch: pytest.MonkeyPatch, local_slots: Path) -> None:
    """A SIGKILLed run's device lock is released by the kernel: the next server starts at once."""
    monkeypatch.setenv("EVALFLOW_SLOTS", "cpu")
    holder = subprocess.Popen(
        [sys.executable, "-c", (
            "import asyncio, sys\n"
            "from tasks.serving.slots import server_slot\n"
            "async def main():\n"
            "    async with server_slot('cpu', use_prefect=False):\n"
            "        print('held', flush=True); await asyncio.sleep(60)\n"
            "asyncio.run(main())\n"
        )],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"

        async def try_for(seconds: float) -> bool:
            try:
                async with asyncio.timeout(seconds):
                    async with server_slot("cpu", use_prefect=False):
                        return True
            except TimeoutError:
                return False

        assert not asyncio.run(try_for(0.5))  # held by the live process
        holder.kill()
        holder.wait()
        assert asyncio.run(try_for(5.0))
    finally:
        holder.kill()


def test_a_killed_holders_prefect_slot_is_taken_back_at_once_not_after_its_lease(
    monkeypatch: pytest.MonkeyPatch, local_slots: Path, prefect_home: Path
) -> None:
    """A SIGKILLed run never releases its Prefect lease; the next run on the host releases it (the lease
    record beside a free device lock) instead of waiting for it to expire (LEASE_S, 60 s)."""
    from prefect.settings import PREFECT_API_URL

    monkeypatch.setenv("EVALFLOW_SLOTS", "cpu")
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    holder = subprocess.Popen(
        [sys.executable, "-c", (
            "import asyncio\n"
            "from tasks.serving.slots import server_slot\n"
            "async def main():\n"
            "    async with server_slot('cpu'):\n"
            "        print('held', flush=True); await asyncio.sleep(120)\n"
            "asyncio.run(main())\n"
        )],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        (record,) = local_slots.glob("*/cpu-all.lease")

        async def busy_then_take(seconds: float) -> tuple[int, float]:
            busy = (await slots.free_slots())[0]
            started = time.monotonic()
            async with asyncio.timeout(seconds), server_slot("cpu"):
                return busy, time.monotonic() - started

        with pytest.raises(TimeoutError):  # the live holder keeps it
            asyncio.run(busy_then_take(1.5))
        assert record.exists()
        holder.kill()
        holder.wait()
        free_while_dead, waited = asyncio.run(busy_then_take(30.0))
        assert free_while_dead == 0  # the dead holder's lease still counted until taken back
        assert waited < 10 < slots.LEASE_S
        assert not record.exists()  # our own record is gone with our slot
        assert asyncio.run(slots.free_slots())[0] == 1
    finally:
        holder.kill()


def test_slots_are_a_prefect_limit_per_host_counted_for_shards_auto(
    monkeypatch: pytest.MonkeyPatch, local_slots: Path, prefect_home: Path
) -> None:
    """`evalflow local slots` registers the host's limit; a held server slot shows as busy in it, so
    `collection.shards: auto` counts only free ones."""
    from ops.local import slots as register

    monkeypatch.setenv("EVALFLOW_SLOTS", "gpu:0,1")
    rows = {r["limit"]: r for r in register()}
    assert rows[slots.limit_name()] == {"limit": slots.limit_name(), "slots": 2, "busy": 0, "free": 2}

    async def main() -> tuple[tuple[int, int], tuple[int, int], dict[str, str]]:
        before = await slots.free_slots()
        async with server_slot("gpu") as slot:
            during = await slots.free_slots()
        return before, during, slot.env

    before, during, env = asyncio.run(main())
    assert before[0] - during[0] == 1 and before[1] == during[1]
    assert env == {"CUDA_VISIBLE_DEVICES": "0"}
    monkeypatch.setenv("EVALFLOW_SLOTS", "cpu")  # the worker restarted with other slots: the limit follows
    assert {r["limit"]: r["slots"] for r in register()}[slots.limit_name()] == 1
