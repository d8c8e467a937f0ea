"""The baselines run through the real server: every setting's prompts (lm-eval's completion prompts, few-shot
blocks, stop sequences, per-benchmark token limits) are accepted, scored, and land in the lm-eval table."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import duckdb
import pytest
import yaml

from core.config import REPO_ROOT, EvalConfig
from flows.eval import eval_flow
from tasks.serving.server import Endpoint

pytestmark = pytest.mark.e2e


def test_every_baseline_setting_through_the_server(endpoint: Endpoint, prefect_home: Path, tmp_path: Path) -> None:
    config = yaml.safe_load((REPO_ROOT / "configs" / "baselines.yaml").read_text())
    for bench in config["benchmarks"]:
        bench["limit"] = 2
        bench["max_tokens"] = min(bench.get("max_tokens") or 256, 160)  # the settings' prompts, shorter answers
    config.update(
        model={"source": endpoint.model, "served_name": endpoint.model},
        server={"mode": "external", "base_url": endpoint.base_url},
        store={"url": str(tmp_path)},
    )
    result = asyncio.run(eval_flow(EvalConfig.model_validate(config)))
    benches = result.model_dump(mode="json")["benchmarks"]
    labels = ["gsm8k_0shot", "gsm8k_4shot", "gsm8k_8shot", "math_4shot", "ifeval", "mbpp_3shot", "humaneval"]
    assert sorted(benches) == sorted(labels)
    assert {label: (b["n_rollouts"], b["error_count"]) for label, b in benches.items()} == dict.fromkeys(labels, (2, 0))

    rows = duckdb.sql(
        f"select benchmark, messages, completion, sampling, finish_reason, info "
        f"from read_parquet('{result.collection.run_dir}/rollouts/*/*.parquet')"
    ).fetchall()
    by_label: dict[str, list[tuple]] = {}
    for row in rows:
        by_label.setdefault(row[0], []).append(row)
    for label, found in by_label.items():
        for _, messages, completion, sampling, _finish, info in found:
            prompt = json.loads(messages)
            assert isinstance(prompt, str), f"{label}: completion mode sends a plain prompt, got chat messages"
            assert json.loads(sampling)["temperature"] == 0.0
            if label == "humaneval":  # lm-eval's fifth stop, cut on our side: never in the completion
                assert "\nprint" not in completion and "\nclass" not in completion
            if label == "ifeval":  # one verdict per instruction, strict and loose
                checks = json.loads(info)
                assert len(checks["inst_level_strict_acc"]) == len(checks["instruction_ids"]) >= 1
    eight = json.loads(by_label["gsm8k_8shot"][0][1])
    assert eight.count("Question:") == 9 and json.loads(by_label["gsm8k_0shot"][0][1]).count("Question:") == 1
    assert json.loads(by_label["math_4shot"][0][1]).count("Problem:") == 5
    assert json.loads(by_label["mbpp_3shot"][0][1]).count("[BEGIN]") == 4
    assert {json.loads(s)["max_tokens"] for _, _, _, s, _, _ in by_label["ifeval"]} == {160}

    report = (Path(result.collection.run_dir) / "report.md").read_text()
    table = report[report.index("## lm-eval metrics") :].split("\n## ")[0]
    for label, metric in [
        ("gsm8k_8shot", "exact_match,flexible-extract"), ("math_4shot", "exact_match,none"),
        ("ifeval", "inst_level_loose_acc,none"), ("mbpp_3shot", "pass_at_1,none"), ("humaneval", "pass@1,create_test"),
    ]:  # fmt: skip
        assert f"| {label} |" in table and f"| {metric} |" in table
