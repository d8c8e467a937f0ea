"""The e2e lane's shared vLLM server, started once for many test runs: `python -m tests.server` (or
`make test-server`) starts it with the tests' settings and prints the variable that makes a test run use
it instead of starting its own; Ctrl-C (or SIGTERM) stops it.

    make test-server                      # in one terminal: prints export EVALFLOW_TEST_SERVER=...
    EVALFLOW_TEST_SERVER=http://127.0.0.1:PORT/v1 uv run pytest tests/flows/test_eval_e2e.py

Tests that need a server of their own (a managed start, a killed server, shards) still start theirs.
"""

from __future__ import annotations

import argparse
import signal
import tempfile
import threading
from pathlib import Path

from core.config import ModelConfig
from tasks.checkpoints.prepare import prepare_model_impl
from tasks.runtime.venv import ensure_runtime
from tasks.serving.server import VLLMServer
from tests.conftest import SHARED_SERVER, TEST_SERVER_VAR


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=None, help="port to serve on (default: a free one)")
    args = parser.parse_args()
    model = prepare_model_impl(ModelConfig(), "auto")
    log = Path(tempfile.mkdtemp(prefix="evalflow-test-server-")) / "vllm.log"
    server = VLLMServer(ensure_runtime("auto"), model, SHARED_SERVER, log)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    server.start(args.port)
    try:
        print(f"export {TEST_SERVER_VAR}={server.base_url}", flush=True)
        print(f"# log: {log}; Ctrl-C stops the server", flush=True)
        while not stop.wait(1.0):
            if not server.alive():
                raise SystemExit(f"the server exited; its log: {log}")
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
