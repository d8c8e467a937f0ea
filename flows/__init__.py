"""Prefect flows: `eval` (flows/eval.py) composes the tasks in tasks/."""

from errors.module_run import refuse_module_run

refuse_module_run(__name__)  # `python -m flows.X` runs nothing: say what to run instead
