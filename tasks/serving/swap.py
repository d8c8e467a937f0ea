"""Loading another checkpoint into a running managed vLLM server, in place, instead of starting a new one.

Two checkpoints can share a server when everything the server was started with is the same but the weights:
the server's command line (minus the model's path and name), the model's config.json (architecture, shapes,
dtype; minus the keys that only say who wrote it), its tokenizer and chat template, and its generation config
(vLLM takes default sampling settings from it at start). `swap_key` captures exactly that; `differences` says in
words why two keys differ, for the one line that explains a restart.

The swap itself uses vLLM's development routes (VLLM_SERVER_DEV_MODE=1, enabled only on managed servers bound to
loopback): `/pause?mode=wait` drains the requests in flight, `/collective_rpc` runs the workers'
`reload_weights(weights_path=...)`, `/reset_prefix_cache` drops KV blocks computed with the old weights, and
`/resume`. Each step is bounded by a timeout; any failure raises SwapError and the caller starts a fresh server.
A swap is never trusted on its HTTP answers alone: tasks/serving/probe.py proves it before a rollout is sent.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from core.logs import get_logger
from errors import EvalflowError

# config.json keys that say who wrote the file, not what the model is
IGNORED_CONFIG_KEYS = frozenset({"_name_or_path", "transformers_version", "_commit_hash"})
# files that make the tokenizer and the prompt text (a changed one means a restart: vLLM loads them at start)
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.json",
    "merges.txt", "tokenizer.model", "chat_template.jinja", "chat_template.json", "preprocessor_config.json",
)  # fmt: skip


class SwapError(EvalflowError, RuntimeError):
    """Loading the next checkpoint into the running server failed or timed out: the server is restarted fresh."""

    kind = "server"


@dataclass(frozen=True)
class SwapKey:
    """What must be equal for two checkpoints to share one server; `parts` names each piece for `differences`."""

    parts: dict[str, str] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.parts, sort_keys=True).encode()).hexdigest()[:16]


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else "-"


def model_config(folder: Path) -> dict[str, Any]:
    """config.json without the keys that only say who wrote it."""
    data = json.loads((folder / "config.json").read_text())
    return {k: v for k, v in data.items() if k not in IGNORED_CONFIG_KEYS} if isinstance(data, dict) else {}


def swap_key(folder: str | None, command: list[str], env: dict[str, str]) -> SwapKey | None:
    """The key of a server of the HF folder `folder` started with `command` and `env` (the model's path and
    served name already taken out of the command); None when the model is not a local folder (a hub id)."""
    if folder is None or not (Path(folder) / "config.json").is_file():
        return None
    root = Path(folder)
    config = model_config(root)
    parts = {
        "server": hashlib.sha256(json.dumps([command, sorted(env.items())]).encode()).hexdigest()[:16],
        "config.json": hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16],
        "tokenizer": hashlib.sha256("".join(_file_digest(root / f) for f in TOKENIZER_FILES).encode()).hexdigest()[:16],
        "generation_config.json": _file_digest(root / "generation_config.json"),
    }
    return SwapKey(parts, config)


def differences(old: SwapKey, new: SwapKey) -> str:
    """Why a server of `old` cannot take `new`'s weights, in words (the architecture or config keys that
    changed, the tokenizer, the server settings)."""
    said: list[str] = []
    if old.parts.get("config.json") != new.parts.get("config.json"):
        keys = sorted(k for k in old.config.keys() | new.config.keys() if old.config.get(k) != new.config.get(k))
        arch = "architectures"
        if arch in keys:
            said.append(f"architecture {old.config.get(arch)} -> {new.config.get(arch)}")
            keys.remove(arch)
        shown = ", ".join(f"{k} {old.config.get(k)!r} -> {new.config.get(k)!r}" for k in keys[:4])
        if shown:
            said.append(f"config.json {shown}" + (f" and {len(keys) - 4} more" if len(keys) > 4 else ""))
    for part, words in (
        ("tokenizer", "tokenizer or chat template files"),
        ("generation_config.json", "generation_config.json"),
        ("server", "server settings"),
    ):
        if old.parts.get(part) != new.parts.get(part):
            said.append(f"{words} differ")
    return "; ".join(said) or "nothing"


def _post(client: httpx.Client, url: str, what: str, **kwargs: Any) -> httpx.Response:
    try:
        response = client.post(url, **kwargs)
    except httpx.HTTPError as exc:
        raise SwapError(f"{what}: {type(exc).__name__}: {exc}") from None
    if response.status_code != 200:
        raise SwapError(f"{what}: HTTP {response.status_code}: {response.text[:300]}")
    return response


def swap_weights(root_url: str, weights_path: str, timeout_s: float) -> float:
    """Load the HF folder `weights_path` into the server at `root_url` (http://host:port) in place; returns the
    seconds it took. Raises SwapError (the server is then not to be used) on any failure or after `timeout_s`."""
    started = time.monotonic()
    with httpx.Client(base_url=root_url, timeout=timeout_s) as client:
        _post(client, "/pause", "pausing generation", params={"mode": "wait"})
        body = {"method": "reload_weights", "kwargs": {"weights_path": weights_path}, "timeout": timeout_s}
        answer = _post(client, "/collective_rpc", "reloading the weights", json=body)
        if answer.content and any(r is not None for r in answer.json().get("results", [])):  # workers return None
            raise SwapError(f"reloading the weights: the workers answered {answer.text[:300]}")
        _post(client, "/reset_prefix_cache", "resetting the prefix cache")
        _post(client, "/resume", "resuming generation")
    seconds = time.monotonic() - started
    get_logger().info("loaded %s into the running server in %.1f s", weights_path, seconds)
    return seconds
