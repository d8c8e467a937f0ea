"""The Prefect settings of every process evalflow starts or runs in, applied when `core` is imported.

Analytics stay off: a Prefect server (the ephemeral one a run without PREFECT_API_URL starts
included) reports usage to an outside host unless told not to, and a run must not reach out. Set in
os.environ, so the ephemeral API server and every other child process inherit them.
"""

from __future__ import annotations

import os

PREFECT_ENV = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_CLOUD_ENABLE_ORCHESTRATION_TELEMETRY": "false",
    "DO_NOT_TRACK": "1",
}

# The temporary API of a run without PREFECT_API_URL (ops/api.py) runs no automations: nobody can
# define one on it, and its trigger services would only take CPU from the run.
SERVER_ENV = {"PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED": "false"}


def apply() -> None:
    """Force the settings above (a user's environment cannot turn analytics back on for our runs)."""
    os.environ.update(PREFECT_ENV)
    # On a busy 2-core machine an ephemeral API takes longer than Prefect's default start-up timeout.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
