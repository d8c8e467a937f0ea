"""compare(): deltas, intervals and regression flags; find_baseline() over a run index's entries."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from core.metrics_doc import RunMetrics
from core.record import Comparison, IndexEntry, Missing, RunRecord
from core.store import Store
from tasks.analysis.compare import baseline_comparison, compare, find_baseline, rate_delta
from tasks.analysis.metrics import compute_metrics
from tasks.analysis.stats import wilson_ci, wilson_interval
from tests.tasks.conftest import run_info


def bench(rate: float, n: int, **extra: Any) -> dict[str, Any]:
    """A benchmark's metrics with just what compare() reads (n prompts x 1 repeat: the clustered SE of
    the accuracy is then sqrt(p(1 - p) / n))."""
    low, high = wilson_interval(rate, n)
    se = math.sqrt(rate * (1 - rate) / n)
    out = {
        "n_prompts": n,
        "n_rollouts": n,
        "successes": round(rate * n),
        "repeats": {"min": 1, "max": 1},
        "accuracy": rate,
        "mean_reward": rate,
        "pass_at_k": {"1": rate},
        "maj_at_k": {"1": rate},
        "env_metrics": [],
        "ci": {
            "accuracy": {"low": low, "high": high, "n": n, "rollouts": n, "se": se},
            "mean_reward": {"low": low, "high": high, "n": n},
        },
    }
    out.update(extra)
    return out


def env_rate(key: str, value: float, n: int, headline: bool = True) -> dict[str, Any]:
    return {"key": key, "label": key.split("_")[0], "kind": "rate", "headline": headline, "value": value, "n": n}


def metrics(**benches: dict[str, Any]) -> RunMetrics:
    return RunMetrics.model_validate({"benchmarks": benches})


def test_rate_delta_is_newcombes_score_interval() -> None:
    delta, low, high = rate_delta(0.3, 200, 0.8, 200)
    l1, u1 = wilson_interval(0.3, 200)
    l0, u0 = wilson_interval(0.8, 200)
    assert delta == pytest.approx(-0.5)
    assert low == pytest.approx(-0.5 - math.hypot(0.3 - l1, u0 - 0.8))
    assert high == pytest.approx(-0.5 + math.hypot(u1 - 0.3, 0.8 - l0))
    assert -0.6 < low < high < -0.4
    # At 0% and 100% the interval stays wide where Wald's would collapse to a point.
    delta, low, high = rate_delta(0.0, 5, 1.0, 5)
    assert delta == -1.0 and low < -0.5 < high < 0.0


def test_a_clear_drop_is_a_regression() -> None:
    result = compare(metrics(gsm8k=bench(0.3, 200)), metrics(gsm8k=bench(0.8, 200)))
    acc = result.benchmarks["gsm8k"]["accuracy"]
    assert acc.delta == pytest.approx(-0.5) and acc.regression is True and acc.improvement is False
    assert acc.high < 0 and acc.n_current == acc.n_baseline == 200
    assert result.benchmarks["gsm8k"]["mean_reward"].regression is True
    assert "gsm8k: accuracy" in result.regressions and result.improvements == []


def test_noise_is_not_a_regression() -> None:
    result = compare(metrics(gsm8k=bench(0.48, 50)), metrics(gsm8k=bench(0.50, 50)))
    acc = result.benchmarks["gsm8k"]["accuracy"]
    assert acc.delta == pytest.approx(-0.02)
    assert acc.low < 0 < acc.high
    assert acc.regression is False and result.regressions == []


def test_a_clear_rise_is_an_improvement() -> None:
    result = compare(metrics(gsm8k=bench(0.8, 200)), metrics(gsm8k=bench(0.3, 200)))
    assert result.benchmarks["gsm8k"]["accuracy"].improvement is True
    assert result.regressions == [] and "gsm8k: accuracy" in result.improvements


def test_headline_metrics_compared_and_missing_benchmarks_listed() -> None:
    cur = bench(
        0.5,
        100,
        repeats={"min": 8, "max": 8},
        pass_at_k={"1": 0.5, "2": 0.6, "4": 0.7, "8": 0.8},
        maj_at_k={"1": 0.5, "2": 0.5, "4": 0.55, "8": 0.6},
        env_metrics=[env_rate("strict_correct", 0.4, 100), env_rate("flexible_correct", 0.5, 100)],
    )
    base = bench(
        0.5,
        100,
        repeats={"min": 4, "max": 4},
        pass_at_k={"1": 0.5, "2": 0.6, "4": 0.65},
        maj_at_k={"1": 0.5, "2": 0.5, "4": 0.5},
        env_metrics=[env_rate("strict_correct", 0.45, 100)],
    )
    result = compare(metrics(gsm8k=cur, math=bench(0.1, 10)), metrics(gsm8k=base, mbpp=bench(0.2, 10)))
    rows = result.benchmarks["gsm8k"]
    assert set(rows) == {
        "accuracy",
        "pass@1",
        "pass@n",
        "maj@n",
        "strict_correct",
        "mean_reward",
    }  # no flexible in base
    assert rows["pass@n"].label == "pass@4" and rows["pass@n"].delta == pytest.approx(0.05)
    assert rows["maj@n"].label == "maj@4"
    assert rows["strict_correct"].kind == "rate" and rows["mean_reward"].kind == "mean"
    assert rows["strict_correct"].label == "strict" and rows["strict_correct"].delta == pytest.approx(-0.05)
    assert result.missing == Missing(current_only=["math"], baseline_only=["mbpp"])
    json.dumps(result.model_dump(mode="json"), allow_nan=False)


def test_env_rates_compared_by_key_headline_only() -> None:
    """A headline env rate is compared with the baseline's metric of the same key, with its own n;
    rates that are not headline (a lockout share: lower is better) are not flagged either way."""
    cur = bench(0.5, 400, env_metrics=[env_rate("strict_correct", 0.2, 400), env_rate("lockout", 0.9, 400, False)])
    base = bench(0.5, 400, env_metrics=[env_rate("strict_correct", 0.5, 400), env_rate("lockout", 0.1, 400, False)])
    rows = compare(metrics(gsm8k=cur), metrics(gsm8k=base)).benchmarks["gsm8k"]
    assert "lockout" not in rows
    strict = rows["strict_correct"]
    expected = rate_delta(0.2, 400, 0.5, 400)
    assert (strict.delta, strict.low, strict.high) == pytest.approx(expected)
    assert strict.regression is True and strict.n_current == strict.n_baseline == 400


def test_a_schema_2_baseline_compares_its_info_rates_by_key() -> None:
    """An old metrics.json (info_rates, ci.info_rates) still validates and its rates match by key."""
    old = bench(0.5, 100, info_rates={"strict_correct": 0.6}, schema_version=2)
    del old["env_metrics"]
    old["ci"]["info_rates"] = {"strict_correct": wilson_ci(0.6, 80).model_dump()}
    baseline = RunMetrics.model_validate({"schema_version": 2, "benchmarks": {"gsm8k": old}})
    assert baseline.schema_version == 2
    cur = bench(0.5, 100, env_metrics=[env_rate("strict_correct", 0.3, 100)])
    row = compare(metrics(gsm8k=cur), baseline).benchmarks["gsm8k"]["strict_correct"]
    assert row.baseline == 0.6 and row.n_baseline == 80 and row.regression is True


def test_schema_1_baseline_without_intervals() -> None:
    """An old metrics.json has no `ci`: rates still compare (n from counts), mean reward gets no CI."""
    old = bench(0.8, 200)
    del old["ci"]
    result = compare(metrics(gsm8k=bench(0.3, 200)), metrics(gsm8k=old))
    rows = result.benchmarks["gsm8k"]
    assert rows["accuracy"].regression is True and rows["accuracy"].method.startswith("newcombe-rollouts")
    assert rows["mean_reward"].low is None and rows["mean_reward"].regression is False


# ---------------------------------------------------------------------------------------------
# Baselines among the run index's entries


def entry(run_id: str, finished: str, benchmarks: list[str], **extra: Any) -> IndexEntry:
    """An entry as the run index holds it (one written before entries had a version or a status: complete)."""
    return IndexEntry.model_validate(
        {
            "run_id": run_id,
            "finished_at": finished,
            "benchmarks": benchmarks,
            "report": f"runs/{run_id}/report.html",
            "metrics": f"runs/{run_id}/metrics.json",
            **extra,
        }
    )


# Newest first, as the run index lists them.
ENTRIES = [
    entry("f", "2025-01-06T00:00:00+00:00", ["gsm8k", "tetris"], run_name="sweep", deployment="nightly"),
    entry("e", "2025-01-05T00:00:00+00:00", ["gsm8k", "tetris"], run_name="sweep"),
    entry("d", "2025-01-04T00:00:00+00:00", ["gsm8k", "tetris"], deployment="other"),
    entry("c", "2025-01-03T00:00:00+00:00", ["tetris", "gsm8k"], deployment="nightly"),
    entry("b", "2025-01-02T00:00:00+00:00", ["gsm8k"], deployment="nightly"),
    entry("a", "2025-01-01T00:00:00+00:00", ["gsm8k", "tetris"], deployment="nightly"),
]


def test_find_baseline_by_deployment_and_benchmarks() -> None:
    found = find_baseline(ENTRIES, "nightly", ["gsm8k", "tetris"], "f")
    assert found is not None and found.run_id == "c"  # latest nightly with both benchmarks, f excluded
    assert find_baseline(ENTRIES, "nightly", ["gsm8k"], "c").run_id == "f"
    assert find_baseline(ENTRIES, "nightly", ["gsm8k", "mbpp"], None) is None
    assert find_baseline(ENTRIES, "missing", ["gsm8k"], None) is None


def test_find_baseline_by_run_name_or_explicit_id() -> None:
    assert find_baseline(ENTRIES, None, ["gsm8k"], "new", run_name="sweep").run_id == "e"
    assert find_baseline(ENTRIES, None, ["gsm8k"], "new") is None  # nothing to match on
    assert find_baseline(ENTRIES, "nightly", ["gsm8k"], "f", run_id="a").run_id == "a"
    assert find_baseline(ENTRIES, None, [], None, run_id="zzz") is None


def test_a_run_that_did_not_complete_is_never_a_baseline() -> None:
    """Failed and incomplete runs are skipped, even when named; an entry without a status completed."""
    newer = [
        entry("x", "2025-01-08T00:00:00+00:00", ["gsm8k"], deployment="nightly", status="failed"),
        entry("y", "2025-01-07T00:00:00+00:00", ["gsm8k"], deployment="nightly", status="incomplete"),
    ]
    assert all(e.status == "complete" for e in ENTRIES)
    assert find_baseline([*newer, *ENTRIES], "nightly", ["gsm8k"], None).run_id == "f"
    assert find_baseline([*newer, *ENTRIES], None, ["gsm8k"], None, run_id="x") is None


def test_find_baseline_in_an_empty_index() -> None:
    assert find_baseline([], "nightly", ["gsm8k"], None) is None


def test_baseline_comparison_end_to_end(tmp_path: Path, make_rollout, write_batch) -> None:
    """Two runs of one deployment through the real pipeline: the second compares with the first."""
    from tasks.reporting.index import index_entry, read_entries, update_index
    from tasks.reporting.report import write_report

    store = Store(str(tmp_path / "store"))

    def run(run_id: str, finished: str, ok: int) -> Comparison | None:
        rows = [
            make_rollout(prompt_id=f"p{i}", repeat=r, success=i < ok, reward=float(i < ok), run_id=run_id)
            for i in range(100)
            for r in range(2)
        ]
        files = [write_batch(rows, name=f"{run_id}.parquet")]
        info = run_info(run_id=run_id, deployment="nightly", model="m", finished_at=finished)
        m = compute_metrics(files, store)
        comparison = baseline_comparison(store, m, info, read_entries(store))
        urls = write_report(store.path("runs", run_id), m, info, files, store, comparison=comparison)
        update_index(store, index_entry(info, m, urls, store.url))
        return comparison

    assert run("r1", "2025-01-01T00:00:00+00:00", 80) is None
    second = run("r2", "2025-01-02T00:00:00+00:00", 30)
    assert second is not None and second.baseline is not None and second.baseline.run_id == "r1"
    assert second.current is not None and second.current.run_id == "r2"
    assert second.baseline.report == "runs/r1/report.html"
    assert second.benchmarks["gsm8k"]["accuracy"].regression is True
    saved = json.loads((tmp_path / "store/runs/r2/metrics.json").read_text())
    assert saved["comparison"]["regressions"] == second.regressions
    assert RunRecord.model_validate(saved).comparison == second  # metrics.json holds it, typed
    md = (tmp_path / "store/runs/r2/report.md").read_text()
    assert md.index("Comparison with baseline r1") < md.index("## Headline")
    page = (tmp_path / "store/runs/r2/report.html").read_text()
    assert page.index("Comparison with baseline r1") < page.index("<h2>Headline</h2>")
    assert 'href="../../runs/r1/report.html"' in page and "regression ▼" in page


def test_baseline_comparison_survives_a_broken_baseline(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    current = metrics(gsm8k=bench(0.5, 10))
    no_metrics = [entry("old", "2025-01-01T00:00:00+00:00", ["gsm8k"], deployment="d")]
    info = run_info(run_id="new", deployment="d")
    assert baseline_comparison(store, current, info, no_metrics) is None
    store.write_text(store.path("runs", "old", "metrics.json"), json.dumps({"schema_version": 99}))
    assert baseline_comparison(store, current, info, no_metrics) is None  # too new
