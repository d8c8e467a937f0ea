"""The README's "Your own benchmark" walk-through, run line by line, so the README cannot drift from what works.

Every line of the ```bash block under "### Walk-through" runs, in order: `evalflow envs ...` and `evalflow run`
in this process (typer's CliRunner, from the repo root), `uv pip install -e examples/plugin` into a temporary
folder put on the path (the shared virtual environment is left as it is), `evalflow rescore RUN_ID` with the id
of the science_mc run. The runs go to the tests' shared vLLM server, through a counting proxy, at test scale.
"""

from __future__ import annotations

import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner, Result

from cli.main import app
from core.record import RunRecord
from envs import registry, task_kinds
from tasks.serving.server import Endpoint
from tests.conftest import REPO_ROOT
from tests.faultproxy import FaultProxy

pytestmark = pytest.mark.e2e

DOCS = REPO_ROOT / "docs"
PAGE, WALK_THROUGH = DOCS / "guides" / "own-benchmark.md", "## Walk-through"
PLUGIN = "examples/plugin"
PLUGIN_ENV = "echo_words"
# rows per benchmark at test scale; the shop's episodes (up to 6 turns of 96 tokens) are the slowest
LIMITS = {"examples/configs/shop.yaml": 3}
LIMIT = 4
# what the walk-through must keep showing (a trimmed block would pass with fewer commands)
EXPECTED_RUNS = {"examples/configs/science_mc.yaml", "examples/configs/shop.yaml", "examples/configs/plugin.yaml"}
RESCORED_CONFIG = "examples/configs/science_mc.yaml"  # RUN_ID in `evalflow rescore RUN_ID`: this config's run


def walk_through(page: Path = PAGE, sub: str = WALK_THROUGH) -> list[str]:
    """The command lines of the first ```bash block under the heading `sub` (a whole line) of the docs page `page`
    (comments and blank lines dropped, `#` comments cut)."""
    heading = re.search(rf"^{re.escape(sub)}\n", page.read_text(), flags=re.MULTILINE)
    assert heading, f"{page.relative_to(REPO_ROOT)} has no {sub!r} heading"
    after = page.read_text()[heading.end() :]
    block = re.search(r"^```bash\n(.*?)^```", after, flags=re.MULTILINE | re.DOTALL)
    assert block, f"no ```bash block under {sub!r}"
    lines = [" ".join(shlex.split(line, comments=True)) for line in block.group(1).splitlines()]
    return [line for line in lines if line]


class WalkThrough:
    """Runs the walk-through's lines against the shared server and a temporary store, and keeps what they made."""

    def __init__(self, endpoint: Endpoint, proxy: FaultProxy, tmp_path: Path) -> None:
        self.endpoint, self.proxy = endpoint, proxy
        self.store, self.target = tmp_path / "store", tmp_path / "plugin-target"
        self.plugin: bool | None = None  # installed (True), not installable offline (False), not yet asked (None)
        self.skipped: list[str] = []  # lines left out, with why
        self.runs: dict[str, RunRecord] = {}  # config -> its run's record
        self.seen: list[str] = []  # the kinds of line run

    def line(self, line: str) -> None:
        words = shlex.split(line)
        if words[:3] == ["uv", "pip", "install"] and words[3:] == ["-e", PLUGIN]:
            return self.install_plugin(line)
        if words[:3] == ["uv", "run", "evalflow"] and len(words) > 3:
            command, args = words[3], words[4:]
            if command == "envs" and args[:1] in (["list"], ["kinds"], ["check"]):
                return self.envs(line, args)
            if command == "run" and "--config" in args and "--dry-run" not in args:
                return self.run(line, args)
            if command == "rescore" and args[:1] == ["RUN_ID"]:
                return self.rescore(line, args[1:])
        pytest.fail(f"README walk-through line this test cannot run (teach it, or change the line): {line!r}")

    def invoke(self, line: str, args: list[str]) -> Result:
        result = CliRunner().invoke(app, args, prog_name="evalflow")
        detail = f"{line!r} exited {result.exit_code}:\n{result.output[-4000:]}"
        assert result.exit_code == 0, f"{detail}\n{result.exception!r}"
        return result

    # ---- the lines ----------------------------------------------------------------------------------------------

    def install_plugin(self, line: str) -> None:
        """`uv pip install -e examples/plugin`, into a folder of this test's instead of the shared venv."""
        self.seen.append("install")
        uv = shutil.which("uv")
        if uv is None:
            self.plugin = False
            self.skipped.append(f"{line!r}: no `uv` on PATH")
            return
        command = [uv, "pip", "install", "--offline", "--no-deps", "--python", sys.executable]
        command += ["--target", str(self.target), PLUGIN]
        done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:  # offline, the build backend (hatchling) must be in uv's cache: `uv sync` puts it
            self.plugin = False
            self.skipped.append(f"{line!r}: the offline build of {PLUGIN} failed ({done.stderr.strip()[-800:]})")
            return
        assert (self.target / "evalflow_plugin_demo" / "env.py").is_file(), done.stdout + done.stderr
        sys.path.insert(0, str(self.target))  # where the later in-process commands find it (restored at the end)
        registry._entry_points.cache_clear()  # entry points are read once per process
        task_kinds.clear_cache()
        self.plugin = True

    def envs(self, line: str, args: list[str]) -> None:
        self.seen.append(f"envs {args[0]}")
        result = self.invoke(line, ["envs", *args])
        out = result.stdout
        if args[0] == "list":
            assert re.search(r"^gsm8k  v\d+  single-turn  from evalflow ", out, flags=re.MULTILINE), out
            if self.plugin:
                assert re.search(rf"^{PLUGIN_ENV}  v1  single-turn  from evalflow-plugin-demo ", out, re.MULTILINE), out
            return
        if args[0] == "kinds":
            assert re.search(
                r"^scorer exact_match  from evalflow \(envs.task_score:ExactMatchScorer\)", out, re.MULTILINE
            )
            if self.plugin:
                assert re.search(r"^scorer within_percent  from evalflow-plugin-demo ", out, re.MULTILINE), out
            return
        assert re.search(r"^\S+ v\S+ \((single|multi)-turn, .*\): [1-9]\d* rows valid in ", out, re.MULTILINE), out
        assert "--- " in out, out  # the rendered prompts
        if "single-turn" in out.splitlines()[0]:  # a multi-turn env's references are no completions: not scored
            found = re.search(r"^(\d+)/(\d+) reference answers score as correct$", out, flags=re.MULTILINE)
            assert found and found.group(1) == found.group(2) != "0", out

    def run(self, line: str, args: list[str]) -> None:
        """`evalflow run --config X`: the README's command against the shared server and a temporary store, at
        test scale (the first rows only)."""
        self.seen.append("run")
        config = args[args.index("--config") + 1]
        if config == "examples/configs/plugin.yaml" and not self.plugin:
            self.skipped.append(f"{line!r}: needs the plugin, which could not be installed")
            return
        limit = LIMITS.get(config, LIMIT)
        overrides = [
            "server.mode=external",  # the config's managed-server fields (extra_args, ...) are then unused
            f"server.base_url={self.proxy.base_url}",
            f"model.served_name={self.endpoint.model}",
            f"model.source={self.endpoint.model}",
            f"store.url={self.store}",
            f"benchmarks.0.limit={limit}",
        ]
        before = self.proxy.counts.forwarded
        result = self.invoke(line, ["run", *args, *overrides])
        printed = dict(re.findall(r"^(\w+): (\S+)$", result.stdout, flags=re.MULTILINE))
        for kind in ("html", "markdown"):
            assert kind in printed and local(printed[kind]).is_file(), result.stdout
        record = RunRecord.model_validate_json((local(printed["html"]).parent / "metrics.json").read_text())
        (bench,) = record.benchmarks.values()
        repeats = yaml.safe_load((REPO_ROOT / config).read_text())["benchmarks"][0]["repeats"]
        assert bench.n_rollouts == limit * repeats, (config, bench.n_rollouts)
        assert record.run_info.status.state == "complete", record.run_info.status
        assert self.proxy.counts.forwarded > before  # generated by the server, not found in a cache
        if config == "examples/configs/plugin.yaml":
            assert list(record.benchmarks) == [PLUGIN_ENV]
        self.runs[config] = record

    def rescore(self, line: str, args: list[str]) -> None:
        """`evalflow rescore RUN_ID`: the science_mc run's id, and the test's store."""
        self.seen.append("rescore")
        assert RESCORED_CONFIG in self.runs, f"{line!r} comes before the run of {RESCORED_CONFIG} it rescores"
        source = self.runs[RESCORED_CONFIG]
        requests = sum(self.proxy.counts.paths.values())
        result = self.invoke(line, ["rescore", source.run_info.run_id, *args, "--store", str(self.store)])
        assert sum(self.proxy.counts.paths.values()) == requests, self.proxy.counts  # not one request
        new_id = re.search(rf"^rescored {source.run_info.run_id} as (\S+)$", result.stdout, re.MULTILINE)
        assert new_id, result.stdout
        record = RunRecord.model_validate_json((self.store / "runs" / new_id.group(1) / "metrics.json").read_text())
        assert record.run_info.rescored_from == source.run_info.run_id
        assert {k: b.n_rollouts for k, b in record.benchmarks.items()} == {
            k: b.n_rollouts for k, b in source.benchmarks.items()
        }


def local(url: str) -> Path:
    return Path(url.removeprefix("file://"))


def test_the_readme_walk_through_runs_as_written(
    endpoint: Endpoint,
    proxy: FaultProxy,
    prefect_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from prefect.settings import PREFECT_API_URL

    lines = walk_through()
    bad = [line for line in lines if not line.startswith(("uv run evalflow ", "uv pip install "))]
    assert not bad, f"every walk-through line is a `uv run evalflow` or `uv pip install` command: {bad}"
    monkeypatch.chdir(REPO_ROOT)  # the README's commands run from the repository root
    monkeypatch.setenv("PREFECT_API_URL", str(PREFECT_API_URL.value()))  # the lane's server, not a temporary one
    walk = WalkThrough(endpoint, proxy, tmp_path)
    saved_path, saved_modules = list(sys.path), set(sys.modules)
    sigterm = signal.getsignal(signal.SIGTERM)  # `evalflow run` installs its own handler
    try:
        for line in lines:
            walk.line(line)
    finally:
        signal.signal(signal.SIGTERM, sigterm)
        sys.path[:] = saved_path
        for name in set(sys.modules) - saved_modules:
            if name.split(".")[0] == "evalflow_plugin_demo":
                del sys.modules[name]
        registry._entry_points.cache_clear()
        task_kinds.clear_cache()
    assert set(walk.seen) >= {"install", "envs list", "envs kinds", "envs check", "run", "rescore"}, walk.seen
    ran = set(walk.runs) | {config for config in EXPECTED_RUNS if any(config in s for s in walk.skipped)}
    assert ran == EXPECTED_RUNS, (ran, lines)
    if walk.skipped:
        pytest.skip("left out of the README walk-through: " + "; ".join(walk.skipped))
