"""core.record: every run document refuses a mistyped key; the metrics.json files older evalflow versions wrote
(schema 2-4) load through the migration; a record round-trips through its JSON.

tests/core/data holds real documents, written by the old code itself (see its README.md): metrics_v2.json by
23302b5 (info_rates, no status), metrics_v3.json by e23a6dc (env_metrics, a Wilson ci.accuracy, comparison rows
without `method`), metrics_v4.json by 76d9add (a clustered ci.accuracy, an incomplete status with a failed
batch, provenance, shards, skipped long prompts); each the second of two runs of one deployment, so it holds
its comparison with the first. index_entry_v*.json are those runs' index entries.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pydantic
import pytest

from core.metrics_doc import METRICS_SCHEMA_VERSION
from core.record import Comparison, IndexEntry, RunInfo, RunRecord, RunStatus
from core.schema import to_parquet_bytes
from core.store import Store
from tasks.analysis.compare import baseline_comparison, compare
from tasks.analysis.metrics import compute_metrics
from tasks.reporting.index import index_entry
from tasks.reporting.report import write_report
from tests.tasks.conftest import benchmark_provenance, provenance, rollout

DATA = Path(__file__).parent / "data"
TIMINGS = {"prepare_model": 1.5, "serve": 20.25, "collect": 61.0, "analyze": 0.3}  # as the fixtures were written


def load(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())


def run_files(store: Store, run_id: str, successes: list[int]) -> list[str]:
    rows = [
        rollout(run_id=run_id, prompt_id=f"p{p}", repeat=r, success=r < s, reward=float(r < s),
                parsed_answer="2" if r < s else "3")
        for p, s in enumerate(successes)
        for r in range(3)
    ]  # fmt: skip
    url = store.path("runs", run_id, "rollouts", "gsm8k", "batch-0.parquet")
    return [store.write_bytes(url, to_parquet_bytes(rows))]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Today's metrics.json and index entry, as write_report and index_entry write them: an incomplete run
    with every part of run_info filled, compared with a baseline."""
    store = Store(str(tmp_path_factory.mktemp("record") / "store"))
    base_files, files = run_files(store, "run-1", [3, 2, 0, 3]), run_files(store, "run-2", [1, 0, 0, 2])
    baseline, metrics = compute_metrics(base_files, store), compute_metrics(files, store)
    failed = {"benchmark": "gsm8k", "index": 1, "size": 4, "failed": 1, "kind": "transient",
              "reasons": [("ReadTimeout: slow", 1)]}  # fmt: skip
    info = RunInfo.model_validate(
        {
            "run_id": "run-2",
            "run_name": "nightly-gsm8k",
            "status": {"state": "incomplete", "reason": "1 of 13 failed", "failed_rollouts": 1,
                       "planned_rollouts": 13, "failed_batches": [failed]},
            "model": "tiny",
            "started_at": "2025-06-02T10:00:00+00:00",
            "finished_at": "2025-06-02T10:05:00+00:00",
            "config": {"store": {"url": store.url, "storage_options": {"secret": "hunter2"}}},
            "timings": TIMINGS,
            "deployment": "nightly",
            "provenance": provenance(benchmark_provenance("gsm8k", options={"fewshot": 0}, max_tokens=256)),
            "shards": [{"index": 0, "batches": 1, "state": "Completed", "attempts": 1, "flow_runs": ["a1"]}],
            "long_prompts": {"gsm8k": {"limit": 1536, "longest": 2048, "policy": "skip", "prompts": 5, "skipped": 1}},
            "training_run": "sft-1",
            "step": 200,
        }
    )  # fmt: skip
    base_info = RunInfo(run_id="run-1", model="tiny", status=RunStatus(state="complete"), deployment="nightly")
    comparison = compare(metrics, baseline, info, base_info, "runs/run-1/report.html")
    urls = write_report(store.path("runs", "run-2"), metrics, info, files, store, comparison)
    entry = index_entry(info, metrics, urls, store.url)
    return {"metrics": json.loads(store.read_text(urls["metrics"])), "entry": json.loads(entry.model_dump_json())}


# ---------------------------------------------------------------------------------------------
# A mistyped key fails validation, wherever it is


def refused_keys(exc: pytest.ExceptionInfo[pydantic.ValidationError]) -> set[str]:
    return {str(e["loc"][-1]) for e in exc.value.errors() if e["type"] == "extra_forbidden"}


MISTYPED: dict[str, tuple[tuple[str, ...], str]] = {
    # what: (the path to the dict the key is added to, the key)
    "a benchmark's metrics": (("benchmarks", "gsm8k"), "acuracy"),
    "a benchmark's interval": (("benchmarks", "gsm8k", "ci", "accuracy"), "hihg"),
    "the top level": ((), "total_rollout"),
    "run_info": (("run_info",), "modle"),
    "run_info.status": (("run_info", "status"), "failed_rollout"),
    "a failed batch": (("run_info", "status", "failed_batches", "0"), "reason"),
    "the provenance": (("run_info", "provenance"), "pyton"),
    "the hardware": (("run_info", "provenance", "hardware"), "gpu"),
    "a benchmark's provenance": (("run_info", "provenance", "benchmarks", "0"), "max_token"),
    "a shard": (("run_info", "shards", "0"), "secs"),
    "skipped long prompts": (("run_info", "long_prompts", "gsm8k"), "skiped"),
    "the comparison": (("comparison",), "regresions"),
    "a comparison row": (("comparison", "benchmarks", "gsm8k", "accuracy"), "detla"),
    "the comparison's baseline": (("comparison", "baseline"), "reprot"),
    "the comparison's missing list": (("comparison", "missing"), "current"),
}


def with_key(doc: dict[str, Any], path: tuple[str, ...], key: str) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    target: Any = doc
    for part in path:
        target = target[int(part)] if isinstance(target, list) else target[part]
    target[key] = 1
    return doc


@pytest.mark.parametrize("what", list(MISTYPED))
def test_a_mistyped_key_in_metrics_json_fails(written: dict[str, Any], what: str) -> None:
    path, key = MISTYPED[what]
    doc = written["metrics"]
    RunRecord.model_validate(doc)  # as written: valid
    with pytest.raises(pydantic.ValidationError, match=key) as exc:
        RunRecord.model_validate(with_key(doc, path, key))
    assert refused_keys(exc) == {key}


def test_a_mistyped_key_in_an_index_entry_fails(written: dict[str, Any]) -> None:
    entry = written["entry"]
    assert entry["schema_version"] == METRICS_SCHEMA_VERSION and IndexEntry.model_validate(entry).status == "incomplete"
    with pytest.raises(pydantic.ValidationError, match="finshed_at") as exc:
        IndexEntry.model_validate({**entry, "finshed_at": "2025-06-02"})
    assert refused_keys(exc) == {"finshed_at"}
    with pytest.raises(pydantic.ValidationError, match="status"):
        IndexEntry.model_validate({**entry, "status": "completed"})


def test_a_mistyped_key_in_a_status_or_run_info_or_comparison_fails() -> None:
    with pytest.raises(pydantic.ValidationError, match="reson") as exc:
        RunStatus.model_validate({"state": "failed", "reson": "x"})
    assert refused_keys(exc) == {"reson"}
    with pytest.raises(pydantic.ValidationError, match="state"):
        RunStatus(state="completed")  # type: ignore[arg-type]
    with pytest.raises(pydantic.ValidationError, match="stage_timings") as exc:
        RunInfo.model_validate({"run_id": "r", "model": "m", "status": {"state": "complete"}, "stage_timings": {}})
    assert refused_keys(exc) == {"stage_timings"}  # renamed only in documents of older versions
    with pytest.raises(pydantic.ValidationError, match="improvments") as exc:
        Comparison.model_validate({"level": 0.95, "improvments": []})
    assert refused_keys(exc) == {"improvments"}


def test_a_key_a_later_version_retired_is_dropped_from_old_documents_only(written: dict[str, Any]) -> None:
    """Old documents lose the keys today's models do not declare; today's documents keep being refused."""
    old = with_key(load("metrics_v4.json"), ("run_info",), "report")
    assert "report" not in RunRecord.model_validate(old).run_info.model_dump()
    with pytest.raises(pydantic.ValidationError, match="report"):
        RunRecord.model_validate(with_key(written["metrics"], ("run_info",), "report"))


# ---------------------------------------------------------------------------------------------
# Older documents load through the migration


def test_a_schema_2_document_loads() -> None:
    """23302b5's metrics.json: boolean info keys as info_rates (Wilson CIs in ci.info_rates), categorical ones
    as info_outcomes, a run_info without status or provenance, comparison rows without a method."""
    doc = load("metrics_v2.json")
    assert doc["schema_version"] == 2 and "info_rates" in doc["benchmarks"]["gsm8k"] and "status" not in doc["run_info"]
    record = RunRecord.model_validate(doc)
    assert record.schema_version == 2 and record.state == "complete"  # runs before statuses all completed
    info = record.run_info
    assert (info.run_id, info.model, info.deployment, info.provenance) == ("run-2", "SmolLM2-135M-Instruct", "nightly",
                                                                          None)  # fmt: skip
    assert info.timings == TIMINGS and info.config["server"]["api_key"] == "***"
    bm = record.benchmarks["gsm8k"]
    assert (bm.accuracy, bm.n_rollouts, bm.ci.accuracy.method, bm.ci.accuracy.n) == (0.25, 12, "wilson", 12)
    strict = bm.env_metric("strict_correct")
    assert strict is not None and (strict.kind, strict.value, strict.n) == ("rate", 0.25, 12)
    assert strict.ci is not None and strict.ci.high == pytest.approx(0.532305334934)
    outcome = bm.env_metric("outcome")
    assert outcome is not None and outcome.kind == "counts" and outcome.counts == {"wrong": 9, "correct": 3}
    assert "info_rates" not in bm.model_dump() and "info_rates" not in bm.ci.model_dump()
    comparison = record.comparison
    assert comparison is not None and comparison.baseline is not None
    assert comparison.baseline.run_id == "run-1" and comparison.baseline.report == "runs/run-1/report.html"
    assert comparison.regressions == ["gsm8k: accuracy", "gsm8k: strict"]
    strict_row = comparison.benchmarks["gsm8k"]["strict"]
    assert strict_row.delta == pytest.approx(-5 / 12) and strict_row.regression and strict_row.n_current == 12


def test_a_schema_2_run_info_with_stage_timings_and_a_status_string_loads() -> None:
    """What RunRecord.migrate renames: `stage_timings` (read by reports since the first version) and a status
    given as its state alone (as index entries hold it)."""
    doc = load("metrics_v2.json")
    del doc["comparison"]  # (its rows: test_a_schema_2_document_loads)
    info = doc["run_info"]
    doc["run_info"] = {**{k: v for k, v in info.items() if k != "timings"}, "stage_timings": info["timings"],
                       "status": "failed"}  # fmt: skip
    record = RunRecord.model_validate(doc)
    assert record.run_info.timings == TIMINGS and record.run_info.status == RunStatus(state="failed")
    bare = RunRecord.model_validate({k: v for k, v in doc.items() if k != "run_info"})  # metrics alone
    assert (bare.run_info.run_id, bare.run_info.model, bare.state) == ("unknown", "unknown", "complete")
    assert bare.benchmarks["gsm8k"].accuracy == 0.25 and bare.comparison is None


def test_a_schema_3_document_loads() -> None:
    """e23a6dc's metrics.json: env_metrics, a Wilson ci.accuracy without an SE, a status and provenance."""
    doc = load("metrics_v3.json")
    record = RunRecord.model_validate(doc)
    assert record.schema_version == 3 and record.state == "complete" and record.run_info.timings == TIMINGS
    bm = record.benchmarks["gsm8k"]
    assert bm.ci.accuracy.method == "wilson" and bm.ci.accuracy.se is None and bm.ci.accuracy.n == 12
    assert bm.env_metric("exact_match,strict-match").value == 0.25  # type: ignore[union-attr]
    prov = record.run_info.provenance
    assert prov is not None and prov.evalflow.commit and prov.evalflow.commit.startswith("e23a6dc")
    assert [(b.benchmark, b.env, b.rows) for b in prov.benchmarks] == [("gsm8k", "gsm8k", 4)]
    comparison = record.comparison
    assert comparison is not None and "gsm8k: accuracy" in comparison.regressions
    accuracy = comparison.benchmarks["gsm8k"]["accuracy"]
    assert accuracy.delta == pytest.approx(-5 / 12) and accuracy.n_current == 12 and accuracy.regression


def test_a_schema_4_document_loads() -> None:
    """76d9add's metrics.json (the shape before run documents were typed)."""
    doc = load("metrics_v4.json")
    record = RunRecord.model_validate(doc)
    assert record.schema_version == 4 and record.total_rollouts == 12
    status = record.run_info.status
    assert (status.state, status.failed_rollouts, status.planned_rollouts) == ("incomplete", 1, 16)
    assert status.reason.startswith("1 of 16 rollouts (6.2%) failed transiently")
    (batch,) = status.failed_batches
    assert (batch.benchmark, batch.index, batch.kind, batch.reasons) == ("gsm8k", 1, "transient",
                                                                         [("ReadTimeout: slow", 1)])  # fmt: skip
    info = record.run_info
    assert info.timings == TIMINGS and info.run_name == "nightly-gsm8k" and info.model_source
    assert [(s.index, s.state, s.flow_runs) for s in info.shards] == [(0, "Completed", ["a1"])]
    assert info.long_prompts["gsm8k"].skipped == 1 and info.long_prompts["gsm8k"].limit == 1536
    prov = info.provenance
    assert prov is not None and prov.evalflow.commit and prov.evalflow.commit.startswith("76d9add")
    assert prov.server["mode"] == "managed" and prov.benchmarks[0].max_tokens == 256
    bm = record.benchmarks["gsm8k"]
    assert bm.ci.accuracy.method == "clustered-prompts" and bm.ci.accuracy.se == pytest.approx(0.138192699598)
    strict = bm.env_metric("exact_match,strict-match")
    assert strict is not None and strict.headline and strict.value == 0.25
    comparison = record.comparison
    assert comparison is not None and comparison.current is not None and comparison.current.run_id == "run-2"
    rows = comparison.benchmarks["gsm8k"]
    assert rows["accuracy"].method == "clustered-prompts" and rows["accuracy"].n_current == 4
    assert rows["accuracy"].delta == pytest.approx(-5 / 12) and not rows["accuracy"].regression
    assert rows["mean_reward"].method == "bootstrap-prompts" and rows["mean_reward"].kind == "mean"
    assert comparison.regressions == [f"gsm8k: {row.label}" for row in rows.values() if row.regression]
    assert "gsm8k: exact_match,strict-match" in comparison.regressions


@pytest.mark.parametrize(("version", "status"), [(2, "complete"), (3, "complete"), (4, "incomplete")])
def test_old_index_entries_load(version: int, status: str) -> None:
    entry = IndexEntry.model_validate(load(f"index_entry_v{version}.json"))
    assert entry.schema_version == METRICS_SCHEMA_VERSION and entry.status == status
    assert (entry.run_id, entry.deployment, entry.metrics) == ("run-2", "nightly", "runs/run-2/metrics.json")
    assert entry.headline["gsm8k"]["accuracy"] == 0.25


@pytest.mark.parametrize("version", [2, 3])
def test_an_old_complete_run_is_still_a_baseline(tmp_path: Path, version: int) -> None:
    """Its metrics.json (comparison included) is read back as a RunRecord and compared with."""
    store = Store(str(tmp_path / "store"))
    store.write_text(store.path("runs", "run-2", "metrics.json"), (DATA / f"metrics_v{version}.json").read_text())
    entries = [IndexEntry.model_validate(load(f"index_entry_v{version}.json"))]
    current = RunRecord.model_validate(load("metrics_v4.json"))
    info = current.run_info.model_copy(update={"run_id": "run-3"})
    comparison = baseline_comparison(store, current, info, entries)
    assert comparison is not None and comparison.baseline is not None and comparison.baseline.run_id == "run-2"
    assert comparison.baseline.report == "runs/run-2/report.html"
    assert comparison.benchmarks["gsm8k"]["accuracy"].delta == pytest.approx(0.0)


# ---------------------------------------------------------------------------------------------
# Round trips


def test_the_written_record_round_trips(written: dict[str, Any]) -> None:
    record = RunRecord.model_validate(written["metrics"])
    assert record.schema_version == METRICS_SCHEMA_VERSION and record.state == "incomplete"
    assert record.run_info.config["store"]["storage_options"]["secret"] == "***"  # redacted when written
    assert record.comparison is not None and record.comparison.baseline is not None
    assert record.run_info.step == 200 and record.run_info.training_run == "sft-1"
    assert record.run_info.status.failed_batches[0].reasons == [("ReadTimeout: slow", 1)]
    again = RunRecord.model_validate_json(record.model_dump_json())
    assert again == record
    assert json.loads(again.model_dump_json()) == written["metrics"]  # the file is exactly the record
    entry = IndexEntry.model_validate(written["entry"])
    assert IndexEntry.model_validate_json(entry.model_dump_json()) == entry


@pytest.mark.parametrize("version", [2, 3, 4])
def test_an_old_record_round_trips_keeping_its_version(version: int) -> None:
    record = RunRecord.model_validate(load(f"metrics_v{version}.json"))
    again = RunRecord.model_validate_json(record.model_dump_json())
    assert again == record and again.schema_version == version
