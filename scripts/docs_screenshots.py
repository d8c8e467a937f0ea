"""The documentation's pictures, made by the code: a small real evaluation, then headless Chromium.

A three-step training run of the default CPU model (SmolLM2-135M-Instruct; steps 200 and 300 are step 100 with
noise added to every weight, a stand-in for training) is evaluated by `evalflow watch --once` on the
vLLM CPU server, recorded on a Prefect server of its own. Then Chromium (Debian's, through playwright)
takes 1400-px pictures of the last step's report, its rollout browser, the training curve and the Prefect UI's
page of its flow run, written to docs/images/. Everything else lives in a temporary folder, removed at the end.

    uv run python scripts/docs_screenshots.py                 # ~5 min on 2 cores
    uv run python scripts/docs_screenshots.py --site site     # also the built docs' home page and one guide
    uv run python scripts/docs_screenshots.py --site site --no-eval   # only those two (test-artifacts/)

Rerun it after a change to the reports; never edit the pictures by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
WIDTH, HEIGHT = 1400, 1000
STEPS = (100, 200, 300)
NOISE_PER_STEP = 0.03  # times each tensor's standard deviation, per step after the first

NOISE = """
import sys
import torch
from safetensors.torch import load_file, save_file
src, dst, scale = sys.argv[1], sys.argv[2], float(sys.argv[3])
torch.manual_seed(0)
tensors = {k: (v.float() + torch.randn_like(v.float()) * v.float().std() * scale).to(v.dtype)
           for k, v in load_file(src).items()}
save_file(tensors, dst, metadata={"format": "pt"})
"""


def say(message: str) -> None:
    print(f"docs_screenshots: {message}", flush=True)


def evalflow(*args: str, env: dict[str, str], cwd: Path = REPO) -> str:
    """Run the installed `evalflow` command; its output is shown, its stdout returned."""
    exe = Path(sys.executable).with_name("evalflow")
    done = subprocess.run([str(exe), *args], cwd=cwd, env=env, stdout=subprocess.PIPE, text=True)
    if done.returncode:
        raise SystemExit(f"`evalflow {' '.join(args)}` failed ({done.returncode})")
    return done.stdout


@contextlib.contextmanager
def prefect_server(home: Path) -> Iterator[str]:
    """`prefect server start` on a free loopback port with its own home; stopped on exit."""
    from core.ports import free_port
    from core.prefect_env import PREFECT_ENV

    port = free_port()
    # the UI asks the API at PREFECT_UI_API_URL, which is 127.0.0.1:4200 unless set
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_UI_API_URL": f"http://127.0.0.1:{port}/api", **PREFECT_ENV}
    env.pop("PREFECT_API_URL", None)
    with (home / "server.log").open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                                 "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
    api = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + 180
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{api}/health", timeout=2).status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the Prefect server did not start; its log: {home / 'server.log'}")
            time.sleep(0.5)
        yield api
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def training_run(work: Path, env: dict[str, str]) -> Path:
    """run/checkpoint-100 (the model as prepared), then checkpoint-200 and -300 (its weights plus more noise)."""
    from tasks.runtime.venv import ensure_runtime

    folder = Path(evalflow("prepare", "smollm2-135m-instruct", env=env).strip().splitlines()[-1])
    run = work / "run"
    for step in STEPS:
        dst = run / f"checkpoint-{step}"
        dst.mkdir(parents=True)
        for file in folder.iterdir():
            if file.is_file() and not file.name.startswith("evalflow-"):
                os.link(file, dst / file.name)
    runtime = ensure_runtime("auto")
    for i, step in enumerate(STEPS[1:], start=1):
        weights = run / f"checkpoint-{step}" / "model.safetensors"
        weights.unlink()  # a hard link to the prepared folder's file: written anew, never changed in place
        scale = str(NOISE_PER_STEP * i)
        subprocess.run([str(runtime.python), "-c", NOISE, str(folder / "model.safetensors"), str(weights), scale],
                       check=True, env=runtime.env())  # fmt: skip
    return run


def write_config(work: Path, run: Path) -> Path:
    config = {
        "run_name": "docs",
        "model": {"source": str(run), "steps": "all", "settle_s": 0, "training_run": "smollm2-with-noise"},
        "server": {"mode": "managed", "extra_args": ["--enforce-eager"]},
        "sampling": {"temperature": 0.7, "top_p": 0.95, "max_tokens": 192, "seed": 1234},
        "benchmarks": [
            {"task": str(REPO / "examples/tasks/science_mc.yaml"), "limit": 12, "repeats": 4},
            {"name": "gsm8k", "limit": 8, "repeats": 4},
        ],
        "collection": {"batch_size": 16},
        "store": {"url": str(work / "store")},
    }
    path = work / "config.yaml"
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML
    return path


def shoot(pages: dict[str, str], out: Path, full_page: bool = False) -> None:
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        for name, url in pages.items():
            page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
            page.goto(url, wait_until="networkidle", timeout=60_000)
            page.wait_for_timeout(4_000)  # plotly and the Prefect UI draw after load
            page.screenshot(path=str(out / name), full_page=full_page)
            say(f"{out / name}: {url}")
            page.close()
        browser.close()


def _site(site: Path | None) -> None:
    """The built docs' home page and one guide, into test-artifacts/ (for notes and reviews, not the docs)."""
    if site is None:
        raise SystemExit("--no-eval needs --site (a folder `make docs` built)")
    site = site.resolve()
    shoot({"docs-home.png": (site / "index.html").as_uri(),
           "docs-guide.png": (site / "guides" / "training-runs" / "index.html").as_uri()},
          REPO / "test-artifacts")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images", help="where the pictures go")
    parser.add_argument("--site", type=Path, default=None, help="also shoot the built docs' home and a guide here")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (reports, logs)")
    parser.add_argument("--no-eval", action="store_true", help="no evaluation, no docs/images: only --site's pages")
    args = parser.parse_args()
    if not CHROMIUM.exists():
        raise SystemExit(f"headless pictures need Debian's chromium at {CHROMIUM}")
    if args.no_eval:
        return _site(args.site)
    out = args.out.resolve()
    work = Path(tempfile.mkdtemp(prefix="evalflow-docs-"))
    try:
        (work / "prefect").mkdir()
        with prefect_server(work / "prefect") as api:
            env = {**os.environ, "PREFECT_API_URL": api, "PREFECT_HOME": str(work / "prefect")}
            say(f"Prefect server {api}; work folder {work}")
            run = training_run(work, env)
            config = write_config(work, run)
            say(f"evaluating {run} (steps {', '.join(map(str, STEPS))})")
            evalflow("watch", "--once", "--config", str(config), env=env)
            entries: list[dict[str, Any]] = json.loads((work / "store" / "index.json").read_text())
            last = max((e for e in entries if e.get("step") == STEPS[-1]), key=lambda e: e["finished_at"])
            store = work / "store"
            curve = next(store.glob("training/*/index.html"))
            ui = api.removesuffix("/api")
            shoot(
                {
                    "report.png": (store / last["report"]).as_uri(),
                    "browser.png": (store / last["report"]).with_name("rollouts.html").as_uri(),
                    "training-curve.png": curve.as_uri(),
                    "prefect-flow-run.png": f"{ui}/runs/flow-run/{last['flow_run_id']}",
                },
                out,
            )
        if args.site is not None:
            _site(args.site)
    finally:
        if args.keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
