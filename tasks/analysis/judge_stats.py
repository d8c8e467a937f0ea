"""What the judge did, per judged metric, from the rollouts' `info.judge` (envs/judge_score.py): how many rollouts
it judged, how many of its answers held no readable verdict, and, where a rollout carries a label (a human
verdict in the row, or a rule metric's verdict), how far the judge agrees with it: the calibration table."""

from __future__ import annotations

import duckdb

from core.judge_record import JudgeMetric
from core.store import Store
from tasks.analysis.load import duckdb_path

# One row per (rollout, judged metric): the judge's verdict, whether any answer was read, and the label.
_PER_ROLLOUT = """
WITH judged AS (
    SELECT benchmark, CAST(info AS JSON) -> 'judge' AS judge
    FROM read_parquet($files, union_by_name = true)
    WHERE error IS NULL AND json_exists(CAST(info AS JSON), '$.judge')
), metrics AS (
    SELECT benchmark, judge, unnest(json_keys(judge)) AS metric FROM judged
)
SELECT benchmark, metric,
       CAST(json_extract(judge, '$."' || metric || '".passed') AS BOOLEAN) AS passed,
       CAST(json_extract(judge, '$."' || metric || '".read') AS INTEGER) AS read,
       CAST(json_extract(judge, '$."' || metric || '".samples') AS INTEGER) AS samples,
       TRY_CAST(json_extract(judge, '$."' || metric || '".label') AS BOOLEAN) AS label
FROM metrics
"""

_STATS = f"""
SELECT benchmark, metric,
       count(*) FILTER (WHERE samples > 0) AS judged,
       count(*) FILTER (WHERE samples > 0 AND read = 0) AS unparsed,
       count(*) FILTER (WHERE samples > 0 AND passed) AS passed,
       sum(samples) AS answers,
       count(*) FILTER (WHERE samples > 0 AND read > 0 AND label IS NOT NULL) AS labelled,
       count(*) FILTER (WHERE samples > 0 AND read > 0 AND passed AND label) AS both_pass,
       count(*) FILTER (WHERE samples > 0 AND read > 0 AND passed AND NOT label) AS judge_only,
       count(*) FILTER (WHERE samples > 0 AND read > 0 AND NOT passed AND label) AS label_only,
       count(*) FILTER (WHERE samples > 0 AND read > 0 AND NOT passed AND NOT label) AS both_fail
FROM ({_PER_ROLLOUT}) GROUP BY ALL ORDER BY benchmark, metric
"""


def kappa(both_pass: int, judge_only: int, label_only: int, both_fail: int) -> float | None:
    """Cohen's kappa of the judge and the label: agreement beyond what their pass rates give by chance; None
    when undefined (no labelled rollout, or both always say the same one thing)."""
    n = both_pass + judge_only + label_only + both_fail
    if not n:
        return None
    observed = (both_pass + both_fail) / n
    judge_pass, label_pass = (both_pass + judge_only) / n, (both_pass + label_only) / n
    chance = judge_pass * label_pass + (1 - judge_pass) * (1 - label_pass)
    return None if chance >= 1 else (observed - chance) / (1 - chance)


def judge_stats(files: list[str], store: Store) -> list[JudgeMetric]:
    """Per benchmark and judged metric: rollouts judged, unparsed, passed, and the calibration counts."""
    if not files:
        return []
    con = duckdb.connect(":memory:")
    store.register(con, files)
    rows = con.execute(_STATS, {"files": [duckdb_path(f) for f in files]}).fetchall()
    out = []
    for bench, metric, judged, unparsed, passed, answers, labelled, bp, jo, lo, bf in rows:
        out.append(
            JudgeMetric(
                benchmark=bench,
                metric=metric,
                judged=judged,
                unparsed=unparsed,
                passed=passed,
                answers=int(answers or 0),
                labelled=labelled,
                both_pass=bp,
                judge_only=jo,
                label_only=lo,
                both_fail=bf,
                agreement=(bp + bf) / labelled if labelled else None,
                kappa=kappa(bp, jo, lo, bf),
            )
        )
    return out
