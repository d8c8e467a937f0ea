"""`python -m cli ARGS` is `evalflow ARGS` (for a checkout without the installed command)."""

from cli.main import app

app(prog_name="evalflow")
