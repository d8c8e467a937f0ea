"""Example evalflow plugin: its environment is in `env`, found by evalflow through the `evalflow.envs` entry point."""
