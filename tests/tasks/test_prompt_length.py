"""Prompts longer than the context allows are found at plan time, with the model's own tokenizer: the
run fails in one line naming file:line and the token count, or skips them when the benchmark says so.
Before: each repeat of a 50 MB row went to the server, its 400 was scored as the model's answer and
the batch cached."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.main import app
from core.config import EvalConfig
from core.store import Store
from envs.base import DatasetError
from tasks.checkpoints.hashing import MARKER
from tasks.checkpoints.prepare import PreparedModel
from tasks.collection import prompt_length
from tasks.collection.plan import load_benchmarks
from tasks.collection.prompt_length import check_prompt_lengths, count_tokens, first_request

LONG = " ".join(["How many apples are left if you eat one of them?"] * 400)  # ~4,400 tokens


def dataset(path: Path, long_lines: tuple[int, ...]) -> Path:
    rows = []
    for line in range(1, 6):
        question = LONG if line in long_lines else f"What is {line} + {line}?"
        rows.append(json.dumps({"id": f"q{line}", "question": question, "answer": str(2 * line)}))
    path.write_text("\n".join(rows) + "\n")
    return path


def config(smollm2: PreparedModel, data: Path, tmp_path: Path, **bench: Any) -> EvalConfig:
    return EvalConfig.model_validate(
        {
            "model": {"source": smollm2.path},  # an HF folder: served in place, its tokenizer is here
            "benchmarks": [{"name": "gsm8k", "dataset": str(data), "repeats": 2, **bench}],
            "store": {"url": str(tmp_path / "store")},
        }
    )


def test_counts_are_the_tokenizers_and_are_cached(
    smollm2: PreparedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = config(smollm2, dataset(tmp_path / "d.jsonl", ()), tmp_path)
    (bench,) = load_benchmarks(cfg, Store(cfg.store.url))
    requests = [first_request(bench, row) for row in bench.rows]
    assert requests[0] == {"messages": bench.env.messages(bench.rows[0])}
    counts = count_tokens(requests, smollm2.path, smollm2.fingerprint, None, cfg)
    # SmolLM2's template adds its default system prompt: every chat request costs more than its words
    assert len(counts) == 5 and all(30 < n < 120 for n in counts), counts
    assert counts[0] == counts[1]  # "What is 1 + 1?" and "What is 2 + 2?": the same number of tokens
    monkeypatch.setattr(prompt_length, "run_script", None)  # a second count would fail: it is read from the cache
    assert count_tokens(requests, smollm2.path, smollm2.fingerprint, None, cfg) == counts
    # the next checkpoint of a training run: other weights, the same tokenizer: still cached
    step = tmp_path / "step"
    step.mkdir()
    for item in Path(smollm2.path).iterdir():
        if item.name.endswith(".safetensors") or item.name == MARKER:  # the weights, and the conversion's record
            (step / item.name).write_bytes(b"another step's")
        else:
            (step / item.name).symlink_to(item)
    assert count_tokens(requests, str(step), "another-fingerprint", None, cfg) == counts
    (step / "tokenizer_config.json").unlink()  # another tokenizer (its config, its chat template): counted again
    (step / "tokenizer_config.json").write_text(Path(smollm2.path, "tokenizer_config.json").read_text() + " ")
    with pytest.raises(TypeError):  # run_script is None: a count was attempted
        count_tokens(requests, str(step), "another-fingerprint", None, cfg)


def test_a_long_prompt_fails_the_plan_naming_file_line_and_tokens(smollm2: PreparedModel, tmp_path: Path) -> None:
    data = dataset(tmp_path / "d.jsonl", (3, 5))
    cfg = config(smollm2, data, tmp_path)
    benchmarks = load_benchmarks(cfg, Store(cfg.store.url))
    with pytest.raises(DatasetError) as info:
        check_prompt_lengths(benchmarks, cfg, smollm2.path, smollm2.fingerprint)
    message = str(info.value)
    assert message.startswith(f"{data}:3: the prompt of benchmark gsm8k is ")
    tokens = int(message.split(" is ", 1)[1].split(" tokens", 1)[0])
    assert 4000 < tokens < 6000
    limit = 2048 - cfg.sampling.max_tokens
    assert (
        f"over the {limit} a request may have (server.max_model_len 2048 - max_tokens {cfg.sampling.max_tokens}) "
        in message
    )
    assert message.endswith("(2 prompts of 5 are over it): raise server.max_model_len, lower max_tokens, or set "
                            "benchmarks.N.on_long_prompt: skip")  # fmt: skip

    args = [f"model.source={smollm2.path}", f"benchmarks.0.dataset={data}", f"store.url={tmp_path / 'store'}"]
    result = CliRunner().invoke(app, ["run", "--dry-run", *args])
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == f"dataset error: {message}"  # after any progress lines


def test_on_long_prompt_skip_leaves_them_out_and_counts_them(smollm2: PreparedModel, tmp_path: Path) -> None:
    cfg = config(smollm2, dataset(tmp_path / "d.jsonl", (3,)), tmp_path, on_long_prompt="skip")
    (bench,) = check_prompt_lengths(load_benchmarks(cfg, Store(cfg.store.url)), cfg, smollm2.path, smollm2.fingerprint)
    assert [row["id"] for row in bench.rows] == ["q1", "q2", "q4", "q5"]
    assert bench.long_prompts is not None
    summary = bench.long_prompts
    assert (summary.skipped, summary.limit, summary.policy) == (1, 2048 - cfg.sampling.max_tokens, "skip")
    assert bench.long_prompts.longest > 4000
    # max_tokens is part of the limit: with a longer context the same prompt fits
    roomy = cfg.model_copy(update={"server": cfg.server.model_copy(update={"max_model_len": 8192})})
    benchmarks = load_benchmarks(roomy, Store(cfg.store.url))
    (kept,) = check_prompt_lengths(benchmarks, roomy, smollm2.path, smollm2.fingerprint)
    assert len(kept.rows) == 5 and kept.long_prompts is not None and kept.long_prompts.skipped == 0
    with pytest.raises(DatasetError, match="every prompt is over"):
        only = config(smollm2, dataset(tmp_path / "all.jsonl", (1, 2, 3, 4, 5)), tmp_path, on_long_prompt="skip")
        check_prompt_lengths(load_benchmarks(only, Store(cfg.store.url)), only, smollm2.path, smollm2.fingerprint)
