"""Operations: a local Prefect server, work pools, blocks, deployments and workers for evalflow."""
