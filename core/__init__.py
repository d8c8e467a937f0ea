"""The bottom layer above envs: config, store, schema, secrets, logs; importing it applies the Prefect
settings every evalflow process runs with (core.prefect_env)."""

from core import prefect_env
from errors.module_run import refuse_module_run

prefect_env.apply()

refuse_module_run(__name__)  # `python -m core.X` runs nothing: say what to run instead
