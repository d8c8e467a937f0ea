"""Session-wide fixtures: an isolated Prefect home and API, and one real vLLM server (CPU, SmolLM2)
shared by every end-to-end test."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.config import ModelConfig, ServerConfig
from core.ports import free_port
from tasks.checkpoints.prepare import PreparedModel, prepare_model_impl
from tasks.runtime.venv import ensure_runtime
from tasks.serving.server import Endpoint, VLLMServer
from tests.faultproxy import FaultProxy
from tests.tiers import is_full_only, unmatched

REPO_ROOT = Path(__file__).resolve().parents[1]

# Fixtures that start (or are) a real vLLM server: a test using one is end-to-end whatever its module says.
SERVER_FIXTURES = {"vllm_server", "endpoint"}


# The fast lane's longest files in CI's tier (seconds on 2 cores, from --durations, setup included), handed
# out first under `--dist loadfile`: the longest-first order keeps a 70 s file from starting last and setting
# the lane's end.
LONGEST_FIRST = (
    "tests/checkpoints/test_ckpt_entry_points.py",  # 130
    "tests/checkpoints/test_ckpt_dcp.py",  # 75
    "tests/checkpoints/test_ckpt_s3.py",  # 70
    "tests/checkpoints/test_ckpt_bad_sources.py",  # 60
    "tests/tasks/test_lease_locks.py",  # 50
    "tests/sandbox/test_hostile_unprivileged.py",  # 39
    "tests/tasks/test_report_weight.py",  # 38
    "tests/tasks/test_server_args.py",  # 37
    "tests/cli/test_compare_command.py",  # 33
    "tests/cli/test_early_errors.py",  # 28
    "tests/checkpoints/test_ckpt_concurrency.py",  # 27
)


# The files that use the deployed cluster (tests/flows/conftest.py): its workers poll the API every second from
# its first use to the session's end, so the e2e lane runs them last, not beside every other test.
LAST = ("tests/flows/test_deployments_e2e.py", "tests/flows/test_shards_e2e.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Lanes: `-m "not e2e"` runs every test that needs no vLLM server; e2e is marked here, not by hand, and
    so is `full` (tests/tiers.py: what CI leaves to `make test-all`). The longest files go first, the deployed
    cluster's last (a stable sort: each file's tests keep their order)."""
    for item in items:
        if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)
        if is_full_only(item.nodeid):
            item.add_marker(pytest.mark.full)
    stale = unmatched([item.nodeid for item in items])
    if stale:
        raise pytest.UsageError(f"tests/tiers.py lists tests that no longer exist: {', '.join(stale)}")
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)} | {name: len(LONGEST_FIRST) + 1 for name in LAST}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(LONGEST_FIRST)))


@pytest.fixture(autouse=True)
def _evalflow_logger_restored() -> Iterator[None]:
    """A command run in-process (CliRunner) points the `evalflow` logger at stderr and stops it
    propagating: undone after each test, so a later test's caplog still sees evalflow's records."""
    logger = logging.getLogger("evalflow")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield
    logger.handlers[:], logger.level, logger.propagate = saved


def _skip_is_failure() -> bool:
    """CI installs everything the tests need (Chromium, root for the sandbox): a skip there is a defect."""
    return bool(os.environ.get("CI")) and not os.environ.get("EVALFLOW_ALLOW_SKIPS")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.skipped and _skip_is_failure() and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where nothing may be: {report.longrepr}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.skipped and _skip_is_failure():  # a module-level skip (allow_module_level=True)
        report.outcome = "failed"
        report.longrepr = f"module skipped in CI, where nothing may be: {report.longrepr}"


# Tests start several servers: eager mode starts in ~1 min instead of ~3 (no torch.compile warm-up)
# at the cost of throughput, which tests do not measure (bench/ does, in the default mode).
FAST_START = ["--enforce-eager"]
# constrained JSON (forced tool calls) without free whitespace: a 135M model pads it until max_tokens
NO_JSON_WHITESPACE = ["--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}']
SMOLLM2_TOOLS_TEMPLATE = "configs/chat_templates/smollm2_tools.jinja"


# The shared server's settings: with the cpu-smoke block's tool calling (hermes parser + SmolLM2's
# template with tools), requests without tools render and sample exactly as with the model's own template.
SHARED_SERVER = ServerConfig(
    extra_args=FAST_START + NO_JSON_WHITESPACE, tool_call_parser="hermes", chat_template=SMOLLM2_TOOLS_TEMPLATE
)
# `python -m tests.server` starts that server and prints this variable: a test run that has it set uses
# that server instead of starting one (one test file in seconds instead of a minute)
TEST_SERVER_VAR = "EVALFLOW_TEST_SERVER"


@pytest.fixture(scope="session")
def prefect_home(prefect_server: tuple[str, Path]) -> Iterator[Path]:
    """The session's Prefect API (the lane's one real server) and its home, where results are stored too:
    every flow run of the lane is recorded there, and a scan of the home covers the API's database."""
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_HOME,
        PREFECT_RESULTS_LOCAL_STORAGE_PATH,
        PREFECT_SERVER_ANALYTICS_ENABLED,
        temporary_settings,
    )

    api, home = prefect_server
    updates = {
        PREFECT_API_URL: api,
        PREFECT_HOME: str(home),
        PREFECT_RESULTS_LOCAL_STORAGE_PATH: str(home / "results"),
        PREFECT_SERVER_ANALYTICS_ENABLED: False,
    }
    from prefect.context import _temporary_global_settings_context, get_settings_context

    # as prefect_test_harness does, the settings become the global ones too (entered after the first, so
    # get_settings_context sees them): threads and copied contexts (a flow run in a thread) use them
    with temporary_settings(updates=updates), _temporary_global_settings_context(get_settings_context()):
        yield home


@pytest.fixture(scope="session")
def smollm2() -> PreparedModel:
    """The default model converted to an HF folder (cached across sessions by content)."""
    return prepare_model_impl(ModelConfig(), "auto")


@dataclass
class AttachedServer:
    """A server this session did not start (`EVALFLOW_TEST_SERVER`, from `python -m tests.server`):
    used as the shared one, never stopped."""

    base_url: str
    model: PreparedModel
    cfg: ServerConfig = field(default_factory=lambda: SHARED_SERVER)

    def alive(self) -> bool:
        try:
            return httpx.get(f"{self.base_url}/models", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False


@pytest.fixture(scope="session")
def vllm_server(
    smollm2: PreparedModel, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VLLMServer | AttachedServer]:
    """The lane's one shared vLLM server: every test that only needs "a server" uses this one."""
    attached = os.environ.get(TEST_SERVER_VAR)
    if attached:
        server = AttachedServer(attached.rstrip("/"), smollm2)
        assert server.alive(), f"{TEST_SERVER_VAR}={attached} does not answer: start it with python -m tests.server"
        yield server
        return
    runtime = ensure_runtime("auto")
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    started = VLLMServer(runtime, smollm2, SHARED_SERVER, log)
    started.start()
    yield started
    started.stop()


@pytest.fixture(scope="session")
def endpoint(vllm_server: VLLMServer | AttachedServer) -> Endpoint:
    return Endpoint(vllm_server.base_url, vllm_server.model.served_name)


@pytest.fixture
def proxy(endpoint: Endpoint) -> Iterator[FaultProxy]:
    """The fault-injecting proxy in front of the shared server (it counts what it forwards)."""
    proxy = FaultProxy(endpoint.base_url.removesuffix("/v1")).start()
    yield proxy
    proxy.stop()


@contextlib.contextmanager
def moto_s3(*buckets: str) -> Iterator[str]:
    """A moto S3 server on loopback with `buckets` made (credentials: testing/testing); yields its URL."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        url = f"http://{host}:{port}"
        client = boto3.client(
            "s3",
            endpoint_url=url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        for bucket in buckets:
            client.create_bucket(Bucket=bucket)
        yield url
    finally:
        server.stop()


def group_alive(pgid: int) -> bool:
    """Whether any process of the group (the server runs in its own) is still there."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.25) -> Any:
    """Poll until `predicate` returns something truthy; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A real `prefect server start` on loopback with its own home and database: (API URL, home)."""
    home = tmp_path_factory.mktemp("prefect-server-home")
    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    log = (home / "server.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    api = f"http://127.0.0.1:{port}/api"

    def healthy() -> bool:
        assert proc.poll() is None, (home / "server.log").read_text()[-2000:]
        try:
            return httpx.get(f"{api}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(healthy, 180, "prefect server")
    yield api, home
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(30)
