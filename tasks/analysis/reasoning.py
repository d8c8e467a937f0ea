"""A reasoning model's thinking in the metrics: SQL over the deduplicated `rollouts` table (tasks/analysis/load.py:
`has_reasoning`, the reasoning columns of rollout schema 3) and the `reasoning` block of a benchmark's metrics
(core.metrics_doc.ReasoningStats): how many rollouts reasoned and were cut off while reasoning, token means and
accuracy by reasoning-length quartile with its SE clustered by prompt (as accuracy's)."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from core.metrics_doc import ReasoningBucket, ReasoningStats
from tasks.analysis.queries import BenchmarkRow, by_benchmark, rows
from tasks.analysis.stats import clustered_interval, wilson_ci


@dataclass(frozen=True, slots=True)
class ReasoningRow(BenchmarkRow):
    """A benchmark's reasoning counts (REASONING_SQL)."""

    n: int
    with_reasoning: int
    counted: int
    ended: int
    at_limit: int
    reasoning_mean: float | None
    answer_mean: float | None
    reasoning_share: float | None


# Only benchmarks where some rollout reasoned get a row.
REASONING_SQL = """
SELECT benchmark, count(*) AS n,
       count(*) FILTER (WHERE has_reasoning) AS with_reasoning,
       count(*) FILTER (WHERE has_reasoning AND reasoning_tokens IS NOT NULL) AS counted,
       count(*) FILTER (WHERE ended_in_reasoning AND error IS NULL) AS ended,
       count(*) FILTER (WHERE ended_in_reasoning AND error IS NULL AND finish_reason = 'length') AS at_limit,
       avg(reasoning_tokens) FILTER (WHERE has_reasoning) AS reasoning_mean,
       avg(answer_tokens) FILTER (WHERE has_reasoning) AS answer_mean,
       sum(reasoning_tokens) FILTER (WHERE has_reasoning) / nullif(sum(completion_tokens) FILTER (
           WHERE has_reasoning AND reasoning_tokens IS NOT NULL), 0) AS reasoning_share
FROM rollouts GROUP BY benchmark HAVING count(*) FILTER (WHERE has_reasoning) > 0 ORDER BY benchmark
"""


@dataclass(frozen=True, slots=True)
class ReasoningLengthRow(BenchmarkRow):
    """Accuracy over the rollouts in one reasoning-length quartile (REASONING_BY_LENGTH_SQL), clustered SE."""

    bucket: int
    low: int
    high: int
    n: int
    prompts: int
    accuracy: float | None
    se: float | None


# Quartiles of reasoning length over the rollouts with counted reasoning (cut-off ones included: they are the
# longest); per quartile, accuracy with its SE clustered by prompt, as accuracy's.
REASONING_BY_LENGTH_SQL = """
WITH ranked AS (
    SELECT benchmark, prompt_id, ok, reasoning_tokens,
           ntile(4) OVER (PARTITION BY benchmark ORDER BY reasoning_tokens, prompt_id, repeat) AS bucket
    FROM rollouts WHERE has_reasoning AND reasoning_tokens IS NOT NULL AND error IS NULL
), per_prompt AS (
    SELECT benchmark, bucket, prompt_id, count(*) AS n, sum(ok::INT) AS s,
           min(reasoning_tokens) AS lo, max(reasoning_tokens) AS hi
    FROM ranked GROUP BY ALL
)
SELECT benchmark, bucket, min(lo) AS low, max(hi) AS high, sum(n)::BIGINT AS n, count(*) AS prompts,
       any_value(mean) AS accuracy, sqrt(sum(power(s - n * mean, 2))) / sum(n) AS se
FROM (SELECT *, sum(s) OVER b / sum(n) OVER b AS mean FROM per_prompt WINDOW b AS (PARTITION BY benchmark, bucket))
GROUP BY benchmark, bucket ORDER BY benchmark, bucket
"""


def reasoning_rows(con: duckdb.DuckDBPyConnection) -> dict[str, ReasoningRow]:
    """Per benchmark that reasoned, its reasoning counts."""
    return {row.benchmark: row for row in rows(con, REASONING_SQL, ReasoningRow)}


def reasoning_by_length(con: duckdb.DuckDBPyConnection) -> dict[str, list[ReasoningLengthRow]]:
    """Per benchmark, accuracy by reasoning-length quartile."""
    return by_benchmark(rows(con, REASONING_BY_LENGTH_SQL, ReasoningLengthRow))


def reasoning_stats(row: ReasoningRow | None, by_length: list[ReasoningLengthRow] | None) -> ReasoningStats | None:
    """The benchmark's reasoning block (see core.metrics_doc.ReasoningStats); None where no rollout reasoned."""
    if row is None:
        return None
    rate = row.ended / row.n if row.n else None
    return ReasoningStats(
        with_reasoning=row.with_reasoning,
        counted=row.counted,
        ended_in_reasoning=row.ended,
        at_limit=row.at_limit,
        ended_in_reasoning_rate=rate,
        ended_in_reasoning_ci=wilson_ci(rate, row.n),
        reasoning_tokens_mean=row.reasoning_mean,
        answer_tokens_mean=row.answer_mean,
        reasoning_share=row.reasoning_share,
        by_length=[
            ReasoningBucket(
                low=b.low,
                high=b.high,
                n=b.n,
                prompts=b.prompts,
                accuracy=b.accuracy,
                ci=clustered_interval(b.accuracy, b.se, b.prompts, b.n, clip=True),
            )
            for b in by_length or []
        ],
    )
