"""Benchmark environments: prompts, dataset rows and scoring, as plain Python (no Prefect import)."""

from envs.base import DatasetError, Env, MetricSpec, Score, SingleTurnEnv
from envs.datasets import load_rows, rows_hash
from envs.registry import ENVS, get_env, metric_specs

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
