"""A free TCP port on the loopback interface: for a server evalflow starts (vLLM, the temporary Prefect
API), a simulated replica, or a test's server."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now, chosen by the OS; whoever binds it next gets it (a race that the
    callers' servers fail on loudly, never silently)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
