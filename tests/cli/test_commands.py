"""`evalflow` commands that need neither a Prefect nor a vLLM server: help, plans, errors, prepare, serve.

Run and sweep plans and their one-line errors, model preparation (cached, planned, on S3), and a
store's reports served on loopback.
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from tests.cli.conftest import EVALFLOW, REPO_ROOT

COMMANDS = [
    [], ["run"], ["sweep"], ["prepare"], ["reports"], ["reports", "serve"], ["runtime"], ["demo"], ["local"],
    ["local", "server"], ["local", "deploy"], ["local", "blocks"], ["local", "worker"], ["local", "run"],
    ["local", "stop"],
]  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "evalflow")
def test_every_command_explains_itself(evalflow: Callable[..., Result], command: list[str]) -> None:
    result = evalflow(*command, "--help")
    assert result.exit_code == 0, result.output
    assert f"Usage: evalflow {' '.join(command)}".rstrip() in " ".join(result.stdout.split())


def test_run_dry_run_prints_the_plan(evalflow: Callable[..., Result]) -> None:
    result = evalflow("run", "--config", "configs/demo.yaml", "sampling.temperature=0.6", "--dry-run")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["config"]["sampling"]["temperature"] == 0.6  # the override, after the file
    (counted,) = plan["benchmarks"].values()
    assert (counted["prompts"], counted["repeats"]) == (12, 4)
    if plan["model"]["cache"] == "hit":  # the converted folder is here: its tokenizer counted every prompt
        assert counted["long_prompts"]["limit"] == 2048 - 256 and 100 < counted["long_prompts"]["longest"] < 400
        assert (counted["long_prompts"]["policy"], counted["long_prompts"]["skipped"]) == ("fail", 0)
    else:  # counted by the run, once the model is converted
        assert counted["long_prompts"] is None
    assert plan["rollouts"]["total"] == 48
    assert plan["model"]["kind"] == "gguf" and plan["model"]["served_name"]


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("sampling.temperature=-1", "sampling.temperature"),
        ("sampling.temprature=0.5", "sampling: unknown field 'temprature' (did you mean 'temperature'?)"),
        ("benchmarks.0.repeats=0", "benchmarks.0.repeats"),
        ("benchmarks.3.repeats=2", "'benchmarks.3.repeats'"),  # no such list element
        ("sampling", "'sampling'"),  # not key=value
    ],
)
def test_a_bad_override_fails_in_one_line_naming_the_field(
    evalflow: Callable[..., Result], override: str, field: str
) -> None:
    result = evalflow("run", "--config", "configs/demo.yaml", override, "--dry-run")
    assert result.exit_code == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("config error: ") and field in line, line


def test_a_missing_config_file_fails_in_one_line(evalflow: Callable[..., Result]) -> None:
    result = evalflow("run", "--config", "configs/none.yaml", "--dry-run")
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line == "config error: --config configs/none.yaml: no such file"


def test_sweep_dry_run_prints_one_plan_per_point(evalflow: Callable[..., Result]) -> None:
    result = evalflow("sweep", "--sweep", "sweeps/temperature.yaml", "--dry-run", "benchmarks.0.limit=5")
    assert result.exit_code == 0, result.output
    points = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted((p["values"]["sampling.temperature"], p["values"]["benchmarks.0.options.fewshot"]) for p in points) \
        == [(0.6, 0), (0.6, 4), (1.0, 0), (1.0, 4)]  # fmt: skip
    assert {p["rollouts"]["total"] for p in points} == {20}


def test_a_sweep_over_a_missing_key_fails_in_one_line(evalflow: Callable[..., Result], tmp_path: Path) -> None:
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("grid:\n  sampling.temprature: [0.5, 1.0]\n")
    result = evalflow("sweep", "--sweep", str(sweep), "--config", "configs/demo.yaml", "--dry-run")
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("config error: ") and "sampling.temprature" in line, line


def test_prepare_prints_the_cached_folder_as_the_last_line() -> None:
    """The default model is converted once per machine (the session's `smollm2` fixture does the same)."""
    out = subprocess.run([EVALFLOW, "prepare", "smollm2-135m-instruct"], capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    folder = Path(out.stdout.splitlines()[-1])
    assert folder.is_dir() and (folder / "config.json").is_file()
    assert "smollm2-135m-instruct (gguf)" in out.stderr  # what was done goes to stderr


def test_prepare_dry_run_plans_without_converting(evalflow: Callable[..., Result], tmp_path: Path) -> None:
    cached = evalflow("prepare", "smollm2-135m-instruct")
    assert cached.exit_code == 0, cached.output
    folder = cached.stdout.splitlines()[-1]

    result = evalflow("prepare", folder, "--dry-run")  # an HF folder is served where it is
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert (plan["kind"], plan["target"], plan["cache"]) == ("hf", folder, "n/a")
    assert plan["light_check"]["architecture"] == "LlamaForCausalLM"

    fresh = tmp_path / "cache"
    result = evalflow("prepare", "smollm2-135m-instruct", "--cache-dir", str(fresh), "--dtype", "float16", "--dry-run")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert (plan["kind"], plan["cache"], plan["convert"]["options"]["dtype"]) == ("gguf", "miss", "float16")
    assert Path(plan["target"]).parent == fresh and not Path(plan["target"]).exists()


def test_prepare_dry_run_of_an_s3_source_plans_the_download(evalflow: Callable[..., Result], tmp_path: Path) -> None:
    import s3fs
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        options = {"endpoint_url": f"http://{host}:{port}", "key": "testing", "secret": "testing"}
        fs = s3fs.S3FileSystem(**options)
        fs.mkdir("models")
        fs.pipe("models/run/model.gguf", b"GGUF" + bytes(60))
        args = [f"--option={key}={value}" for key, value in options.items()]
        result = evalflow("prepare", "s3://models/run/model.gguf", *args, "--cache-dir", str(tmp_path), "--dry-run")
    finally:
        server.stop()
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert (plan["kind"], plan["cache"]) == ("gguf", "unknown")
    assert plan["download"]["files"] == 1 and plan["download"]["bytes"] == 64 and not plan["download"]["cached"]
    assert "testing" not in result.stdout  # the credentials stay out of the plan
    assert list(tmp_path.iterdir()) == []  # nothing downloaded


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["smollm2-135m-instruct", "--force", "--skip"], "config error: --force (convert again) and --skip"),
        (["smollm2-135m-instruct", "--output-dir", "s3://bucket/x"], "config error: --output-dir: "),
        (["smollm2-135m-instruct", "--option", "endpoint"], "config error: --option "),
        (["/nonexistent/step_100", "--kind", "dcp"], "checkpoint error: source '/nonexistent/step_100'"),
    ],
)
def test_prepare_errors_are_one_line(evalflow: Callable[..., Result], args: list[str], message: str) -> None:
    result = evalflow("prepare", *args)
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(message), line


def test_reports_serve_answers_on_loopback(tmp_path: Path) -> None:
    store = tmp_path / "store"
    (store / "runs" / "r1").mkdir(parents=True)
    (store / "index.html").write_text('<html><a href="runs/r1/report.html">r1</a></html>')
    (store / "runs" / "r1" / "report.html").write_text("<html>report r1</html>")
    proc = subprocess.Popen([EVALFLOW, "reports", "serve", "--store", str(store), "--port", "0"],
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"(http://127\.0\.0\.1:\d+/)index\.html", line)
        assert match, line
        with urllib.request.urlopen(match.group(0), timeout=10) as resp:
            assert 'href="runs/r1/report.html"' in resp.read().decode()
        with urllib.request.urlopen(match.group(1) + "runs/r1/report.html", timeout=10) as resp:
            assert resp.read().decode() == "<html>report r1</html>"
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(match.group(1) + "runs/none/report.html", timeout=10)
        assert missing.value.code == 404
    finally:
        proc.terminate()
        proc.wait(timeout=10)
