"""Operations: a local Prefect server, work pools, blocks, deployments and workers for evalflow."""

from errors.module_run import refuse_module_run

refuse_module_run(__name__)  # `python -m ops.X` runs nothing: say what to run instead
