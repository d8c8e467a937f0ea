"""GSM8K in plain-completion mode against the real vLLM server (CPU, SmolLM2-135M-Instruct): the lm-eval
prompt goes through the completions API, and every rollout comes back complete and scored."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from core.config import CollectionConfig, SamplingConfig
from core.store import Store
from envs.datasets import load_rows
from envs.gsm8k import COMPLETION_STOP, GSM8KEnv
from tasks.collection.batch import collect_batch_impl
from tasks.collection.plan import plan_batches
from tasks.collection.rollout import CollectContext
from tasks.serving.server import Endpoint

pytestmark = pytest.mark.e2e


def test_completion_mode_collection(endpoint: Endpoint, tmp_path: Path) -> None:
    env = GSM8KEnv(mode="completion", fewshot=4)
    rows = load_rows(str(env.default_dataset_path()), env, limit=4)
    # greedy, as lm-eval's gsm8k task: sampled at 0.7, SmolLM2 now and then ends a 4-shot answer at once
    # (its first token is the end of sequence), which would make this test flaky
    sampling = SamplingConfig(temperature=0.0, max_tokens=96)
    (batch,) = plan_batches("gsm8k", env, rows, repeats=2, batch_size=8, model_fingerprint="e2e", sampling=sampling)
    ctx = CollectContext(
        run_id="e2e-completion",
        run_dir=str(tmp_path),
        endpoint=endpoint,
        model_fingerprint="e2e",
        sampling=sampling,
        collection=CollectionConfig(concurrency=8),
        store=Store(str(tmp_path)),
    )
    result = asyncio.run(collect_batch_impl(ctx, env, batch))
    assert (result.rollouts, result.errors) == (8, 0)

    records = pq.read_table(result.url).to_pylist()
    assert len(records) == 8
    for rec in records:
        row = next(r for r in rows if env.prompt_id(r) == rec["prompt_id"])
        assert rec["error"] is None
        assert rec["completion"], (rec["finish_reason"], rec["completion_tokens"])
        assert rec["completion_tokens"] > 0 and rec["prompt_tokens"] > 0
        assert rec["finish_reason"] in ("stop", "length")
        assert rec["reward"] in (0.0, 1.0) and rec["success"] == (rec["reward"] == 1.0)
        assert rec["turns"] == 1 and rec["latency_s"] > 0
        # the plain prompt is stored where chat messages go (a JSON string), the transcript is prompt + completion
        prompt = json.loads(rec["messages"])
        assert prompt == env.prompt(row) and prompt.count("Question: ") == 5 and prompt.endswith("\nAnswer:")
        assert json.loads(rec["transcript"]) == prompt + rec["completion"]
        # generation stopped before any stop sequence (vLLM leaves them out of the text)
        assert not any(stop in rec["completion"] for stop in COMPLETION_STOP)
        info = json.loads(rec["info"])
        assert {"strict_correct", "flexible_correct", "boxed_correct"} <= set(info)
        # 4 worked examples of ~60 tokens each precede the question
        assert rec["prompt_tokens"] > 200
    # seeded per rollout (greedy, so both repeats of a prompt are the same text); prompts differ
    assert len({rec["seed"] for rec in records}) == 8
    assert len({rec["completion"] for rec in records}) > 1
