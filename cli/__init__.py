"""The `evalflow` command line (typer): run, prepare, sweep, reports, runtime, demo."""
