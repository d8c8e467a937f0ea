"""What the run files' keys mean where the code does not say it yet (`Model.field` -> meaning).

The reference (docs/_hooks/model_reference.py) shows a key's pydantic `description`, else the comment beside it in
core/record.py or core/metrics_doc.py, else its note here. A note is only for a key the code leaves
undescribed: once the field gets a description or a comment, tests/test_docs.py asks for its note to go, so
each meaning is written once. A note that names no field fails the build.
"""

from __future__ import annotations

NOTES: dict[str, str] = {
    # metrics.json, top level (core.record.RunRecord, core.metrics_doc.RunMetrics)
    "RunRecord.schema_version": "version of this document: 7 (6: no `prompt_hash` in `per_prompt`, comparisons "
    "independent only; 5: no `reasoning` block, and parse errors counted rollouts cut off while reasoning; 4: "
    "`run_info` and `comparison` were free-form; 3 and older: `ci.accuracy` was a Wilson interval over rollouts)",
    "RunRecord.total_rollouts": "rollouts analysed (after removing duplicates)",
    "RunRecord.duplicate_rollouts": "stale copies of a rollout that were dropped",
    "RunRecord.benchmarks": "per benchmark (its label): its metrics",
    "RunRecord.run_info": "the run's identity, how it ended, its config, timings and provenance",
    "RunRecord.comparison": "only with a baseline: this run against it, gate included",
    # per benchmark
    "BenchmarkMetrics.n_prompts": "prompts analysed",
    "BenchmarkMetrics.n_rollouts": "rollouts analysed",
    "BenchmarkMetrics.successes": "rollouts that succeeded",
    "BenchmarkMetrics.accuracy": "success rate over rollouts (an errored rollout counts as a failure)",
    "BenchmarkMetrics.mean_reward": "mean reward over rollouts (an errored rollout counts 0)",
    "BenchmarkMetrics.pass_at_k": '`{"k": value}` for k = 1, 2, 4, ... and the largest repeat count: unbiased '
    "pass@k over the prompts with at least k rollouts",
    "BenchmarkMetrics.ci": "95% intervals: accuracy clustered by prompt, parse and error rates Wilson over "
    "rollouts, pass@k and maj@k Wilson over prompts, mean reward a bootstrap over prompts",
    "BenchmarkMetrics.reward": "the reward's statistics over rollouts",
    "BenchmarkMetrics.reward_values": "the distinct rewards and their counts (rounded to 6 places, the 1,000 most "
    "common)",
    "BenchmarkMetrics.distributions": "for `reward`, `prompt_tokens`, `completion_tokens`, `latency_s`, and over "
    "the rollouts that reasoned `reasoning_tokens` and `answer_tokens`: count, mean, quantiles and a histogram; "
    "null where no rollout has the value",
    "BenchmarkMetrics.prompt_outcomes": "prompts that never succeed and always succeed (with their ids), and mixed",
    "BenchmarkMetrics.parse_error_rate": "completed rollouts without a parsed answer (a rollout cut off while "
    "reasoning is counted in `reasoning`, not here)",
    "BenchmarkMetrics.error_count": "failed rollouts (request or environment errors)",
    "BenchmarkMetrics.error_rate": "failed rollouts' share",
    "BenchmarkMetrics.errors": "`{first part of the error message: count}`",
    "BenchmarkMetrics.finish_reasons": "`{finish reason: count}`",
    "BenchmarkMetrics.tokens": "prompt and completion tokens: means and totals",
    "BenchmarkMetrics.latency_s": "seconds in requests per rollout",
    "BenchmarkMetrics.tool_calls": "tool calls per rollout, and their correlation with reward (its 95% CI in "
    "`ci.tool_calls_reward_corr`: bootstrap over prompts)",
    "BenchmarkMetrics.reward_by_tool_calls": "per number of tool calls: rollouts, prompts, mean reward (CI "
    "clustered by prompt), success rate",
    "BenchmarkMetrics.per_prompt": "one row per prompt",
    "BenchmarkMetrics.env_metrics": "the metrics the benchmark's environment declares, in declaration order",
    "BenchmarkMetrics.reasoning": "null unless some rollout reasoned",
    "PromptRow.reference": "the reference answer",
    "PromptRow.top_answer": "the most frequent parsed answer",
    "ReasoningStats.counted": "rollouts whose reasoning tokens were counted",
    "ReasoningStats.ended_in_reasoning": "rollouts truncated while reasoning: no answer, reward 0",
    "ReasoningStats.at_limit": "of them, those cut off by the token limit",
    "ToolCallStats.reward_corr": "correlation of tool calls with reward over rollouts",
    # run_info (core.record.RunInfo)
    "RunInfo.run_id": "the run's id: its folder under `runs/`",
    "RunInfo.run_name": "the config's `run_name`",
    "RunInfo.status": "how the run ended",
    "RunInfo.flow_run_id": "the Prefect flow run",
    "RunInfo.model": "the served model name",
    "RunInfo.model_source": "`model.source` as the run resolved it",
    "RunInfo.model_fingerprint": "content hash of the converted checkpoint's files",
    "RunInfo.started_at": "when the run started (ISO 8601)",
    "RunInfo.finished_at": "when it finished (ISO 8601)",
    "RunInfo.config": "the validated config, credentials redacted",
    "RunInfo.timings": "seconds per stage",
    "RunInfo.deployment": "the deployment (`flow/name`) the run belongs to, if any",
    "RunInfo.provenance": "what produced the run: versions, the server settings that change samples, hardware, "
    "each benchmark's environment and data",
    "RunInfo.shards": "a sharded run's child flow runs, one per shard",
    "RunInfo.long_prompts": "per benchmark, what the prompt-token count at plan time found",
    "RunInfo.step": "a training run's checkpoint: its step",
    "RunStatus.state": "complete, incomplete or failed (planned: a dry run; collected: a shard child)",
    "RunStatus.reason": "why it is not complete",
    # comparison (core.record.Comparison)
    "Comparison.level": "the intervals' confidence level",
    "Comparison.current": "this run",
    "Comparison.baseline": "the run it was compared with",
    "Comparison.benchmarks": "per benchmark, per comparison key (accuracy, pass@1, ...): its row",
    "Comparison.pairing": "per benchmark: how the prompts paired up, and the prompts that flipped",
    "Comparison.regressions": "`benchmark: metric` of each row flagged as a drop",
    "Comparison.improvements": "`benchmark: metric` of each row flagged as a gain",
    "Comparison.missing": "benchmarks only one of the runs has",
    "Comparison.gate": "the gate's verdict, where one was asked for",
    "ComparisonRow.method": "how the delta and its interval were computed",
    "ComparisonRow.low": "the delta's 95% interval, low end",
    "ComparisonRow.high": "the delta's 95% interval, high end",
    "ComparisonRow.regression": "a significant change for the worse (the interval excludes 0, or McNemar's test "
    "says so)",
    "ComparisonRow.improvement": "a significant change for the better",
    "ComparisonRow.detectable": "the smallest change this pair of runs would flag with 80% power",
    "Pairing.shared": "prompts both runs asked (same id and content)",
    "Pairing.gained_count": "wrong in the baseline, right now",
    "Pairing.lost": "the largest right-to-wrong changes (up to 100)",
    "Pairing.gained": "the largest wrong-to-right changes (up to 100)",
    # the run index (core.record.IndexEntry)
    "IndexEntry.benchmarks": "the run's benchmarks (their labels)",
    "IndexEntry.report": "report.html, relative to the store root",
    "IndexEntry.metrics": "metrics.json, relative to the store root",
    "IndexEntry.markdown": "report.md, relative to the store root",
}
