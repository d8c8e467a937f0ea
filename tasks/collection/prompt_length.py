"""Prompts that cannot fit the context, found before anything is sent: each benchmark's first requests
(template, few-shot and tools included) counted with the model's own tokenizer, against
`server.max_model_len - max_tokens` (vLLM refuses a request whose prompt leaves no room for them).

A prompt over the limit fails the run in one line naming its file:line and token count, or, with
`benchmarks.N.on_long_prompt: skip`, is left out and counted (the report says how many). Counts are
cached by the tokenizer's content (every file of the served folder but the weights) and the requests, so a
rerun pays nothing, nor does the next checkpoint of a training run (new weights, the same tokenizer); the
count runs in the vLLM runtime (transformers), a few seconds per new set of prompts.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from core.config import EvalConfig, chat_template_path
from core.logs import get_logger
from core.record import LongPrompts
from envs.base import DatasetError, MultiTurnEnv, SingleTurnEnv, canonical_json
from tasks.checkpoints.decide import cache_root_of
from tasks.checkpoints.hashing import MARKER
from tasks.checkpoints.layout import WEIGHT_SUFFIXES
from tasks.checkpoints.results import PromptRequest, PromptTokenCounts
from tasks.checkpoints.runner import run_script
from tasks.collection.plan import Benchmark
from tasks.runtime.venv import ensure_runtime


def first_request(benchmark: Benchmark, row: dict[str, Any]) -> PromptRequest:
    """What the rollout's first request carries to the server (see rollout.py)."""
    env = benchmark.env
    if isinstance(env, SingleTurnEnv):
        prompt = env.prompt(row)
        return {"prompt": prompt} if prompt is not None else {"messages": env.messages(row)}
    assert isinstance(env, MultiTurnEnv)
    request: PromptRequest = {"messages": env.reset(row).messages}
    if env.tools():
        request["tools"] = env.tools()
    return request


def tokenizer_digest(folder: str) -> str:
    """The content of what the count reads: every top-level file of the served folder but the weights and
    evalflow's own marker (tokenizer files, chat template, config.json), by name and bytes."""
    digest = hashlib.sha256()
    for path in sorted(Path(folder).iterdir()):
        skipped = path.name.endswith(WEIGHT_SUFFIXES) or path.name.startswith(".") or path.name == MARKER
        if path.is_file() and not skipped:
            digest.update(f"{path.name}\0{path.stat().st_size}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def count_tokens(
    requests: list[PromptRequest], folder: str, fingerprint: str, template: str | None, config: EvalConfig
) -> list[int]:
    """Prompt tokens per request, from the cache or the runtime's tokenizer. The cache key is the folder's
    tokenizer content (tokenizer_digest), or the model's fingerprint where the folder cannot be read."""
    try:
        tokenizer = tokenizer_digest(folder)
    except OSError:
        tokenizer = fingerprint
    digest = hashlib.sha256(canonical_json([tokenizer, template, requests]).encode()).hexdigest()[:24]
    cached = cache_root_of(config.model) / ".prompt-tokens" / f"{digest}.json"  # a dot-folder: not an entry
    if cached.is_file():
        return json.loads(cached.read_text())["counts"]
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="evalflow-prompts-") as fh:
        json.dump({"folder": folder, "chat_template": template, "requests": requests}, fh)
        fh.flush()
        runtime = ensure_runtime(config.server.runtime)
        counts = run_script(
            runtime, "count_prompt_tokens.py", [fh.name], "counting prompt tokens", PromptTokenCounts
        ).counts
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".tmp-{os.getpid()}")
    tmp.write_text(json.dumps({"counts": counts}))
    os.replace(tmp, cached)
    return counts


def check_prompt_lengths(
    benchmarks: list[Benchmark], config: EvalConfig, folder: str, fingerprint: str
) -> list[Benchmark]:
    """`benchmarks` with prompts over the limit skipped where asked; DatasetError for the first one over
    it elsewhere. Each benchmark's `long_prompts` says the limit, the longest prompt and what was skipped."""
    logger = get_logger()
    template = chat_template_path(config.server.chat_template).read_text() if config.server.chat_template else None
    requests = [first_request(b, row) for b in benchmarks for row in b.rows]
    counts = iter(count_tokens(requests, folder, fingerprint, template, config))
    checked = []
    for bench in benchmarks:
        max_tokens = (bench.sampling or config.sampling).max_tokens
        limit = config.server.max_model_len - max_tokens
        tokens = [next(counts) for _ in bench.rows]
        over = [(row, n) for row, n in zip(bench.rows, tokens, strict=True) if n > limit]
        summary = LongPrompts(
            limit=limit, longest=max(tokens), policy=bench.on_long_prompt, prompts=len(tokens), skipped=len(over)
        )
        if over and bench.on_long_prompt == "fail":
            row, n = over[0]
            where = bench.places.get(bench.env.prompt_id(row), f"prompt {bench.env.prompt_id(row)!r}")
            more = f" ({len(over)} prompts of {len(tokens)} are over it)" if len(over) > 1 else ""
            raise DatasetError(
                f"{where}: the prompt of benchmark {bench.name} is {n} tokens, over the {limit} a request may have "
                f"(server.max_model_len {config.server.max_model_len} - max_tokens {max_tokens}){more}: raise "
                f"server.max_model_len, lower max_tokens, or set benchmarks.N.on_long_prompt: skip"
            )
        if over:
            long_ids = {bench.env.prompt_id(row) for row, _ in over}
            logger.warning(
                "benchmark %s: %d of %d prompts are over %d tokens (server.max_model_len - max_tokens): skipped",
                bench.name, len(over), len(tokens), limit,
            )  # fmt: skip
            kept = [r for r in bench.rows if bench.env.prompt_id(r) not in long_ids]
            if not kept:
                raise DatasetError(f"benchmark {bench.name}: every prompt is over {limit} tokens; nothing is left")
            bench = replace(bench, rows=kept)
        checked.append(replace(bench, long_prompts=summary))
    return checked


def local_folder(path: str) -> str | None:
    """The served folder when it is on this machine (a hub id is not: its prompts are not counted)."""
    return path if Path(path).is_dir() else None
