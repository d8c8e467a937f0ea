"""Benchmark environments: prompts, dataset rows and scoring, as plain Python (no Prefect import)."""

from envs.base import DatasetError, Env, MetricSpec, Score, SingleTurnEnv
from envs.datasets import load_rows, rows_hash
from envs.registry import ENVS, get_env, metric_specs
from errors.module_run import refuse_module_run

__all__ = [
    "ENVS",
    "DatasetError",
    "Env",
    "MetricSpec",
    "Score",
    "SingleTurnEnv",
    "get_env",
    "load_rows",
    "metric_specs",
    "rows_hash",
]

refuse_module_run(__name__)  # `python -m envs.X` runs nothing: say what to run instead
