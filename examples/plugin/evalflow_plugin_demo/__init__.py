"""Example evalflow plugin: an environment (`env`, entry point group `evalflow.envs`) and a scorer kind for task
files (`scorers`, group `evalflow.scorers`)."""
