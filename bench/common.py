"""What the benchmarks share: a vLLM server to measure against (started here, or an external one)."""

import argparse
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from core.config import ModelConfig, ServerConfig
from tasks.checkpoints.prepare import prepare_model_impl
from tasks.runtime.venv import ensure_runtime
from tasks.serving.server import VLLMServer


def add_server_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base-url", help="an external server's /v1 URL (default: start the CPU default)")
    parser.add_argument("--model", help="the external server's model name")


@contextmanager
def server_from(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    """(base_url, model): the external server named on the command line, or SmolLM2 on a fresh vLLM
    in its default (compiled) mode, stopped on exit."""
    if args.base_url:
        yield args.base_url, args.model
        return
    prepared = prepare_model_impl(ModelConfig(), "auto")
    server = VLLMServer(ensure_runtime("auto"), prepared, ServerConfig(), Path(tempfile.mkdtemp()) / "vllm.log")
    try:
        yield server.start().base_url, prepared.served_name
    finally:
        server.stop()
