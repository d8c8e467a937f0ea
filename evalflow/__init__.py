"""evalflow's public API for your own benchmarks and plugins: import from here, not from evalflow's modules.

    from evalflow import DatasetError, MetricSpec, Score, SingleTurnEnv

An environment subclasses `SingleTurnEnv` (one request, one completion's answer scored by `score`, or by the
awaited `ascore` when scoring waits on a sandbox, a subprocess or a model) or `MultiTurnEnv` (an `Episode` per
rollout answers each assistant message with a `Turn`). A declarative task's own extractor or scorer kind
subclasses `ExtractorKind` or `ScorerKind` and registers under the entry-point group `evalflow.extractors` or
`evalflow.scorers`. `ENV_API_VERSION` is bumped by any change that breaks one of these.

This is a stable facade: the names below keep working whatever evalflow's modules are called (the older path
`envs.base` works too). It imports the plain-Python environment layer only: no Prefect, no server.
"""

from envs.base import (
    ENV_API_VERSION,
    DatasetError,
    Env,
    Episode,
    MetricSpec,
    MultiTurnEnv,
    ReferenceProfile,
    Score,
    SingleTurnEnv,
    Turn,
    canonical_json,
)
from envs.task_kinds import EXTRACTOR_GROUP, SCORER_GROUP, Context, ExtractorKind, ScorerKind, Verdict
from errors import EvalflowError
from errors.module_run import refuse_module_run

__all__ = [
    "ENV_API_VERSION",
    "EXTRACTOR_GROUP",
    "SCORER_GROUP",
    "Context",
    "DatasetError",
    "Env",
    "Episode",
    "EvalflowError",
    "ExtractorKind",
    "MetricSpec",
    "MultiTurnEnv",
    "ReferenceProfile",
    "Score",
    "ScorerKind",
    "SingleTurnEnv",
    "Turn",
    "Verdict",
    "canonical_json",
]

refuse_module_run(__name__)  # `python -m evalflow.X` runs nothing: say what to run instead
