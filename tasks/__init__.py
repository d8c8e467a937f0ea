"""The pipeline's stages as Prefect tasks: runtime, checkpoints, serving, collection, analysis, reporting."""

from errors.module_run import refuse_module_run

refuse_module_run(__name__)  # `python -m tasks.X` runs nothing: say what to run instead
