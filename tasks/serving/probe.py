"""Proof that a server holds the checkpoint it is said to hold, before one rollout is keyed to that checkpoint.

vLLM answering 200 to a weight reload does not prove the weights changed (its own issues report stale weights
after a reload), so a swapped server must pass two checks:

- **the probe**: a few fixed prompts, greedy, with the logprob of every token. It must differ from the
  previous checkpoint's probe (the reload did something) and, where this checkpoint was once served by a fresh
  server, equal that fresh server's probe (kept in a small local book, `~/.cache/evalflow/probes`);
- **the weights**: vLLM's weight checker (`/weight_checker`, sha256 of each loaded tensor) against the same
  hash of the checkpoint's own norm weights (tasks/runtime/scripts/norm_digests.py), where both exist.

A checkpoint that neither a book entry nor the weight checker can vouch for is served by a fresh server, which
writes its book entry. Probes are equal when the tokens are and every logprob is within PROBE_TOLERANCE.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import httpx
from pydantic import BaseModel, ConfigDict

from tasks.checkpoints.results import NormDigests
from tasks.checkpoints.runner import run_script
from tasks.runtime.venv import Runtime

PROBE_PROMPTS = ("The capital of France is", "1 + 1 =", "def fibonacci(n):", "Once upon a time")
PROBE_TOKENS = 8
PROBE_TOLERANCE = 5e-3  # logprob; a swapped and a fresh CPU server of one checkpoint agreed to 1e-4
EMPTY_DIGEST = hashlib.sha256(b"").hexdigest()  # what the checker reports for a tensor repacked elsewhere


class Probe(BaseModel):
    """The greedy continuation of each probe prompt and its tokens' logprobs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tokens: list[list[str]]
    logprobs: list[list[float]]

    def same_as(self, other: Probe, tolerance: float = PROBE_TOLERANCE) -> bool:
        if self.tokens != other.tokens:
            return False
        return all(
            abs(a - b) <= tolerance
            for mine, theirs in zip(self.logprobs, other.logprobs, strict=True)
            for a, b in zip(mine, theirs, strict=True)
        )

    def gap(self, other: Probe) -> str:
        """How far two probes are apart, in words (for the log line of a failed proof)."""
        if self.tokens != other.tokens:
            changed = sum(a != b for a, b in zip(self.tokens, other.tokens, strict=True))
            return f"{changed} of {len(self.tokens)} continuations differ"
        worst = max(
            (abs(a - b) for m, t in zip(self.logprobs, other.logprobs, strict=True) for a, b in zip(m, t, strict=True)),
            default=0.0,
        )
        return f"same tokens, logprobs up to {worst:.2g} apart"


def run_probe(base_url: str, model: str, api_key: str, timeout_s: float = 120.0) -> Probe:
    """The probe against a server's /v1 URL: one prompt at a time, greedy, so nothing else shapes the numbers."""
    tokens: list[list[str]] = []
    logprobs: list[list[float]] = []
    headers = {"Authorization": f"Bearer {api_key}"}
    with httpx.Client(timeout=timeout_s, headers=headers) as client:
        for prompt in PROBE_PROMPTS:
            body = {
                "model": model, "prompt": prompt, "max_tokens": PROBE_TOKENS, "temperature": 0.0,
                "logprobs": 1, "seed": 0,
            }  # fmt: skip
            response = client.post(f"{base_url}/completions", json=body)
            response.raise_for_status()
            choice = response.json()["choices"][0]["logprobs"]
            tokens.append(list(choice["tokens"]))
            logprobs.append([float(x) for x in choice["token_logprobs"]])
    return Probe(tokens=tokens, logprobs=logprobs)


def book_root() -> Path:
    return Path(os.environ.get("EVALFLOW_PROBE_BOOK", Path.home() / ".cache" / "evalflow" / "probes"))


def _entry(fingerprint: str, key: str) -> Path:
    return book_root() / (hashlib.sha256(f"{fingerprint}|{key}".encode()).hexdigest()[:24] + ".json")


def reference(fingerprint: str, key: str) -> Probe | None:
    """The probe a fresh server of this checkpoint (model fingerprint) gave under these settings, if recorded."""
    path = _entry(fingerprint, key)
    try:
        return Probe.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None


def record_reference(fingerprint: str, key: str, probe: Probe) -> None:
    """Keep a fresh server's probe (written whole: a temporary file renamed into place)."""
    path = _entry(fingerprint, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as fh:
        fh.write(probe.model_dump_json())
    os.replace(fh.name, path)


def server_checksums(root_url: str, timeout_s: float = 120.0) -> dict[str, str]:
    """vLLM's weight checker: {rank prefix + tensor name: sha256} of the weights the server holds now."""
    with httpx.Client(timeout=timeout_s) as client:
        response = client.post(f"{root_url}/weight_checker", json={"action": "checksum"})
    response.raise_for_status()
    return dict(response.json().get("checksums", {}))


def checkpoint_digests(runtime: Runtime, folder: str, dtype: str) -> dict[str, str]:
    """The checkpoint's own norm-weight digests, as the weight checker would hash them in `dtype`."""
    result = run_script(runtime, "norm_digests.py", [folder, dtype], f"hashing {folder}'s norm weights", NormDigests)
    return result.digests


def weights_match(loaded: dict[str, str], expected: dict[str, str]) -> tuple[int, list[str]]:
    """(tensors compared, names that differ) between the server's checksums and a checkpoint's digests: every
    rank's copy of each expected tensor that the server reports a real digest for."""
    compared, wrong = 0, []
    for ranked, digest in loaded.items():
        name = ranked.rsplit(":", 1)[-1]
        if name not in expected or digest == EMPTY_DIGEST:
            continue
        compared += 1
        if digest != expected[name]:
            wrong.append(name)
    return compared, sorted(set(wrong))
