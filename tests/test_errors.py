"""Every error evalflow raises on purpose is an `errors.EvalflowError` with a kind, keeps the builtin base
its callers catch, and ends a command in one line naming its kind, with exit status 2 for a bad input
(1 for a run that failed or a local operation that cannot go on)."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner, Result

from cli.common import EvalflowGroup
from core.overrides import OverrideError
from core.ports import free_port
from core.resolve import BlockNotFound
from core.schema import SchemaVersionError
from core.store import StoreError
from envs.base import DatasetError
from errors import HEADLINES, KINDS, ConfigError, EvalflowError
from flows.sweep import SweepError
from ops.api import ApiError
from ops.local import OpsError
from tasks.checkpoints.errors import CheckpointError
from tasks.collection.failures import RunFailed
from tasks.collection.lease import LockStoreError
from tasks.runtime.venv import RuntimeSetupError
from tasks.serving.preflight import EndpointError
from tasks.serving.server import ServerDiedError, ServerStartError
from tasks.serving.vllm_args import ServerArgsError
from tests.cli.conftest import REPO_ROOT

# class: (kind, the builtin base callers may catch it as)
ERRORS: dict[type[EvalflowError], tuple[str, type[Exception]]] = {
    ConfigError: ("config", ValueError),
    OverrideError: ("config", ValueError),
    SweepError: ("config", ValueError),
    BlockNotFound: ("config", ValueError),
    DatasetError: ("dataset", ValueError),
    CheckpointError: ("checkpoint", RuntimeError),
    StoreError: ("store", RuntimeError),
    LockStoreError: ("store", RuntimeError),
    SchemaVersionError: ("store", ValueError),
    EndpointError: ("server", ValueError),
    ServerArgsError: ("server", ValueError),
    ServerStartError: ("server", RuntimeError),
    ServerDiedError: ("server", RuntimeError),
    RuntimeSetupError: ("server", RuntimeError),
    RunFailed: ("run", Exception),
    ApiError: ("ops", RuntimeError),
    OpsError: ("ops", RuntimeError),
}


@pytest.mark.parametrize("cls", ERRORS, ids=lambda c: c.__name__)
def test_every_error_is_an_evalflow_error_of_its_kind(cls: type[EvalflowError]) -> None:
    kind, builtin = ERRORS[cls]
    assert issubclass(cls, EvalflowError) and cls.kind == kind
    assert issubclass(cls, builtin)  # `except ValueError` / `except RuntimeError` callers still catch it
    error = cls("line one\n  line two")
    assert error.one_line() == f"{HEADLINES[cls.kind]}: line one line two"
    assert error.exit_status == (1 if kind in ("run", "ops") else 2)


def test_every_kind_has_an_error_and_a_headline_naming_it() -> None:
    assert {kind for kind, _ in ERRORS.values()} == set(KINDS)
    assert all(kind in HEADLINES[kind] for kind in KINDS)


def test_an_error_class_must_say_its_kind() -> None:
    with pytest.raises(TypeError, match="kind"):

        class Kindless(EvalflowError):
            pass

    with pytest.raises(TypeError, match="kind"):

        class Misspelt(EvalflowError):
            kind = "datset"  # type: ignore[assignment]


def group_raising(error: Exception) -> typer.Typer:
    """A command line built as `evalflow` is, with one command that raises `error`."""
    app = typer.Typer(cls=EvalflowGroup, pretty_exceptions_enable=False)

    @app.command()
    def fails() -> None:
        raise error

    @app.command()
    def other() -> None:  # two commands: a group, as `evalflow` is
        pass

    return app


@pytest.mark.parametrize("cls", ERRORS, ids=lambda c: c.__name__)
def test_the_command_line_prints_any_of_them_in_one_line(cls: type[EvalflowError]) -> None:
    result = CliRunner().invoke(group_raising(cls("what went wrong:\nthe log tail")), ["fails"])
    assert result.stderr.splitlines() == [f"{HEADLINES[cls.kind]}: what went wrong: the log tail"]
    assert result.exit_code == cls("").exit_status
    assert result.stdout == ""


def test_other_errors_keep_their_traceback() -> None:
    result = CliRunner().invoke(group_raising(KeyError("bug")), ["fails"])
    assert isinstance(result.exception, KeyError)


@pytest.fixture
def evalflow(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Result]]:
    """`evalflow ARGS...` in this process, from the repo root, with the SIGTERM handler `run` installs undone."""
    from cli.main import app

    monkeypatch.chdir(REPO_ROOT)
    handler = signal.getsignal(signal.SIGTERM)
    yield lambda *args: CliRunner().invoke(app, list(args), prog_name="evalflow")
    signal.signal(signal.SIGTERM, handler)


def one_line(result: Result, status: int = 2) -> str:
    assert result.exit_code == status, result.output
    assert "Traceback" not in result.output
    (line,) = result.stderr.strip().splitlines()
    return line


def test_a_misspelt_config_key_is_a_config_error(evalflow: Callable[..., Result]) -> None:
    line = one_line(evalflow("run", "--dry-run", "benchmark=gsm8k"))
    assert line == "config error: unknown field 'benchmark' (did you mean 'benchmarks'?)"


@pytest.mark.parametrize(
    ("args", "starts"),
    [
        (["run", "--dry-run", "sampling"], "config error: override 'sampling' is not key.path=value"),
        (["run", "--dry-run", "sampling.temperature=["], "config error: override 'sampling.temperature=[': the value"),
        (["run", "--dry-run", "--config", "nope.yaml"], "config error: --config nope.yaml: no such file"),
        (["prepare", "x", "--option", "endpoint"], "config error: --option 'endpoint' is not KEY=VALUE"),
        (["prepare", "x", "--force", "--skip"], "config error: --force (convert again) and --skip (use as is)"),
        (["reports", "serve", "--option", "endpoint"], "config error: --option 'endpoint' is not KEY=VALUE"),
    ],
)
def test_bad_options_are_config_errors(evalflow: Callable[..., Result], args: list[str], starts: str) -> None:
    assert one_line(evalflow(*args)).startswith(starts)


def test_a_missing_dataset_file_is_a_dataset_error(evalflow: Callable[..., Result], tmp_path: Path) -> None:
    line = one_line(evalflow("run", "--dry-run", f"benchmarks.0.dataset={tmp_path}/nope.jsonl"))
    assert line.startswith(f"dataset error: {tmp_path}/nope.jsonl: dataset file not found"), line


def test_a_missing_checkpoint_is_a_checkpoint_error(evalflow: Callable[..., Result], tmp_path: Path) -> None:
    line = one_line(evalflow("prepare", f"{tmp_path}/step_1", "--kind", "dcp"))
    assert line.startswith(f"checkpoint error: source '{tmp_path}/step_1': no such file or folder"), line


def test_an_unreachable_store_is_a_store_error(
    evalflow: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    line = one_line(
        evalflow("run", "--dry-run", "store.url=s3://bucket/runs", f"store.storage_options.endpoint_url={endpoint}")
    )
    assert line.startswith("store error: the run store 's3://bucket/runs' is not writable"), line
    assert endpoint in line


def test_an_unreachable_endpoint_is_a_server_error(
    evalflow: Callable[..., Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREFECT_API_URL", f"http://127.0.0.1:{free_port()}/api")  # no temporary API: none is needed
    url = f"http://127.0.0.1:{free_port()}/v1"
    args = ["server.mode=external", f"server.base_url={url}", "benchmarks.0.limit=2", f"store.url={tmp_path}"]
    line = one_line(evalflow("run", *args))
    assert line.startswith(f"server error: server.base_url {url}: unreachable"), line


def test_a_local_operation_that_cannot_go_on_is_an_ops_error(
    evalflow: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    api = f"http://127.0.0.1:{free_port()}/api"
    monkeypatch.setenv("PREFECT_API_URL", api)
    line = one_line(evalflow("local", "server"), status=1)  # not a usage error: as before, status 1
    assert line == f"ops error: PREFECT_API_URL={api} does not answer: start that server, or unset the variable"
