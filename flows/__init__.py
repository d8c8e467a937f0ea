"""Prefect flows: `eval` (flows/eval.py) composes the tasks in tasks/."""
