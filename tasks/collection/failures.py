"""What a request error means for a rollout: a model outcome (recorded and scored), or a failure of
the run's set-up (configuration) or of the moment (transient) that must never be cached as a result.

- outcome: a 400/422 that says the conversation does not fit the context (vLLM's "maximum context
  length" family) after the model's own turns made it grow: the episode ends there, recorded with its
  error. On the opening request the benchmark's prompt itself is too long: the rollout raises a
  configuration failure instead (prompt_length.py finds these at plan time for managed servers).
- configuration: 401, 403, 404 (wrong key, wrong model name, wrong URL path) and any other 400/422
  (a sampling or tool option the server rejects). Retrying cannot help; the run stops collecting.
- transient: connection errors, timeouts, 408, 409, 429, 5xx. Retried with backoff; if they persist
  the batch fails and is collected again by the next run or the UI's Retry.
- judge: a request to the run's judge model failed (tasks/judging): that rollout has no verdict. Retried with
  its batch (the judge's answers so far are cached); counted apart from the policy's failures.
- environment: the benchmark's own code failed on a rollout (its score or an episode step raised, hung or
  returned a bad value; tasks.collection.env_calls). Not retried (it would fail again); the rollout counts
  as failed, apart from model outcomes and request failures, and the batch is never cached.

Only evalflow's own one-line descriptions leave this module: never an exception or request object
(an openai exception holds the request, and its headers hold the API key).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Literal

import openai

from errors import EvalflowError

Kind = Literal["outcome", "configuration", "transient", "environment", "judge"]

# vLLM's wording when prompt + max_tokens exceed the model's context (several versions' variants).
_TOO_LONG = re.compile(
    r"maximum context length|maximum model length|context length is|is too long|too many tokens"
    r"|reduce the length|'max_tokens' or 'max_completion_tokens' is too large|longer than the maximum",
    re.IGNORECASE,
)


def classify(exc: BaseException) -> Kind:
    """The kind of a request error (see the module docstring); anything unknown is a configuration
    failure, so that nothing unexplained is counted as the model's answer."""
    if isinstance(exc, openai.APITimeoutError | openai.APIConnectionError):
        return "transient"
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        if status in (400, 422):
            return "outcome" if _TOO_LONG.search(_server_message(exc)) else "configuration"
        if status in (408, 409, 429) or status >= 500:
            return "transient"
        return "configuration"
    return "configuration"


def is_outcome_error(recorded: str) -> bool:
    """Whether a rollout's recorded error is the model's outcome (a prompt over the context)."""
    return bool(_TOO_LONG.search(recorded))


def _server_message(exc: openai.APIStatusError) -> str:
    """The server's own error message (vLLM: body.message), else the exception's text."""
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error")
        message = error.get("message") if isinstance(error, dict) else body.get("message")
        if message:
            return str(message)
    return exc.message


def describe(exc: BaseException, base_url: str, secrets: tuple[str, ...] = ()) -> str:
    """One line naming the error, the server and what it said; `secrets` (the API key) are masked."""
    if isinstance(exc, openai.APIStatusError):
        text = f"HTTP {exc.status_code} {type(exc).__name__} from {base_url}: {_server_message(exc)}"
    elif isinstance(exc, openai.APITimeoutError):
        text = f"{type(exc).__name__}: no answer from {base_url} within the request timeout"
    elif isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        text = f"{type(exc).__name__}: cannot reach {base_url}" + (f" ({cause})" if cause else "")
    else:
        text = f"{type(exc).__name__}: {exc}"
    line = " ".join(text.split())[:500]
    for secret in secrets:
        if secret:
            line = line.replace(secret, "***")
    return line


class RolloutFailed(Exception):
    """A rollout that could not be collected (configuration or transient): never part of a result."""

    def __init__(self, kind: Kind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class FailureSummary:
    """The failed rollouts of one batch: how many, of which kind, the most common reasons."""

    benchmark: str
    index: int
    size: int
    failed: int
    kind: Kind  # the most severe: configuration, else environment, else judge, else transient
    reasons: tuple[tuple[str, int], ...]
    environment: int = 0  # of `failed`, the environment errors
    judge: int = 0  # of `failed`, the judge's failures

    @classmethod
    def of(cls, benchmark: str, index: int, size: int, failures: list[RolloutFailed]) -> FailureSummary:
        kinds = {f.kind for f in failures}
        severe: list[Kind] = [k for k in ("configuration", "environment", "judge") if k in kinds]
        kind: Kind = severe[0] if severe else "transient"
        reasons = tuple(Counter(f.message for f in failures).most_common(3))
        environment = sum(f.kind == "environment" for f in failures)
        judge = sum(f.kind == "judge" for f in failures)
        return cls(benchmark, index, size, len(failures), kind, reasons, environment, judge)

    def line(self) -> str:
        top = "; ".join(f"{n}x {reason}" for reason, n in self.reasons)
        return f"{self.benchmark} batch {self.index}: {self.failed} of {self.size} rollouts failed ({self.kind}): {top}"

    def as_record(self) -> dict[str, object]:
        return {"benchmark": self.benchmark, "index": self.index, "size": self.size, "failed": self.failed,
                "kind": self.kind, "reasons": [list(r) for r in self.reasons],
                "environment": self.environment, "judge": self.judge}  # fmt: skip


class BatchFailed(Exception):
    """A batch with failed rollouts: the task fails (nothing is cached); its message is evalflow's own."""

    def __init__(self, summary: FailureSummary, kept_url: str | None = None) -> None:
        super().__init__(summary.line())
        self.summary = summary
        self.kept_url = kept_url  # the batch's finished rollouts, if any

    @property
    def transient(self) -> bool:
        """Whether a retry may succeed: not after a configuration failure or an environment error."""
        return self.summary.kind in ("transient", "judge")


class RunFailed(EvalflowError):
    """A run that ends Failed: a configuration failure, or too many transient ones (the message says which)."""

    kind = "run"


def persisted_form(obj: object) -> dict[str, str]:
    """The JSON result serializer's `object_encoder` for batch tasks: what Prefect writes to the store
    when a batch fails. Only evalflow's own line for a BatchFailed, only the type name for anything
    else: an exception (an openai one holds the request and its `authorization` header) is never
    written."""
    if isinstance(obj, BatchFailed):
        return {"failed": "BatchFailed", "message": obj.summary.line()}
    if isinstance(obj, BaseException):
        return {"failed": type(obj).__name__}
    raise TypeError(f"a batch result holds only plain JSON, not {type(obj).__name__}")
