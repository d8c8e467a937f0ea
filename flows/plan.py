"""What a run would do, and the checks that cost seconds before anything that costs minutes: the dry
run (`evalflow run --dry-run`), the command line's pre-flight and the flow's first stage share them."""

from __future__ import annotations

from prefect.runtime import deployment as prefect_deployment
from prefect.runtime import flow_run as prefect_flow_run
from pydantic import BaseModel, ConfigDict

from core.config import EvalConfig
from core.record import BatchCount, BenchmarkPlan, RolloutCount, RunPlan
from core.resolve import resolve
from core.secrets import redact
from core.store import Store
from envs.base import SingleTurnEnv
from errors import ConfigError
from flows.judging import check_judged
from flows.shards import deployment_name as shard_deployment
from tasks.checkpoints.prepare import ModelPlan, plan_model
from tasks.collection.cache import result_storage
from tasks.collection.plan import Benchmark, load_benchmarks, plan
from tasks.collection.prompt_length import check_prompt_lengths, local_folder
from tasks.serving.preflight import check_endpoint
from tasks.serving.sample_settings import samples_fingerprint
from tasks.serving.server import Endpoint


def sends_plain_text(benchmark: Benchmark) -> bool:
    """Whether the benchmark sends plain text completions (a base model's prompt), not chat."""
    env = benchmark.env
    return isinstance(env, SingleTurnEnv) and bool(benchmark.rows) and env.prompt(benchmark.rows[0]) is not None


def check_endpoints(endpoint: Endpoint, config: EvalConfig, benchmarks: list[Benchmark]) -> None:
    """The endpoint (each replica of it) serves the model and answers the kinds of request the
    benchmarks send."""
    kinds = {sends_plain_text(b) for b in benchmarks}
    many = len(endpoint.urls) > 1
    for i, url in enumerate(endpoint.urls):
        check_endpoint(
            Endpoint(url, endpoint.model, endpoint.api_key),
            url_field=(f"server.base_url.{i}" if many else "server.base_url")
            if config.server.mode == "external"
            else "the managed vLLM server",
            name_field="model.served_name" if config.model.served_name else "model.source",
            chat=False in kinds,
            plain=True in kinds,
        )


def external_endpoint(config: EvalConfig) -> Endpoint:
    urls = config.server.base_urls
    assert urls, "external mode needs server.base_url (checked by the config)"
    name = config.model.served_name or config.model.source
    replicas = tuple(urls) if len(urls) > 1 else ()
    return Endpoint(urls[0], name, config.server.api_key.get_secret_value(), replicas)


class ExternalPlan(BaseModel):
    """The model section of an external server's plan: the name it serves stands for the model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    action: str
    served_name: str
    fingerprint: str

    @property
    def target(self) -> None:  # nothing is served from here
        return None


def preflight(
    config: EvalConfig, probe: bool = True
) -> tuple[EvalConfig, Store, list[Benchmark], ModelPlan | ExternalPlan]:
    """Every check that costs seconds, before anything that costs minutes: blocks resolve, the store is
    writable, datasets load and validate, the model source is located and hashed. Returns (config
    with blocks applied, store, benchmarks, model plan). Without `probe` (a dry run) a local store is
    checked without creating it."""
    if config.model.steps is not None:
        raise ConfigError(
            f"model.steps: {config.model.source} is a training run (its checkpoints are runs of their own): evaluate "
            "it with `evalflow watch` (`--once` for the steps ready now), or name one step's folder as model.source"
        )
    resolved = resolve(config)  # a missing block fails here, naming the field
    config, store = resolved.config, resolved.store
    store.check_writable(probe=probe)
    benchmarks = load_benchmarks(config, store)
    check_judged(config, benchmarks)
    if config.server.mode == "managed":
        return config, store, benchmarks, plan_model(config.model, config.server.runtime)
    name = external_endpoint(config).model
    action = f"none: external server {', '.join(config.server.base_urls)}"
    return config, store, benchmarks, ExternalPlan(action=action, served_name=name, fingerprint=f"external:{name}")


def plan_run(config: EvalConfig, probe: bool = False) -> RunPlan:
    """What a run would do, starting nothing: no conversion, no server, no store writes (but the
    store's write probe with `probe`, as a real run's command line does before it starts).

    The run's preflight runs (blocks, store, datasets, model source), every batch is looked up in the
    cache, so the numbers match what a real run then does, and an external endpoint that would be
    asked for rollouts is checked (it serves the model and answers a 1-token request).
    """
    config, store, benchmarks, model_plan = preflight(config, probe=probe)
    shards = None
    if config.collection.shards != 1:  # outside a deployment run, only with collection.shard_deployment
        deployment = shard_deployment(config, prefect_flow_run.flow_name, prefect_deployment.name)
        shards = f"{config.collection.shards} child flow runs of {deployment}"
    fingerprint, target = model_plan.fingerprint, model_plan.target
    if config.server.mode == "managed" and fingerprint and target and local_folder(target) is not None:
        # the served folder is here already (cached conversion, HF folder): prompts are counted now
        benchmarks = check_prompt_lengths(benchmarks, config, target, fingerprint)
    fingerprint = fingerprint and samples_fingerprint(fingerprint, config.server)
    storage = result_storage(store, save=False)
    work = plan(benchmarks, config, fingerprint, storage, store) if fingerprint else []
    cached = [p for p in work if p.cached is not None]
    rescored = [p for p in work if p.rescore_from is not None]
    total = sum(b.repeats * len(b.rows) for b in benchmarks)
    to_generate = total - sum(p.batch.size for p in cached) - sum(p.batch.size for p in rescored)
    if to_generate and config.server.mode == "external":
        check_endpoints(external_endpoint(config), config, benchmarks)
    return RunPlan(
        config=redact(config.model_dump(mode="json")),
        model=model_plan.model_dump(mode="json"),
        benchmarks={
            b.name: BenchmarkPlan(prompts=len(b.rows), repeats=b.repeats, long_prompts=b.long_prompts)
            for b in benchmarks
        },
        batches=BatchCount(total=len(work) or None, cached=len(cached), rescored=len(rescored)),
        rollouts=RolloutCount(
            total=total,
            cached=sum(p.batch.size for p in cached),
            to_generate=to_generate,
            rescored=sum(p.batch.size for p in rescored),
        ),
        shards=shards,
        would_start=(
            "nothing: every batch is cached (or rescored from cached completions)"
            if not to_generate
            else f"vLLM ({config.server.runtime}) for {model_plan.served_name}"
            if config.server.mode == "managed"
            else f"requests to {', '.join(config.server.base_urls)}"
        ),
    )
