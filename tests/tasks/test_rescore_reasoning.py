"""Completions cached before the reasoning split (rollout schema 2: the think block inside `completion`) are split
and rescored from their file, with no request: a planted answer in the thinking stops scoring."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow.parquet as pq

from core.config import CollectionConfig, SamplingConfig
from core.schema import SCHEMA_VERSION_KEY, to_table
from core.store import Store
from envs.gsm8k import GSM8KEnv
from tasks.collection.plan import BatchResult, plan_batches
from tasks.collection.rescore import rescore_batch_impl
from tasks.collection.rollout import CollectContext
from tests.tasks.conftest import rollout

ROWS = [{"id": f"q{i}", "question": f"What is {i} + 7 - {i}?", "answer": 7} for i in range(3)]
TEXTS = {
    "q0": "<think>\nSo the answer is 7.\n#### 7\n</think>\n\nSo the answer is #### 8",  # right only in the thinking
    "q1": "<think>\nLet me see, 3+4 = 7. So the answer is 7. Hmm but maybe",  # cut off while thinking
    "q2": "<think>\nmaybe 9\n</think>\n\n#### 7",  # right after it
}


def test_a_schema_2_batch_is_split_and_rescored_without_a_server(tmp_path: Path) -> None:
    env = GSM8KEnv()
    (batch,) = plan_batches("gsm8k", env, ROWS, 1, 8, "fp", SamplingConfig())
    old = [
        rollout(prompt_id=pid, completion=text, reward=1.0, success=True, reference="7",
                finish_reason="length" if pid == "q1" else "stop")
        for pid, text in TEXTS.items()
    ]  # fmt: skip
    assert all(env.score(row, TEXTS[row["id"]]).success for row in ROWS)  # the whole text: all three "right"
    table = to_table(old).drop_columns(["reasoning", "reasoning_tokens", "answer_tokens", "ended_in_reasoning"])
    source = tmp_path / "old.parquet"
    pq.write_table(table.replace_schema_metadata({SCHEMA_VERSION_KEY: b"2"}), source)
    store = Store(str(tmp_path / "store"))
    ctx = CollectContext(
        run_id="new", run_dir=store.path("runs", "new"), endpoint=None, model_fingerprint="fp",
        sampling=SamplingConfig(), collection=CollectionConfig(), store=store,
    )  # fmt: skip
    result = asyncio.run(rescore_batch_impl(ctx, env, batch, BatchResult(str(source), 3, 0, 60, 1.0)))
    rows = {r["prompt_id"]: r for r in pq.read_table(result.url).to_pylist()}
    assert pq.read_metadata(result.url).metadata[SCHEMA_VERSION_KEY] == b"3"
    assert {pid: (r["reward"], r["ended_in_reasoning"]) for pid, r in rows.items()} == {
        "q0": (0.0, False), "q1": (0.0, True), "q2": (1.0, False),
    }  # fmt: skip
    assert (
        rows["q0"]["reasoning"] == "\nSo the answer is 7.\n#### 7\n"
        and rows["q0"]["completion"] == "So the answer is #### 8"
    )
    assert rows["q1"]["completion"] == "" and rows["q1"]["reasoning"].startswith("\nLet me see")
    # token counts: the old file never said which were reasoning
    assert (rows["q2"]["completion_tokens"], rows["q2"]["reasoning_tokens"], rows["q2"]["answer_tokens"]) == (
        20,
        None,
        None,
    )
