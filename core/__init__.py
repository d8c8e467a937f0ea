"""The bottom layer above envs: config, store, schema, secrets, logs; importing it applies the Prefect
settings every evalflow process runs with (core.prefect_env)."""

from core import prefect_env

prefect_env.apply()
