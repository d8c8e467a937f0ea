"""One environment in several settings (labels), per-benchmark max_tokens, and the tool-choice preflight."""

from __future__ import annotations

from pathlib import Path

import pytest
from prefect.filesystems import LocalFileSystem

from core.config import EvalConfig
from core.store import Store
from tasks.collection.plan import batch_url, load_benchmarks, plan
from tasks.collection.provenance import benchmark_provenance


def planned(config: EvalConfig, tmp_path: Path) -> list:
    store = Store(str(tmp_path / "store"))
    benchmarks = load_benchmarks(config, store)
    return plan(benchmarks, config, "model-fp", LocalFileSystem(basepath=str(tmp_path / "results")), store)


def test_labelled_settings_of_one_environment_plan_apart(tmp_path: Path) -> None:
    config = EvalConfig.model_validate(
        {
            "sampling": {"max_tokens": 512, "temperature": 0.0},
            "benchmarks": [
                {"name": "gsm8k", "label": "gsm8k_0shot", "limit": 4, "repeats": 1, "max_tokens": 256},
                {"name": "gsm8k", "label": "gsm8k_8shot", "limit": 4, "repeats": 1, "options": {"fewshot": 8}},
            ],
            "collection": {"batch_size": 2},
        }
    )
    work = planned(config, tmp_path)
    by_label = {
        label: [p.batch for p in work if p.batch.benchmark == label] for label in ("gsm8k_0shot", "gsm8k_8shot")
    }
    assert [len(b) for b in by_label.values()] == [2, 2]
    zero, eight = by_label["gsm8k_0shot"], by_label["gsm8k_8shot"]
    # the benchmark's own limit goes to its requests and its cache key; the other keeps the run's
    assert {b.sampling.max_tokens for b in zero} == {256} and {b.sampling.max_tokens for b in eight} == {512}
    assert not {b.key for b in zero} & {b.key for b in eight}
    assert all("/rollouts/gsm8k_0shot/" in batch_url("/r", b) for b in zero)
    assert len({batch_url("/r", b) for b in zero + eight}) == 4

    # the same setting with another max_tokens samples other completions: other cache entries
    longer = EvalConfig.model_validate(
        {**config.model_dump(), "benchmarks": [{**config.benchmarks[0].model_dump(), "max_tokens": 512}]}
    )
    assert not {p.batch.key for p in planned(longer, tmp_path)} & {b.key for b in zero}
    assert [p.batch.key for p in planned(config, tmp_path)] == [p.batch.key for p in work]  # and stable


def test_provenance_records_the_label_environment_and_max_tokens(tmp_path: Path) -> None:
    config = EvalConfig.model_validate(
        {"benchmarks": [{"name": "gsm8k", "label": "gsm8k_4shot", "limit": 2, "max_tokens": 300}]}
    )
    (bench,) = load_benchmarks(config, Store(str(tmp_path / "store")))
    record = benchmark_provenance(bench, None)
    assert (record.benchmark, record.env, record.max_tokens) == ("gsm8k_4shot", "gsm8k", 300)


@pytest.mark.parametrize(
    ("server", "options", "fails"),
    [
        ({}, {"mode": "tools"}, True),  # auto tool choice, no parser: vLLM would reject every request
        ({"tool_call_parser": "hermes"}, {"mode": "tools"}, False),
        ({}, {"mode": "tools", "tool_choice": "required"}, False),  # forced calls need no parser
        ({}, {"mode": "text"}, False),
        ({"mode": "external", "base_url": "http://127.0.0.1:9/v1"}, {"mode": "tools"}, False),  # its own business
    ],
)
def test_auto_tool_choice_needs_a_parser_on_the_managed_server(
    tmp_path: Path, server: dict, options: dict, fails: bool
) -> None:
    config = EvalConfig.model_validate(
        {
            "server": server,
            "benchmarks": [{"name": "gsm8k", "limit": 1}, {"name": "tetris", "limit": 1, "options": options}],
        }
    )
    if fails:
        with pytest.raises(ValueError, match=r"benchmarks\.1 \(tetris\): .*set server\.tool_call_parser"):
            load_benchmarks(config, Store(str(tmp_path / "store")))
    else:
        assert len(load_benchmarks(config, Store(str(tmp_path / "store")))) == 2


def test_stops_beyond_the_apis_four_are_cut_client_side() -> None:
    from tasks.collection.rollout import MAX_STOPS, cut_at_stops

    stops = ["\nclass", "\ndef", "\n#", "\nif", "\nprint"]  # lm-eval's HumanEval stops: one more than the API takes
    assert MAX_STOPS == 4
    body = "    return a + b\n"
    assert cut_at_stops(body + "\nprint(add(1, 2))\nmore", stops[MAX_STOPS:]) == body
    assert cut_at_stops(body + "\nprint(1)\n\nprint(2)", ["\nprint", "\nprint(2)"]) == body  # the first one wins
    assert cut_at_stops(body, stops[MAX_STOPS:]) == body and cut_at_stops(body, []) == body


def test_the_data_and_prompts_table_shows_each_benchmarks_token_limit(tmp_path: Path) -> None:
    from tasks.reporting.tables import provenance_sections
    from tests.tasks.conftest import provenance

    config = EvalConfig.model_validate(
        {
            "benchmarks": [
                {"name": "gsm8k", "label": "short", "limit": 1, "max_tokens": 64},
                {"name": "math", "limit": 1},
            ]
        }
    )
    records = [benchmark_provenance(b, None) for b in load_benchmarks(config, Store(str(tmp_path / "store")))]
    (section,) = [s for s in provenance_sections(provenance(*records)) if s.title == "Data and prompts"]
    column = section.table.header.index("max tokens")
    assert [(row[0], row[column]) for row in section.table.rows] == [("short", "64"), ("math", "512")]


def test_a_batch_record_round_trips_and_declares_the_results_fields() -> None:
    """The persisted cache record (BatchRecord) and BatchResult declare the same fields; a record with
    another key set (an older format) is no result, so its batch is collected again."""
    from dataclasses import fields

    from tasks.collection.plan import BatchRecord, BatchResult

    assert set(BatchRecord.__annotations__) == {f.name for f in fields(BatchResult)}
    result = BatchResult("s3://b/run/batch.parquet", 8, 1, 900, 2.5)
    assert BatchResult.from_record(dict(result.as_record())) == result
    assert BatchResult.from_record({**result.as_record(), "extra": 1}) is None
