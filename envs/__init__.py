"""Benchmark environments: prompts, dataset rows and scoring, as plain Python (no Prefect import)."""

from envs.base import DatasetError, Env, Score, SingleTurnEnv
from envs.datasets import load_rows, rows_hash
from envs.registry import ENVS, get_env

__all__ = ["ENVS", "DatasetError", "Env", "Score", "SingleTurnEnv", "get_env", "load_rows", "rows_hash"]
