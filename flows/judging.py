"""The judging phase of an eval run: judged benchmarks scored by the run's judge model after collection.

Before any server starts, the judge is prepared (a managed judge's checkpoint converted and fingerprinted like the
policy's) and its identity enters the judged benchmarks' batch keys. The policy's server collects their
completions (tasks.judging.completions), then stops; the judging phase scores those completions like a rescore,
asking the judge through its client (tasks.judging.client), whose server starts on the first answer not cached.
So a rerun with every verdict cached starts no judge, and a rubric edit sends only judge requests.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from prefect.runtime import deployment as prefect_deployment

from core import store as store_paths
from core.config import EvalConfig, JudgeConfig
from core.judge_record import JudgeInfo, Pairwise
from core.logs import get_logger
from core.store import Store
from envs.base import SingleTurnEnv
from envs.judge import judging
from errors import ConfigError
from tasks.analysis.compare import find_baseline
from tasks.checkpoints.prepare import PreparedModel, prepare_model
from tasks.collection.batch import partial_url
from tasks.collection.failures import BatchFailed
from tasks.collection.plan import Benchmark, Planned, plan
from tasks.collection.rollout import CollectContext
from tasks.collection.schedule import Collected, collect_all
from tasks.judging.client import JudgeClient, judge_identity
from tasks.judging.pairwise import answers, compare_pairs
from tasks.reporting.index import read_entries
from tasks.serving.keeper import active_keeper
from tasks.serving.managed import Managed, start_managed
from tasks.serving.preflight import check_endpoint
from tasks.serving.sample_settings import samples_fingerprint
from tasks.serving.server import Endpoint


@dataclass(frozen=True)
class JudgeSetup:
    """The run's judge, ready to be asked: its config, its prepared model and its identity."""

    config: JudgeConfig
    model: PreparedModel
    identity: str


class JudgedRun(Protocol):
    """What the judging phase reads of a prepared run (flows.eval.Prepared)."""

    @property
    def judge(self) -> JudgeSetup | None: ...
    @property
    def config(self) -> EvalConfig: ...
    @property
    def store(self) -> Store: ...
    @property
    def benchmarks(self) -> list[Benchmark]: ...
    @property
    def fingerprint(self) -> str: ...
    @property
    def storage(self) -> Any: ...
    @property
    def run_id(self) -> str: ...
    @property
    def run_dir(self) -> str: ...
    @property
    def model(self) -> PreparedModel: ...
    @property
    def batch_task(self) -> Any: ...
    @property
    def work(self) -> list[Planned]: ...


def check_judged(config: EvalConfig, benchmarks: list[Benchmark]) -> None:
    """A benchmark scored by a judge needs `judge:` in the config, and must be single-turn (its completions are
    judged after collection); an external judge must answer. Fails before anything starts."""
    for i, bench in enumerate(benchmarks):
        if not bench.env.uses_judge:
            continue
        if config.judge is None:
            raise ConfigError(
                f"benchmarks.{i} ({bench.name}) is scored by a judge model: set `judge:` in the config (a model "
                "evalflow serves, or judge.server.mode: external with its base_url)"
            )
        if not isinstance(bench.env, SingleTurnEnv):
            raise ConfigError(f"benchmarks.{i} ({bench.name}): only single-turn benchmarks can be judged")
    judge = config.judge
    if judge is not None and judge.server.mode == "external":
        # reachable and serving the judge before the policy spends minutes (GET /models: no answer is asked for)
        name = judge.model.served_name or judge.model.source
        name_field = "judge.model.served_name" if judge.model.served_name else "judge.model.source"
        endpoint = Endpoint(judge.server.base_urls[0], name, judge.server.api_key.get_secret_value())
        check_endpoint(endpoint, url_field="judge.server.base_url", name_field=name_field, chat=False, plain=False)


def prepare_judge(config: EvalConfig, benchmarks: list[Benchmark]) -> JudgeSetup | None:
    """The judge of a run with judged benchmarks (None without): a managed judge's checkpoint is prepared now
    (converted and cached like the policy's), since its fingerprint enters the judged batches' keys."""
    judge = config.judge
    if judge is None or (judge.pairwise is None and not any(b.env.uses_judge for b in benchmarks)):
        return None
    if judge.server.mode == "managed":
        model = prepare_model(judge.model, judge.server.runtime)
        fingerprint = samples_fingerprint(model.fingerprint, judge.server)
    else:
        name = judge.model.served_name or judge.model.source
        model = PreparedModel(name, name, f"external:{name}", judge.model.source, "external")
        fingerprint = model.fingerprint
    return JudgeSetup(judge, model, judge_identity(fingerprint, judge.sampling))


async def judge_phase(prepared: JudgedRun, first: Collected) -> tuple[Collected, JudgeInfo]:
    """Score the judged benchmarks' batches with the judge; `first` is the policy's collection (whose completions
    batches are dropped from the result: their rollouts are the judged ones). Returns the run's whole collection."""
    assert prepared.judge is not None
    logger, setup, store = get_logger(), prepared.judge, prepared.store
    started = time.perf_counter()
    judged = [b for b in prepared.benchmarks if b.env.uses_judge]
    replanned = plan(judged, prepared.config, prepared.fingerprint, prepared.storage, store, setup.identity)
    todo = [p for p in replanned if not p.needs_server]  # cached, or completions to judge
    logger.info(
        "judging %d batches (%d rollouts) with %s: %d cached, %d to judge; %d without completions (failed above)",
        len(replanned), sum(p.batch.size for p in replanned), setup.model.served_name,
        sum(p.cached is not None for p in todo), sum(p.rescore_from is not None for p in todo),
        len(replanned) - len(todo),
    )  # fmt: skip
    kept = [r for r in first.results if "/completions/" not in r.url]  # the policy's own, judged or not
    managed: list[Managed] = []
    start_s: list[float] = []
    failed = True
    async with contextlib.AsyncExitStack() as stack:

        async def endpoint() -> Endpoint:
            """The judge's server, started on the first answer not cached (a managed one in a slot of its own)."""
            cfg = setup.config
            if cfg.server.mode == "external":
                urls = cfg.server.base_urls
                return Endpoint(urls[0], setup.model.served_name, cfg.server.api_key.get_secret_value())
            keeper = active_keeper()
            if keeper is not None:  # a watcher keeps the policy's server in the slot the judge needs
                await keeper.close()
            logger.info("starting the judge's server (%s)", setup.model.served_name)
            began = time.perf_counter()
            server_cfg = cfg.server.model_copy(update={"swap_weights": False})
            managed.append(await start_managed(stack, server_cfg, setup.model, _log_path(prepared)))
            start_s.append(round(time.perf_counter() - began, 1))
            return managed[0].server.endpoint

        client = JudgeClient(
            setup.identity, setup.config.sampling, store, endpoint, setup.config.concurrency,
            prepared.config.collection.request_timeout_s, setup.config.model.reasoning,
        )  # fmt: skip
        ctx = CollectContext(
            run_id=prepared.run_id, run_dir=prepared.run_dir, endpoint=None,
            model_fingerprint=prepared.model.fingerprint, sampling=prepared.config.sampling,
            collection=prepared.config.collection, store=store,
            progress_interval_s=prepared.config.collection.progress_interval_s,
            reasoning=prepared.config.model.reasoning,
        )  # fmt: skip
        try:
            with judging(client):
                second = await collect_all(ctx, todo, prepared.batch_task, label="judge")
            files = [r.url for r in kept + second.results]
            pairs = await pairwise(prepared, client, files) if setup.config.pairwise is not None else []
            failed = False
        finally:
            await client.aclose()
            if managed:
                await managed[0].release(failed)
    counts = client.counts
    info = JudgeInfo(
        model=setup.model.served_name, identity=setup.identity, mode=setup.config.server.mode,
        seconds=round(time.perf_counter() - started, 1), started_s=start_s[0] if start_s else None,
        asked=counts.asked, cached=counts.cached, requests=counts.requests, failed=counts.failed,
        completion_tokens=counts.completion_tokens, pairwise=pairs,
    )  # fmt: skip
    logger.info(
        "judge %s: %d answers asked, %d cached, %d requests, %d failed, %d tokens in %.1f s",
        info.model, info.asked, info.cached, info.requests, info.failed, info.completion_tokens, info.seconds,
    )  # fmt: skip
    # a failed completions batch's finished rollouts have no verdict: never analysed (its next attempt reads them)
    unjudged = {partial_url(store, p.batch) for p in prepared.work if p.batch.completions}
    lost = [BatchFailed(f.summary) if f.kept_url in unjudged else f for f in first.failed]
    planned = first.planned_rollouts - sum(p.batch.size for p in prepared.work if p.batch.completions)
    whole = Collected(
        results=kept + second.results,
        failed=lost + second.failed,
        planned_rollouts=planned + sum(p.batch.size for p in replanned),
    )
    return whole, info


async def pairwise(prepared: JudgedRun, client: JudgeClient, files: list[str]) -> list[Pairwise]:
    """This run's answers against its baseline's (the run the report compares with), pair by pair; [] without one."""
    cfg, config, store = prepared.judge and prepared.judge.config.pairwise, prepared.config, prepared.store
    assert cfg is not None
    names = [b.name for b in prepared.benchmarks if cfg.benchmarks is None or b.name in cfg.benchmarks]
    entry = find_baseline(
        read_entries(store), prefect_deployment.name, names, prepared.run_id, run_name=config.run_name,
        run_id=config.baseline_run_id,
    )  # fmt: skip
    if entry is None:
        get_logger().info("pairwise judging: no baseline run to compare with (it needs a complete earlier run)")
        return []
    base_files = store.list(store.path("runs", entry.run_id, "rollouts"), "*/*.parquet")
    this, base = answers(store, files), answers(store, base_files)
    results = await compare_pairs(client, cfg, this, base, entry.run_id)
    for r in results:
        get_logger().info(
            "pairwise %s against %s: %d pairs, %d wins, %d ties, %d losses (%d flipped with the order), %d unparsed, "
            "%d failed", r.benchmark, entry.run_id, r.pairs, r.wins, r.ties, r.losses, r.flips, r.unparsed, r.failed,
        )  # fmt: skip
    return results


def _log_path(prepared: JudgedRun) -> Path:
    run_dir = prepared.run_dir
    logs = Path(run_dir) / "logs" if store_paths.is_local(run_dir) else Path(tempfile.mkdtemp()) / "logs"
    return logs / "vllm-judge.log"
