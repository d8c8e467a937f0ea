"""The run record: one typed, versioned document of what a run was, how it ended and what it measured.

`RunRecord` is metrics.json: the metrics (`RunMetrics`' fields, at the top level as before) plus
`run_info` (identity, status, timings, provenance, ...) and the baseline `comparison`. The eval flow fills
it stage by stage and returns it in every mode (a dry run's is "planned", a shard child's "collected"); the
report, the run index and the next run's comparison read it back. Every model forbids unknown keys: a key
evalflow writes but does not declare is a bug. Documents of older schema versions (2-4: run_info and
comparison were free-form) load through `RunRecord.migrate`, which renames what was renamed and drops
what a later version retired.
"""

from __future__ import annotations

from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

from core.judge_record import JudgeInfo
from core.metrics_doc import METRICS_SCHEMA_VERSION, RunMetrics
from core.migrate import strip_unknown

RunState = Literal["planned", "collected", "complete", "incomplete", "failed"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FailedBatch(_Record):
    """A batch with failed rollouts (tasks.collection.failures.FailureSummary)."""

    benchmark: str
    index: int
    size: int
    failed: int
    kind: str
    reasons: list[tuple[str, int]] = Field(default_factory=list)
    environment: int = 0  # of `failed`, the environment errors (the benchmark's own code failed)
    judge: int = 0  # of `failed`, the judge's failures (no verdict)


class RunStatus(_Record):
    """How the run ended: "complete" (every planned rollout), "incomplete" (some failed transiently, left
    out), "failed" (a configuration failure, or too many failures); "planned" for a dry run, "collected"
    for a shard child (its batches are in the store, the parent reports)."""

    state: RunState
    reason: str = ""
    failed_rollouts: int = 0
    planned_rollouts: int = 0
    failed_batches: list[FailedBatch] = Field(default_factory=list)
    # of `failed_rollouts`, those whose benchmark code failed (score or step raised, hung, returned a bad value)
    environment_errors: int = 0
    judge_errors: int = 0  # of `failed_rollouts`, those the judge gave no verdict for (its requests failed)


class ShardRun(_Record):
    """One child flow run that collected part of a sharded run's batches (flows.shards.ShardRun)."""

    index: int
    batches: int
    state: str
    attempts: int
    flow_runs: list[str] = Field(default_factory=list)
    seconds: float = 0.0
    message: str = ""


class LongPrompts(_Record):
    """What the token count at plan time found (tasks.collection.prompt_length)."""

    limit: int
    longest: int
    policy: str
    prompts: int
    skipped: int


class EvalflowVersion(_Record):
    version: str | None = None
    commit: str | None = None
    dirty: bool | None = None


class RuntimeVersions(_Record):
    flavor: str
    vllm: str | None = None
    torch: str | None = None
    transformers: str | None = None
    error: str | None = None  # the runtime's Python could not report its versions


class Hardware(_Record):
    cpu: str | None = None
    cores: int | None = None
    gpus: list[str] = Field(default_factory=list)
    machine: str | None = None


class BenchmarkProvenance(_Record):
    benchmark: str
    env: str
    env_version: str
    # where the environment came from: a registered name, `module:Class`, a file's `path:Class`, a task file, or
    # "inline task"; its fingerprint (what cached batches are keyed on) and, for one from outside evalflow, the
    # sha256 of its code (envs.base.Env.source_digest)
    env_ref: str | None = None
    env_fingerprint: str | None = None
    env_source_sha256: str | None = None
    options: dict[str, JsonValue] = Field(default_factory=dict)  # the environment's own options, as configured
    max_tokens: int | None = None
    dataset: str | None = None
    rows: int
    dataset_hash: str
    prompt_template_hash: str


class Provenance(_Record):
    """What produced the run (tasks.collection.provenance): two runs whose provenance matches sampled alike."""

    evalflow: EvalflowVersion
    python: str
    prefect: str | None = None
    runtime: RuntimeVersions | None = None
    # the server settings that change samples: mode, runtime, dtype, vLLM flags, the CPU choice (open-ended)
    server: dict[str, JsonValue] = Field(default_factory=dict)
    hardware: Hardware
    benchmarks: list[BenchmarkProvenance] = Field(default_factory=list)


class RunInfo(_Record):
    """The run's identity and how it went. `config` is the validated config with credentials redacted."""

    run_id: str
    run_name: str | None = None
    status: RunStatus
    flow_run_id: str | None = None
    model: str
    model_source: str | None = None
    model_fingerprint: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    config: dict[str, JsonValue] = Field(default_factory=dict)
    timings: dict[str, float] = Field(default_factory=dict)
    # this process's CPU seconds per stage (all threads); empty in records written before it was kept
    cpu_timings: dict[str, float] = Field(default_factory=dict)
    deployment: str | None = None
    provenance: Provenance | None = None
    shards: list[ShardRun] = Field(default_factory=list)
    long_prompts: dict[str, LongPrompts] = Field(default_factory=dict)
    # a training run's checkpoint: the run it belongs to and its step (None for a single checkpoint)
    training_run: str | None = None
    step: int | None = None
    rescored_from: str | None = None  # `evalflow rescore`: the run whose completions this run scored anew
    judge: JudgeInfo | None = None  # the judge that scored the judged benchmarks, and what it did


class RunSummary(_Record):
    """A run as a comparison names it."""

    run_id: str | None = None
    run_name: str | None = None
    deployment: str | None = None
    model: str | None = None
    model_fingerprint: str | None = None
    finished_at: str | None = None
    report: str | None = None


class ComparisonRow(_Record):
    """One metric of one benchmark, current against baseline, with the delta's 95% CI (tasks.analysis.compare).

    `method` names how: paired-clustered and paired-mcnemar-exact over the prompts both runs asked (then current,
    baseline and the n are those prompts'), clustered-prompts, newcombe or bootstrap-prompts for independent runs.
    `detectable` is the smallest |delta| this pair of runs would flag at 5% with 80% power."""

    label: str
    kind: Literal["rate", "mean"]
    method: str
    current: float
    baseline: float
    delta: float
    low: float | None = None
    high: float | None = None
    n_current: int
    n_baseline: int
    regression: bool = False
    improvement: bool = False
    se: float | None = None
    p_value: float | None = None  # paired rows: McNemar's exact test, or the Wald test of delta / se
    detectable: float | None = None


class FlippedPrompt(_Record):
    """A prompt whose majority verdict changed: its success rate over its repeats in each run."""

    prompt_id: str
    baseline: float
    current: float


class Pairing(_Record):
    """How one benchmark's prompts pair up between the runs (matched by prompt id and the prompt's content), and the
    prompts whose majority verdict flipped (a tie counts as wrong), each list largest pass@1 change first (up to
    MAX_FLIPS listed; the counts are complete)."""

    shared: int
    only_current: int = 0
    only_baseline: int = 0
    changed: int = 0  # same prompt id, different content: left out of the pairing
    lost_count: int = 0  # right in the baseline, wrong now
    gained_count: int = 0
    lost: list[FlippedPrompt] = Field(default_factory=list)
    gained: list[FlippedPrompt] = Field(default_factory=list)


class GateFailure(_Record):
    benchmark: str
    metric: str  # compare's key: accuracy, pass@1, pass@n, maj@n, mean_reward, an env rate's key
    label: str
    delta: float
    bound: float | None  # the CI's bound nearer to 0 (rule "ci")
    threshold: float  # the drop allowed
    rule: Literal["ci", "absolute"]


class GateVerdict(_Record):
    """The comparison gate (tasks.analysis.gate): passed unless a metric dropped beyond its threshold."""

    passed: bool
    checked: int  # comparison rows the gate looked at
    failures: list[GateFailure] = Field(default_factory=list)
    rules: dict[str, JsonValue] = Field(default_factory=dict)  # the gate's settings, as given


class Missing(_Record):
    current_only: list[str] = Field(default_factory=list)
    baseline_only: list[str] = Field(default_factory=list)


class Comparison(_Record):
    """A run against its baseline: per benchmark, each headline metric's row and how the prompts paired up; the
    flagged ones listed; the gate's verdict where one was asked for."""

    level: float
    current: RunSummary | None = None
    baseline: RunSummary | None = None
    benchmarks: dict[str, dict[str, ComparisonRow]] = Field(default_factory=dict)
    pairing: dict[str, Pairing] = Field(default_factory=dict)
    regressions: list[str] = Field(default_factory=list)
    improvements: list[str] = Field(default_factory=list)
    missing: Missing = Field(default_factory=Missing)
    gate: GateVerdict | None = None

    @property
    def baseline_id(self) -> str:
        return (self.baseline.run_id if self.baseline else None) or "?"


class IndexEntry(_Record):
    """A run's line in the run index (`<store>/index/entries/<run_id>.json`, gathered into index.json):
    identity, how it ended, its headline numbers per benchmark and where its files are (relative to the
    store root). Entries written before entries had a version are read through `migrate`."""

    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)  # old entries may hold numeric ids

    schema_version: int = METRICS_SCHEMA_VERSION
    run_id: str
    run_name: str | None = None
    status: RunState = "complete"  # runs indexed before statuses existed all completed
    deployment: str | None = None
    flow_run_id: str | None = None
    model: str | None = None
    model_fingerprint: str | None = None
    training_run: str | None = None
    step: int | None = None
    config_key: str | None = None  # core.training_steps.config_key of the run's config: which steps a watcher did
    benchmarks: list[str] = Field(default_factory=list)
    started_at: str | None = None
    finished_at: str | None = None
    total_rollouts: int = 0
    # per benchmark: prompts, n, accuracy and its CI, pass@1/n, maj@n, mean reward and its CI, and the
    # environment's headline metrics by their own keys (so the keys are open)
    headline: dict[str, dict[str, JsonValue]] = Field(default_factory=dict)
    report: str | None = None
    metrics: str | None = None
    markdown: str | None = None
    baseline_run_id: str | None = None  # the run it was compared with
    regressions: list[str] = Field(default_factory=list)  # "benchmark: metric" flagged against that baseline
    gate_passed: bool | None = None  # the comparison gate's verdict; None without a baseline

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        doc = cast(dict[str, Any], data)
        if doc.get("schema_version", 0) < METRICS_SCHEMA_VERSION:
            return {**strip_unknown(cls, doc), "schema_version": METRICS_SCHEMA_VERSION}
        return doc


class BenchmarkPlan(_Record):
    prompts: int
    repeats: int
    long_prompts: LongPrompts | None = None


class BatchCount(_Record):
    total: int | None = None  # None: the model's fingerprint is not known before it is prepared
    cached: int = 0
    rescored: int = 0  # scored anew from cached completions (their scoring changed, their requests did not)


class RolloutCount(_Record):
    total: int
    cached: int
    to_generate: int
    rescored: int = 0


class RunPlan(_Record):
    """What a run would do (flows.plan.plan_run; `evalflow run --dry-run` prints it): the config with credentials
    redacted, the model's preparation plan (tasks.checkpoints' ModelPlan, or an external server's), per benchmark
    its prompts, and how many batches and rollouts are cached or to generate."""

    config: dict[str, JsonValue]
    model: dict[str, JsonValue]
    benchmarks: dict[str, BenchmarkPlan] = Field(default_factory=dict)
    batches: BatchCount = Field(default_factory=BatchCount)
    rollouts: RolloutCount
    shards: str | None = None
    would_start: str


class Slot(_Record):
    """The devices a managed server was given (tasks.serving.slots), and how long it waited for them."""

    kind: str
    devices: list[str] = Field(default_factory=list)
    waited_s: float = 0.0


class Replica(_Record):
    """One replica of an external endpoint: the requests it took, and whether it was in at the end."""

    url: str
    requests: int = 0
    up: bool = True


class ServerInfo(_Record):
    """The server this run started (its last process, after any restart), or the external replicas it used."""

    pid: int | None = None
    port: int | None = None
    log: str | None = None
    slot: Slot | None = None
    restarts: int = 0
    replicas: list[Replica] = Field(default_factory=list)
    # under a watcher (one server for a training run): "started" fresh, "swapped" (this checkpoint loaded into the
    # server in place and proven) or "kept" (it held this checkpoint already); None: a server of this run alone
    how: Literal["started", "swapped", "kept"] | None = None
    ready_s: float | None = None  # the start or the swap, proof included
    probe: dict[str, Any] | None = None  # the probe it answered before collecting (tasks/serving/probe.py)
    why: str | None = None  # why a watcher's server was started afresh rather than swapped


class Collection(_Record):
    """Where the run's rollouts and report are, what was collected, and the server that served it. Returned
    by the flow, not written to metrics.json (report URLs and server processes are this run's, not its record)."""

    run_dir: str
    reports: dict[str, str] = Field(default_factory=dict)
    batches_total: int = 0
    batches_cached: int = 0
    server: ServerInfo = Field(default_factory=ServerInfo)
    plan: RunPlan | None = None  # a dry run's plan


class RunRecord(RunMetrics):
    """metrics.json: the metrics, the run's info and its comparison with a baseline."""

    run_info: RunInfo
    comparison: Comparison | None = None
    collection: Collection | None = Field(default=None, exclude=True)

    @property
    def state(self) -> RunState:
        return self.run_info.status.state

    @classmethod
    def migrate(cls, data: dict[str, Any]) -> dict[str, Any]:
        """A document of schema 2-4 in today's shape: run_info's renamed keys (`stage_timings` -> `timings`,
        a status given as a bare state), the identity a run had before every field existed, and (through
        RunMetrics.migrate) every key a later version retired dropped. Today's documents pass unchanged."""
        if data.get("schema_version", METRICS_SCHEMA_VERSION) >= METRICS_SCHEMA_VERSION:
            return data
        info = dict(data.get("run_info") or {})
        if "stage_timings" in info and "timings" not in info:
            info["timings"] = info.pop("stage_timings")
        status = info.get("status")
        info["status"] = {"state": status} if isinstance(status, str) else status or {"state": "complete"}
        info.setdefault("run_id", "unknown")
        info.setdefault("model", "unknown")
        old = {**data, "run_info": info}
        comparison = old.get("comparison")
        if comparison is None:
            old.pop("comparison", None)
        else:  # rows before schema 4 did not say how their interval was made
            version = data.get("schema_version", "?")
            benchmarks: dict[str, dict[str, dict[str, Any]]] = comparison.get("benchmarks") or {}
            for rows in benchmarks.values():
                for row in rows.values():
                    row.setdefault("method", f"not recorded (schema_version {version})")
        return super().migrate(old)
