"""The environment protocol: what the rollout tasks need from a benchmark, and nothing Prefect-specific.

`Env` holds what every environment shares (identity, dataset rows, cache fingerprint, the metrics it
declares over its `info`); `SingleTurnEnv` adds the one-request-one-completion interface, `MultiTurnEnv`
the conversation one (an `Episode` per rollout answers each assistant message). Both build on `Env`, so
dataset loading and cache keys work for both.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from abc import ABC, abstractmethod
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from errors import EvalflowError

T = TypeVar("T")
REPO_ROOT = Path(__file__).resolve().parents[1]
# The version of this module's interface (Env, SingleTurnEnv, MultiTurnEnv, Episode, Turn, Score, MetricSpec) for
# environments outside evalflow: a change that breaks one of them bumps it (README, "Your own benchmark").
ENV_API_VERSION = "1"
# evalflow's own environments live in these packages; their `version` says when their code changes.
_OWN_PACKAGES = ("envs",)


class DatasetError(EvalflowError, ValueError):
    """A dataset file is missing or malformed; the message names the file, 1-based line and problem."""

    kind = "dataset"


@dataclass(frozen=True)
class Score:
    """The verdict on one completion; `info` must be JSON-serialisable (it is stored in the rollout row)."""

    reward: float
    success: bool
    parsed_answer: str | None
    info: dict[str, Any]


@dataclass(frozen=True)
class MetricSpec:
    """A metric the analysis computes from `Score.info[key]` (see core.metrics_doc.EnvMetric for the rules).

    kind "rate": `info[key]` is a boolean; "mean": a number; "counts": a categorical value; "items": a
    list of booleans (one per checked item of the rollout, e.g. IFEval's instructions), and the metric is
    the share of true items over all rollouts' items (lm-eval's instruction-level accuracy), not a mean of
    per-rollout shares. `headline` rates are the env's own scores (higher is better): reports show them
    beside accuracy and a baseline comparison flags their changes.
    """

    key: str
    label: str
    kind: Literal["rate", "mean", "counts", "items"]
    headline: bool = False
    description: str = ""


@dataclass(frozen=True)
class ReferenceProfile:
    """Published figures of a reference run, shown beside a run's own in its report, one row per figure.

    `figures` keys: prompts, repeats, rollouts, successes, success_rate, reward_mean, reward_median,
    reward_std, reward_min, reward_max, reward_mode, reward_mode_share, tool_calls_mean, tool_calls_min,
    tool_calls_max, tool_calls_reward_corr; None (or absent): not published.
    """

    title: str
    source: str
    figures: dict[str, Any]


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no whitespace, so equal content always hashes the same."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class Env(ABC):
    """Identity, row access and fingerprint shared by all environments."""

    name: ClassVar[str]
    # Enters rollout cache keys: bump on any change to scoring or prompts.
    version: ClassVar[str]
    # Path of the shipped offline set, relative to the repo root.
    default_dataset: ClassVar[str]
    # What the analysis reports from `Score.info`, beyond the metrics every benchmark gets.
    metrics: ClassVar[tuple[MetricSpec, ...]] = ()
    # Whether the most common `parsed_answer` of k samples is a meaningful answer (maj@k): true for a
    # comparable final answer (a number, a formula); set False where answers cannot be voted on (game
    # moves, programs), and the analysis reports no maj@k for the benchmark.
    majority_vote: ClassVar[bool] = True
    # lm-evaluation-harness's names for this benchmark's scores, for the report's lm-eval table: (lm-eval
    # metric name, source), the source one of `metrics`' keys or "pass@1" (the unbiased estimate over the
    # repeats; with greedy decoding and one repeat, the share of rollouts that succeed).
    lm_eval_metrics: ClassVar[tuple[tuple[str, str], ...]] = ()
    # A published run to compare with in the report (e.g. the Qwen3-4B profile of the GRL Tetris eval).
    reference_profile: ClassVar[ReferenceProfile | None] = None
    # Whether scoring asks the run's judge model (envs.judge): the completions are collected first, and scored in
    # the judging phase, with the judge's server up and the policy's stopped. Single-turn environments only.
    uses_judge: ClassVar[bool] = False

    def __init__(self, **options: Any) -> None:
        """Keep the options (as given in the run config) so they can enter the fingerprint."""
        try:
            canonical_json(options)
        except (TypeError, ValueError) as e:
            raise ValueError(f"env {self.name!r}: options must be JSON-serialisable: {e}") from e
        self.options: dict[str, Any] = dict(options)

    @classmethod
    def default_dataset_path(cls) -> Path:
        """Absolute path of the shipped dataset, independent of the working directory."""
        return REPO_ROOT / cls.default_dataset

    @classmethod
    def default_source(cls) -> str:
        """The dataset a benchmark reads when its config names none (a path, or any spec envs.datasets reads)."""
        return str(cls.default_dataset_path())

    @classmethod
    def source_digest(cls) -> str | None:
        """sha256 of the code that defines an environment from outside evalflow (its file, or every .py file of
        its top-level package), so an edit without a version bump never reuses cached results; None for
        evalflow's own, whose `version` is bumped on any change that matters."""
        return _source_digest(cls)

    @abstractmethod
    def validate_row(self, row: dict[str, Any], where: str) -> None:
        """Raise DatasetError(f"{where}: ...") for a malformed row, so bad data fails before any GPU time."""

    @abstractmethod
    def prompt_id(self, row: dict[str, Any]) -> str:
        """Stable id of the row's prompt (unique within a dataset)."""

    @abstractmethod
    def reference(self, row: dict[str, Any]) -> str:
        """The reference answer as stored in the rollout record."""

    @abstractmethod
    def prompt_templates(self) -> dict[str, Any]:
        """Everything besides the row that shapes the prompt (instructions, few-shot examples, ...).

        JSON-serialisable; part of the fingerprint, so editing a template invalidates cached rollouts.
        """

    def _fingerprint_payload(self) -> dict[str, Any]:
        source = self.source_digest()
        return {
            "name": self.name,
            "version": self.version,
            "options": self.options,
            "templates": self.prompt_templates(),
            **({"source": source} if source else {}),  # built-ins: absent, so their cache keys stay as they were
        }

    def fingerprint(self) -> str:
        """sha256 hex of (name, version, options, prompt templates); enters rollout cache keys."""
        return hashlib.sha256(canonical_json(self._fingerprint_payload()).encode()).hexdigest()


def run_to_completion(awaitable: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to its end from synchronous code: here, or in a thread of its own when this thread is
    already running an event loop (asyncio.run cannot nest)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(awaitable)
    with ThreadPoolExecutor(1, thread_name_prefix="evalflow-score") as pool:
        return pool.submit(asyncio.run, awaitable).result()


@cache
def _source_digest(cls: type) -> str | None:
    module = sys.modules.get(cls.__module__)
    file = getattr(module, "__file__", None)
    if module is None or file is None or cls.__module__.split(".")[0] in _OWN_PACKAGES:
        return None
    top = sys.modules.get(cls.__module__.split(".")[0])
    top_file = getattr(top, "__file__", None)
    if module.__package__ and top_file and Path(top_file).name == "__init__.py":
        root = Path(top_file).parent
        files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    else:
        root, files = Path(file).parent, [Path(file)]
    digest = hashlib.sha256()
    for path in files:
        digest.update(f"{path.relative_to(root)}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


class SingleTurnEnv(Env):
    """One request per rollout, scored from the completion's answer alone (its reasoning is split off first).

    Scoring is one call, `await env.ascore(row, answer)`; an environment defines `score` (synchronous) or
    `ascore` (when it awaits a sandbox, a subprocess or a model), and the other follows from it.

    Chat envs (the default) build `messages` for the chat completions API. A plain-completion env
    returns the whole prompt text from `prompt`; the rollout then calls the (legacy) completions API
    with that string and the same stop sequences, and `messages` is not used.
    """

    @abstractmethod
    def messages(self, row: dict[str, Any]) -> list[dict[str, str]]:
        """OpenAI chat messages for the row."""

    def prompt(self, row: dict[str, Any]) -> str | None:
        """The plain-text prompt for the completions API, or None (the default): send `messages` as chat."""
        return None

    @abstractmethod
    def stop(self) -> list[str] | None:
        """Stop sequences for the request (None: the chat template's end-of-turn is enough)."""

    def score(self, row: dict[str, Any], completion: str) -> Score:
        """Score a completion's answer against the row's reference, synchronously.

        Define this, or `ascore` when scoring awaits something (a sandbox, a subprocess, a judge model). This
        default runs `ascore` to completion, so either one gives both calls.
        """
        if type(self).ascore is SingleTurnEnv.ascore:
            raise NotImplementedError(f"environment {self.name!r} defines neither score nor ascore")
        return run_to_completion(self.ascore(row, completion))

    async def ascore(self, row: dict[str, Any], completion: str) -> Score:
        """The verdict evalflow awaits for every completion's answer (collection, rescoring, `evalflow envs check`).

        Override it when scoring awaits something; this default runs `score` in place.
        """
        if type(self).score is SingleTurnEnv.score:
            raise NotImplementedError(f"environment {self.name!r} defines neither score nor ascore")
        return self.score(row, completion)

    @classmethod
    def defines_score(cls) -> bool:
        """Whether the class scores at all (defines `score` or `ascore`): checked when an environment is loaded."""
        return cls.score is not SingleTurnEnv.score or cls.ascore is not SingleTurnEnv.ascore

    def _fingerprint_payload(self) -> dict[str, Any]:
        # Stop sequences change what the server returns, so they belong in the cache key too.
        return {**super()._fingerprint_payload(), "stop": self.stop()}


@dataclass(frozen=True)
class Turn:
    """The environment's answer to one assistant message: messages to append, and whether the rollout ends."""

    # Tool results ({"role": "tool", "tool_call_id", "content"}) or a user message, in order.
    messages: list[dict[str, Any]]
    done: bool


class Episode(ABC):
    """One rollout's state; the rollout loop owns the transcript, the episode only answers assistant messages."""

    # The opening conversation (system + user) the rollout starts from.
    messages: list[dict[str, Any]]

    @abstractmethod
    def step(self, assistant: dict[str, Any]) -> Turn:
        """Answer an assistant message (`{"role": "assistant", "content": str | None, "tool_calls": [...]}`;
        each tool call `{"id", "type": "function", "function": {"name", "arguments": JSON string}}`)."""

    @abstractmethod
    def result(self) -> Score:
        """The rollout's score, valid at any point (also when the loop stopped at `max_turns`)."""


class MultiTurnEnv(Env):
    """A conversation per rollout: the env opens it, the model talks, the env answers until done."""

    # Hard cap on assistant turns per rollout, enforced by the rollout loop.
    max_turns: int

    def tools(self) -> list[dict[str, Any]] | None:
        """OpenAI tool schemas offered with every request (None: no tools, e.g. a text-tag protocol)."""
        return None

    def tool_choice(self) -> str | dict[str, Any] | None:
        """The request's `tool_choice` when tools are offered (None: not sent; the server's default, auto)."""
        return None

    @abstractmethod
    def reset(self, row: dict[str, Any]) -> Episode:
        """A fresh episode for the row; deterministic in the row alone."""

    def _fingerprint_payload(self) -> dict[str, Any]:
        # Tools and the turn cap shape the conversation, so they belong in the cache key too.
        return {**super()._fingerprint_payload(), "tools": self.tools(), "max_turns": self.max_turns}
