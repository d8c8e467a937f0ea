"""Planning a run's collection: benchmarks loaded and validated, (prompt, repeat) pairs cut into
content-keyed batches, each looked up in the cache before any server is started."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from prefect.filesystems import WritableFileSystem

from core import store as store_paths
from core.config import EvalConfig, SamplingConfig
from core.logs import get_logger
from core.reasoning import ThinkTags
from core.record import LongPrompts
from core.store import Store
from envs.base import Env, MultiTurnEnv, SingleTurnEnv, canonical_json
from envs.datasets import load_rows, rows_hash
from envs.registry import get_env
from tasks.collection.cache import STALE, lookup
from tasks.collection.failures import is_outcome_error
from tasks.collection.generations import BatchRecord, find_generation


@dataclass
class Benchmark:
    name: str  # the config's key: its label, else the environment's name
    env: Env
    rows: list[dict[str, Any]]
    repeats: int
    sampling: SamplingConfig | None = None  # the run's sampling with this benchmark's max_tokens
    places: dict[str, str] = field(default_factory=dict)  # prompt id -> `file:line` (messages name it)
    on_long_prompt: str = "fail"
    long_prompts: LongPrompts | None = None  # set by the prompt-length check: limit, longest, skipped
    env_ref: str | None = None  # how the config named the environment (provenance; reports load it by this)


def load_benchmarks(config: EvalConfig, store: Store) -> list[Benchmark]:
    """Build every environment and load and validate every dataset row up front."""
    benchmarks = []
    for i, bench in enumerate(config.benchmarks):
        env = get_env(bench.env_ref, **bench.options)
        _check_tool_choice(config, i, env)
        source = bench.dataset or env.default_source()
        places: dict[str, str] = {}
        rows = load_rows(source, env, opener=lambda url: store.open(url, "rb"), limit=bench.limit, places=places)
        get_logger().info("benchmark %s: %d prompts x %d repeats from %s", bench.key, len(rows), bench.repeats, source)
        sampling = bench_sampling(config, i)
        ref = bench.env_ref if isinstance(bench.env_ref, str) else "inline task"
        benchmarks.append(
            Benchmark(bench.key, env, rows, bench.repeats, sampling, places, bench.on_long_prompt, env_ref=ref)
        )
    return benchmarks


def bench_sampling(config: EvalConfig, index: int) -> SamplingConfig:
    """The run's sampling as benchmark `index` sends it: its own max_tokens, and its request fields (thinking on
    or off, the thinking budget, template keywords, extra_body) over the run's extra_body."""
    bench = config.benchmarks[index]
    update: dict[str, Any] = {}
    if bench.max_tokens is not None:
        update["max_tokens"] = bench.max_tokens
    fields = bench.request_fields(config.model.reasoning.switch)
    if fields:
        extra = dict(config.sampling.extra_body)
        run_kwargs, bench_kwargs = extra.get("chat_template_kwargs"), fields.get("chat_template_kwargs")
        if isinstance(run_kwargs, dict) and isinstance(bench_kwargs, dict):
            fields["chat_template_kwargs"] = {**run_kwargs, **bench_kwargs}
        update["extra_body"] = {**extra, **fields}
    return config.sampling.model_copy(update=update) if update else config.sampling


def _check_tool_choice(config: EvalConfig, index: int, env: Env) -> None:
    """Tool calls left to the model (tool_choice auto) need the managed server's tool-call parser: without
    one vLLM rejects every request, after minutes of model loading."""
    if not isinstance(env, MultiTurnEnv) or not env.tools() or env.tool_choice() is not None:
        return
    if config.server.mode == "managed" and not config.server.tool_call_parser:
        raise ValueError(
            f"benchmarks.{index} ({env.name}): tool calls with tool_choice auto need a tool-call parser on the "
            "server: set server.tool_call_parser (e.g. hermes), or options.tool_choice: required"
        )


# Enters every batch key (not the generation key): the version of how a completion becomes the text scored.
# 1: the answer after the reasoning (think tags split, a completion cut off while reasoning scores 0).
ANSWER_SCORING = 1


def rollout_seed(base_seed: int, prompt_id: str, repeat: int) -> int:
    """Stable per-rollout seed: a rerun asks the server for the same samples, and repeats differ."""
    digest = hashlib.sha256(f"{base_seed}:{prompt_id}:{repeat}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


@dataclass(frozen=True)
class Batch:
    """A slice of prompts x all their repeats: changing one row touches one batch."""

    benchmark: str
    index: int
    key: str
    rows: tuple[dict[str, Any], ...] = field(repr=False)
    repeats: tuple[int, ...]
    # the sampling its requests use (part of `key`); None: the run's
    sampling: SamplingConfig | None = field(default=None, repr=False, compare=False)
    # what determines its completions (generation_key): a batch whose `key` changed but not this one (a
    # single-turn environment's scoring changed) is rescored from the completions of the earlier one
    generation: str = ""
    # a judged benchmark's completions, collected before its judging phase (tasks.judging.completions)
    completions: bool = False

    @property
    def size(self) -> int:
        return len(self.rows) * len(self.repeats)

    @property
    def cache_key(self) -> str:
        """The batch task's Prefect cache key (and result file name)."""
        return f"batch-{self.key}"


@dataclass(frozen=True)
class BatchResult:
    """Where a finished batch's parquet file is, and what it holds: the batch task's cached result."""

    url: str
    rollouts: int
    errors: int
    completion_tokens: int
    seconds: float

    def as_record(self) -> BatchRecord:
        """Plain JSON for the persisted cache record: no pickled class that a refactor could orphan."""
        return BatchRecord(url=self.url, rollouts=self.rollouts, errors=self.errors,
                           completion_tokens=self.completion_tokens, seconds=self.seconds)  # fmt: skip

    @classmethod
    def from_record(cls, record: Any) -> BatchResult | None:
        """The result from a cache record, or None when it is not one of ours (an older format)."""
        if isinstance(record, cls):
            return record
        if isinstance(record, dict) and set(record) == set(cls.__dataclass_fields__):
            return cls(**record)
        return None


def batch_key(
    env: Env,
    rows: list[dict[str, Any]],
    repeats: list[int],
    model_fingerprint: str,
    sampling: SamplingConfig,
    tags: ThinkTags | None = None,
    judge: str | None = None,
) -> str:
    """Content key: env (name, version, options, templates), rows, repeats, model, sampling, how the answer is
    taken from a completion (the think tags), and for a judged benchmark the judge (tasks.judging.client's
    identity). Never the run."""
    payload: dict[str, Any] = {
        "env": env.fingerprint(),
        "rows": rows_hash(rows),  # the canonical encoding of parquet's dates, bytes and decimals too
        "repeats": repeats,
        "model": model_fingerprint,
        "sampling": sampling.key_fields(),
        # answers are scored without their reasoning (core/reasoning.py): batches scored before are scored again
        "scored": [ANSWER_SCORING, (tags or ThinkTags()).model_dump(mode="json")],
    }
    if judge is not None:  # only judged batches: every other key stays what it was
        payload["judge"] = judge
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def generation_key(
    env: Env,
    rows: list[dict[str, Any]],
    repeats: list[int],
    model_fingerprint: str,
    sampling: SamplingConfig,
    tags: ThinkTags | None = None,
) -> str:
    """What determines a batch's completions: for a single-turn environment the requests themselves (each row's
    prompt id, which seeds it, its messages or plain prompt, the stop sequences), the repeats, the model and its
    server settings (samples fingerprint) and the sampling; not the environment's version, options or code, so
    a change of scoring alone keeps this key. A multi-turn environment answers the model during the rollout: its
    whole fingerprint is part of the generation, which is then the batch key itself."""
    if not isinstance(env, SingleTurnEnv):
        return batch_key(env, rows, repeats, model_fingerprint, sampling, tags)
    requests = [[env.prompt_id(row), env.prompt(row) or env.messages(row)] for row in rows]
    payload = {
        "requests": requests,
        "stop": env.stop(),
        "repeats": repeats,
        "model": model_fingerprint,
        "sampling": sampling.key_fields(),
    }
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def plan_batches(
    benchmark: str,
    env: Env,
    rows: list[dict[str, Any]],
    repeats: int,
    batch_size: int,
    model_fingerprint: str,
    sampling: SamplingConfig,
    tags: ThinkTags | None = None,
    judge: str | None = None,
) -> list[Batch]:
    per_batch = max(1, batch_size // repeats)
    reps = list(range(repeats))
    batches = []
    for index, start in enumerate(range(0, len(rows), per_batch)):
        chunk = rows[start : start + per_batch]
        key = batch_key(env, chunk, reps, model_fingerprint, sampling, tags, judge if env.uses_judge else None)
        generation = generation_key(env, chunk, reps, model_fingerprint, sampling, tags)
        batches.append(Batch(benchmark, index, key, tuple(chunk), tuple(reps), sampling, generation))
    return batches


def batch_url(run_dir: str, batch: Batch) -> str:
    """A batch's file in the run folder: `rollouts/` (what the analysis reads), or `completions/` for a judged
    benchmark's completions waiting for their judge."""
    folder = "completions" if batch.completions else "rollouts"
    return store_paths.join(run_dir, folder, batch.benchmark, f"{batch.index:05d}-{batch.key[:16]}.parquet")


@dataclass
class Planned:
    env: Env
    batch: Batch
    cached: BatchResult | None = None  # a finished batch of an earlier run (or attempt)
    stale: bool = False  # a cache record exists but cannot be used (file gone, older format): collect again
    # an earlier batch with the same completions but other scoring: rescored from them, with no request
    rescore_from: BatchResult | None = None

    @property
    def needs_server(self) -> bool:
        """Whether its rollouts must be generated: neither cached nor rescored from cached completions."""
        return self.cached is None and self.rescore_from is None


def plan(
    benchmarks: list[Benchmark],
    config: EvalConfig,
    model_fingerprint: str,
    storage: WritableFileSystem,
    store: Store,
    judge: str | None = None,
) -> list[Planned]:
    """Every batch of the run, each looked up in the cache before any server is started (`judge`: the judge's
    identity, part of judged benchmarks' batch keys)."""
    planned = []
    for bench in benchmarks:
        for batch in plan_batches(
            bench.name, bench.env, bench.rows, bench.repeats, config.collection.batch_size, model_fingerprint,
            bench.sampling or config.sampling, config.model.reasoning, judge,
        ):  # fmt: skip
            record = lookup(storage, batch.cache_key)
            hit = None if record is None or record is STALE else BatchResult.from_record(record)
            if _usable(store, hit):
                planned.append(Planned(bench.env, batch, cached=hit))
            elif batch.generation != batch.key and _usable(store, source := _generated(store, batch.generation)):
                planned.append(Planned(bench.env, batch, stale=record is not None, rescore_from=source))
            else:
                planned.append(Planned(bench.env, batch, stale=record is not None))
    return planned


def _usable(store: Store, hit: BatchResult | None) -> bool:
    return hit is not None and store.exists(hit.url) and not (hit.errors and _holds_failures(store, hit.url))


def _generated(store: Store, generation: str) -> BatchResult | None:
    record = find_generation(store, generation)
    return None if record is None else BatchResult.from_record(record)


def _holds_failures(store: Store, url: str) -> bool:
    """Whether a cached batch recorded request failures as rollout errors, as versions before failures
    were sorted did (a wrong model name cached as 100% NotFoundError): such a batch is collected again."""
    import pyarrow.parquet as pq

    with store.open(url, "rb") as f:
        errors = pq.read_table(f, columns=["error"]).column("error").to_pylist()
    return any(e is not None and not is_outcome_error(e) for e in errors)
