"""Reasoning models end to end on the real vLLM CPU server: the default model made to think.

SmolLM2 does not think, and vLLM's think-tag parsers need `<think>` and `</think>` as single tokens; the test
model is SmolLM2 with the two tags added (tests/thinking_model.py). Structured outputs (a structural tag with
the tags' token ids) make it write a think block with a number planted in it; the chat template opens the block
in the prompt (`open_think`, as DeepSeek-R1's does) for the thinking-budget and cut-off cases, and closes it empty
when thinking is off (as Qwen3's does).

Run A: a managed server with vLLM's qwen3 reasoning parser. Run B: the same model on a server without a parser,
through the fault proxy (which records the requests): evalflow splits the completions itself and must give the
same records. Greedy, one request at a time, so the two servers write the same text.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from core.config import EvalConfig, ServerConfig
from flows.eval import eval_flow
from tasks.checkpoints.prepare import PreparedModel
from tasks.runtime.venv import ensure_runtime
from tasks.serving.server import VLLMServer
from tests.conftest import FAST_START
from tests.faultproxy import FaultProxy
from tests.thinking_model import thinking_model

pytestmark = pytest.mark.e2e

TEMPLATE = "configs/chat_templates/smollm2_think.jinja"
EXTRA_ARGS = [*FAST_START, "--structured-outputs-config", '{"enable_in_reasoning": true}']
QUESTIONS = ["Tom has 3 apples and buys 4 more. How many apples?", "What is 10 - 3?", "What is 14 / 2?"]
COLUMNS = ("prompt_id", "reasoning", "completion", "ended_in_reasoning", "reasoning_tokens", "answer_tokens",
           "completion_tokens", "reward", "success", "finish_reason", "info", "error")  # fmt: skip
SAME = ("reasoning", "completion", "ended_in_reasoning", "reward", "success", "finish_reason")
LM_EVAL = ("exact_match,strict-match", "exact_match,flexible-extract")


@pytest.fixture(scope="module")
def thinker(smollm2: PreparedModel) -> Path:
    return thinking_model(Path(smollm2.path), Path.home() / ".cache" / "evalflow" / "thinking-models")


def tag_ids(folder: Path) -> tuple[int, int]:
    added = {t["content"]: t["id"] for t in json.loads((folder / "tokenizer.json").read_text())["added_tokens"]}
    return added["<think>"], added["</think>"]


def forced(ids: tuple[int, int], thinking: str, answer: str) -> dict[str, Any]:
    """A request field making the model write `<think>` (the token), text matching `thinking`, `</think>` (the
    token), then text matching `answer`."""
    fmt = {"type": "sequence", "elements": [
        {"type": "token", "token": ids[0]}, {"type": "regex", "pattern": thinking},
        {"type": "token", "token": ids[1]}, {"type": "regex", "pattern": answer},
    ]}  # fmt: skip
    return {"structured_outputs": {"structural_tag": json.dumps({"type": "structural_tag", "format": fmt})}}


def benchmarks(ids: tuple[int, int], dataset: Path) -> list[dict[str, Any]]:
    base = {"name": "gsm8k", "dataset": str(dataset), "repeats": 1}
    return [
        # the right answer (7) planted in the thinking, a wrong one after it
        {**base, "label": "planted", "extra_body": forced(ids, r"\nFirst guess: #### 7\.[a-z ]{0,30}\n",
                                                           r"\n\nSo the answer is #### 8\.[a-z ]{0,20}")},
        # the converse: the answer counts
        {**base, "label": "answered", "extra_body": forced(ids, r"\nFirst guess: #### 9\.[a-z ]{0,30}\n",
                                                            r"\n\nSo the answer is #### 7\.[a-z ]{0,20}")},
        # cut off by the token limit inside thinking that says 7
        {**base, "label": "truncated", "max_tokens": 12,
         "extra_body": forced(ids, r"\nThe answer is 7\.[a-z ]{100,300}\n", r"\n\n#### 7")},
        # the template opened the block and the model thinks until the limit
        {**base, "label": "opened", "max_tokens": 12, "chat_template_kwargs": {"open_think": True}},
    ]  # fmt: skip


def run(config: dict[str, Any]) -> tuple[Any, dict[str, dict[str, dict[str, Any]]]]:
    result = asyncio.run(eval_flow(EvalConfig.model_validate(config)))
    found = duckdb.sql(
        f"select benchmark, {', '.join(COLUMNS)} from read_parquet('{result.collection.run_dir}/rollouts/*/*.parquet')"
    ).fetchall()
    records: dict[str, dict[str, dict[str, Any]]] = {}
    for bench, *values in found:
        record = dict(zip(COLUMNS, values, strict=True))
        record["info"] = json.loads(record["info"])
        records.setdefault(bench, {})[record["prompt_id"]] = record
    return result, records


def test_reasoning_is_kept_apart_never_scored_and_split_alike_with_or_without_a_parser(
    thinker: Path, prefect_home: Path, tmp_path: Path
) -> None:
    dataset = tmp_path / "sevens.jsonl"
    dataset.write_text(
        "".join(json.dumps({"id": f"q{i}", "question": q, "answer": 7}) + "\n" for i, q in enumerate(QUESTIONS))
    )
    ids = tag_ids(thinker)
    common = {
        "model": {"source": str(thinker), "served_name": "thinker"},
        "sampling": {"temperature": 0.0, "max_tokens": 64},
        "collection": {"batch_size": 8, "concurrency": 1},
    }

    # Run A: vLLM splits (qwen3 reasoning parser), and the thinking budget ends the reasoning
    budget = {"name": "gsm8k", "dataset": str(dataset), "repeats": 1, "label": "budget", "max_tokens": 48,
              "thinking_budget": 10, "chat_template_kwargs": {"open_think": True}}  # fmt: skip
    server = {"reasoning_parser": "qwen3", "chat_template": TEMPLATE, "extra_args": EXTRA_ARGS}
    result_a, a = run({**common, "server": server, "benchmarks": [*benchmarks(ids, dataset), budget],
                       "store": {"url": str(tmp_path / "a")}})  # fmt: skip
    assert result_a.run_info.status.state == "complete"
    for pid in ("q0", "q1", "q2"):
        planted, answered = a["planted"][pid], a["answered"][pid]
        assert planted["reasoning"].startswith("\nFirst guess: #### 7.") and "<think>" not in planted["reasoning"]
        assert planted["completion"].startswith("So the answer is #### 8.")
        # the planted right answer never scores, not even under lm-eval's names (the answer is read after </think>)
        assert (planted["reward"], planted["success"], planted["ended_in_reasoning"]) == (0.0, False, False)
        assert [planted["info"][k] for k in LM_EVAL] == [False, False]
        assert (answered["reward"], answered["success"], [answered["info"][k] for k in LM_EVAL]) == (
            1.0,
            True,
            [True, True],
        )
        # tokens apart, counted by the server's parser
        assert 5 < planted["reasoning_tokens"] < planted["completion_tokens"]
        assert planted["answer_tokens"] == planted["completion_tokens"] - planted["reasoning_tokens"]
        # cut off while reasoning: its own outcome, reward 0, though the thinking says 7 (and lm-eval, reading the
        # unterminated text whole, counts its flexible-extract)
        for cut in (a["truncated"][pid], a["opened"][pid]):
            assert (cut["ended_in_reasoning"], cut["completion"], cut["reward"], cut["finish_reason"]) == (
                True,
                "",
                0.0,
                "length",
            )
            # the parser counts the tokens between the tags: all 12, less a <think> the model wrote itself
            assert cut["completion_tokens"] == 12 and cut["reasoning_tokens"] in (11, 12)
            assert cut["answer_tokens"] == 12 - cut["reasoning_tokens"]
        assert a["truncated"][pid]["info"]["exact_match,flexible-extract"] is True
        assert a["truncated"][pid]["info"]["parse_error"] is True  # the empty answer; the report counts it apart
        # a thinking budget: vLLM closes the reasoning after 10 tokens and the model answers
        b = a["budget"][pid]
        assert b["ended_in_reasoning"] is False and b["completion"] and 8 <= b["reasoning_tokens"] <= 11
    metrics = json.loads(Path(result_a.collection.run_dir, "metrics.json").read_text())["benchmarks"]
    assert (
        metrics["truncated"]["reasoning"]["ended_in_reasoning"] == 3 and metrics["truncated"]["parse_error_rate"] == 0.0
    )
    assert metrics["planted"]["reasoning"]["ended_in_reasoning"] == 0 and metrics["planted"]["accuracy"] == 0.0

    # Run B: the same model without a reasoning parser, through the proxy: evalflow splits by the tags itself
    plain = ServerConfig(chat_template=TEMPLATE, extra_args=EXTRA_ARGS)
    model = PreparedModel(str(thinker), "thinker", "thinker", str(thinker), "hf")
    vllm = VLLMServer(ensure_runtime("auto"), model, plain, tmp_path / "b-vllm.log")
    endpoint = vllm.start()
    proxy = FaultProxy(endpoint.base_url.removesuffix("/v1")).start()
    try:
        external = {"mode": "external", "base_url": proxy.base_url}
        off = {"name": "gsm8k", "dataset": str(dataset), "repeats": 1, "label": "off", "thinking": "off"}
        _, b = run({**common, "model": {**common["model"], "reasoning": {"opened_by_template": True}},
                    "server": external, "benchmarks": [*benchmarks(ids, dataset), off],
                    "store": {"url": str(tmp_path / "b")}})  # fmt: skip
        bodies = [json.loads(body) for body in proxy.bodies]
        # a thinking budget needs a parser: the server's 400 fails the run as a configuration error, at once
        with pytest.raises(Exception, match="thinking_token_budget"):
            run({**common, "server": external, "benchmarks": [budget], "store": {"url": str(tmp_path / "c")}})
    finally:
        proxy.stop()
        vllm.stop()
    for bench in ("planted", "answered", "truncated", "opened"):
        for pid, mine in b[bench].items():
            theirs = a[bench][pid]
            assert {k: mine[k] for k in SAME} == {k: theirs[k] for k in SAME}, (bench, pid)
            assert {k: mine["info"][k] for k in LM_EVAL} == {k: theirs["info"][k] for k in LM_EVAL}, (bench, pid)
            # counted by the server's tokenizer (/tokenize) instead of its parser: the same for the model's own text;
            # text forced by the grammar may come in more pieces than its canonical tokenization
            if bench == "opened":
                assert abs(mine["reasoning_tokens"] - theirs["reasoning_tokens"]) <= 1, (bench, pid)
            else:
                assert 0 < mine["reasoning_tokens"] <= theirs["reasoning_tokens"], (bench, pid)
    assert proxy.counts.paths.get("/tokenize", 0) >= 9
    # thinking off reaches the server as the template's switch, and its empty think block is not in the answer
    switched = [body for body in bodies if body.get("chat_template_kwargs", {}).get("enable_thinking") is False]
    assert len(switched) == 3
    for record in b["off"].values():
        assert record["reasoning"] is None and record["ended_in_reasoning"] is False
        assert record["completion"] and "<think>" not in record["completion"] and "</think>" not in record["completion"]
