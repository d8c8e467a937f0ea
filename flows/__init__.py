"""Prefect flows: `eval` (flows/eval.py) composes the tasks in tasks/."""

import os

# Without a Prefect server, each process starts an ephemeral one; on a busy 2-core machine that
# takes longer than Prefect's default start-up timeout. Set before Prefect reads its settings.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
