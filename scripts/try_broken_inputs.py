"""Try evalflow as a new user with broken inputs: each case runs `evalflow ...` from a scratch working
directory (not the repo root) and prints a markdown table of exit status, seconds and the last line of
stderr. Every case must end with exit 2 (a usage error) and one line naming what to fix.

    uv run python scripts/try_broken_inputs.py [--only SUBSTRING] [--keep]

Builds its inputs in a temporary folder: cuts of the shipped SmolLM2 GGUF, a 2-layer HF folder and DCP
checkpoints written from it (the vLLM runtime must be installed: `make runtime`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from core.config import ModelConfig  # noqa: E402
from tasks.checkpoints.prepare import prepare_model_impl  # noqa: E402
from tasks.checkpoints.sources import find_default_gguf  # noqa: E402
from tasks.runtime.venv import ensure_runtime  # noqa: E402
from tests.checkpoints.conftest import build_dcp, cut_model  # noqa: E402

EVALFLOW = str(Path(sys.executable).with_name("evalflow"))


def flip(path: Path, offset: int) -> None:
    with path.open("r+b") as fh:
        fh.seek(offset % path.stat().st_size)
        data = fh.read(32)
        fh.seek(offset % path.stat().st_size)
        fh.write(bytes(b ^ 0xFF for b in data))


def build(work: Path) -> None:
    """The broken inputs, in `work` (the commands' working directory)."""
    runtime = ensure_runtime("auto")
    gguf = find_default_gguf(runtime)
    data = gguf.read_bytes()
    (work / "half.gguf").write_bytes(data[: len(data) // 2])
    (work / "head.gguf").write_bytes(data[:4096])
    (work / "empty.gguf").write_bytes(b"")
    (work / "page.gguf").write_bytes(b"<html>404 Not Found</html>")
    at = data.index(b"general.architecture") + len(b"general.architecture") + 12
    (work / "other-arch.gguf").write_bytes(data[:at] + b"lxama" + data[at + 5 :])
    (work / "notes.txt").write_text("not a model")
    (work / "random").mkdir()
    (work / "random" / "readme.md").write_text("hello")

    smollm2 = prepare_model_impl(ModelConfig(), "auto")
    base = cut_model(runtime, Path(smollm2.path), work / "hf-2l", 2)
    for name, change in {
        "hf-no-config": lambda f: (f / "config.json").unlink(),
        "hf-cut-weights": lambda f: os.truncate(f / "model.safetensors", (f / "model.safetensors").stat().st_size // 2),
        "hf-bad-index": lambda f: (f / "model.safetensors.index.json").write_text(
            json.dumps({"weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors"}})
        ),
        "hf-foo-arch": lambda f: (f / "config.json").write_text(
            json.dumps(
                {**json.loads((base / "config.json").read_text()), "architectures": ["FooLM"], "model_type": "foo"}
            )
        ),
        "hf-no-tokenizer": lambda f: [p.unlink() for p in f.glob("tokenizer*")],
    }.items():
        shutil.copytree(base, work / name)
        change(work / name)
    build_dcp(runtime, str(base), work / "run-a" / "step_1", "nemo-rl", files=2)
    build_dcp(runtime, str(base), work / "run-b" / "step_1", "flat", model_name="HuggingFaceTB/SmolLM2-135M-Instruct")
    shutil.copytree(work / "run-a", work / "run-corrupt")
    flip(work / "run-corrupt/step_1/policy/weights/__0_1.distcp", 200_000_000)
    shutil.copytree(work / "run-a", work / "run-meta")
    flip(work / "run-meta/step_1/policy/weights/.metadata", 0)
    shutil.copytree(work / "run-a", work / "run-missing")
    (work / "run-missing/step_1/policy/weights/__0_1.distcp").unlink()
    (work / "taken").mkdir()
    (work / "taken" / "mine.txt").write_text("someone's files")

    rows = [{"id": f"q{i}", "question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(1, 6)]
    rows[2]["question"] = " ".join(["How many apples are left if you eat one of them?"] * 400)
    (work / "long.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (work / "bad.jsonl").write_text('{"id": "q1", "question": "1+1?", "answer": "2"}\n{"id": "q2", "question": \n')
    (work / "noanswer.jsonl").write_text('{"id": "q1", "question": "1+1?"}\n')
    (work / "bad.yaml").write_text("model:\n  source: [unclosed\n")
    (work / "typo.yaml").write_text("benchmark:\n  - name: gsm8k\n")


CASES: list[tuple[str, list[str]]] = [
    ("GGUF cut in half", ["prepare", "half.gguf"]),
    ("GGUF cut inside its header", ["prepare", "head.gguf", "--dry-run"]),
    ("empty .gguf", ["prepare", "empty.gguf"]),
    ("an HTML page saved as .gguf", ["prepare", "page.gguf"]),
    ("GGUF of an unknown architecture", ["prepare", "other-arch.gguf"]),
    ("GGUF cut in half, dry run of a run", ["run", "--dry-run", "model.source=half.gguf"]),
    ("GGUF cut in half, a run", ["run", "model.source=half.gguf", "benchmarks.0.limit=1"]),
    ("unknown GGUF architecture, dry run of a run", ["run", "--dry-run", "model.source=other-arch.gguf"]),
    ("a text file as the source", ["prepare", "notes.txt"]),
    ("a folder with no model", ["prepare", "random"]),
    ("a relative path that does not exist", ["prepare", "./nope"]),
    ("a path below a file", ["prepare", "notes.txt/model"]),
    ("HF folder without config.json", ["prepare", "hf-no-config"]),
    ("HF folder with its weights cut in half", ["prepare", "hf-cut-weights"]),
    ("HF folder whose index names a shard it lacks", ["prepare", "hf-bad-index"]),
    ("HF folder of an unknown architecture", ["prepare", "hf-foo-arch", "--dry-run"]),
    ("HF folder without a tokenizer", ["prepare", "hf-no-tokenizer"]),
    ("DCP whose config names a hub model (offline)", ["prepare", "run-b/step_1"]),
    ("DCP with --config-path that does not exist", ["prepare", "run-b/step_1", "--config-path", "nope/"]),
    ("DCP with a corrupt shard (same size)", ["prepare", "run-corrupt/step_1"]),
    ("DCP with a corrupt shard, a run", ["run", "model.source=run-corrupt/step_1", "benchmarks.0.limit=1"]),
    ("DCP with a corrupt .metadata", ["prepare", "run-meta/step_1"]),
    ("DCP missing a shard", ["prepare", "run-missing/step_1"]),
    ("--output-dir holding someone's files", ["prepare", "run-a/step_1", "--output-dir", "taken"]),
    ("--output-dir on S3", ["prepare", "run-a/step_1", "--output-dir", "s3://bucket/x"]),
    ("--force with --skip", ["prepare", "run-a/step_1", "--force", "--skip"]),
    ("--skip on a DCP", ["prepare", "run-a/step_1", "--skip"]),
    ("an unknown --dtype", ["prepare", "run-a/step_1", "--dtype", "int8"]),
    ("a malformed --option", ["prepare", "s3://bucket/step_1", "--option", "endpoint"]),
    (
        "an S3 endpoint that does not answer",
        [
            "prepare",
            "s3://b/step_1",
            "--option",
            "endpoint_url=http://127.0.0.1:9",
            "--option",
            "key=k",
            "--option",
            "secret=s",
        ],
    ),
    ("a top-level key misspelt", ["run", "--dry-run", "benchmark=gsm8k"]),
    ("a top-level key misspelt, in a file", ["run", "--dry-run", "--config", "typo.yaml"]),
    ("a model key misspelt", ["run", "--dry-run", "model.sorce=x.gguf"]),
    ("a config file that is not YAML", ["run", "--dry-run", "--config", "bad.yaml"]),
    ("a config file that does not exist", ["run", "--dry-run", "--config", "nope.yaml"]),
    ("a prompt longer than the context", ["run", "--dry-run", "model.source=hf-2l", "benchmarks.0.dataset=long.jsonl"]),
    ("on_long_prompt not a choice", ["run", "--dry-run", "benchmarks.0.on_long_prompt=truncate"]),
    ("a dataset line that is not JSON", ["run", "--dry-run", "benchmarks.0.dataset=bad.jsonl"]),
    ("a dataset row without its answer", ["run", "--dry-run", "benchmarks.0.dataset=noanswer.jsonl"]),
    ("a dataset that does not exist", ["run", "--dry-run", "benchmarks.0.dataset=nope.jsonl"]),
    ("a store URL of an unknown protocol", ["run", "--dry-run", "store.url=s4://bucket/runs"]),
    ("model.cache_dir on S3", ["run", "--dry-run", "model.cache_dir=s3://bucket/c"]),
    ("server.max_model_len below 128", ["run", "--dry-run", "server.max_model_len=64"]),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run the cases whose name contains this")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="evalflow-broken-"))
    work = scratch / "work"
    work.mkdir()
    build(work)
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL",)}
    env.update(HF_HUB_OFFLINE="1", EVALFLOW_CHECKPOINT_CACHE=str(scratch / "cache"))
    print("| # | input | command | exit | s | last line of stderr |")
    print("|---:|---|---|---:|---:|---|")
    bad = 0
    for i, (name, argv) in enumerate(c for c in CASES if args.only in c[0]):
        started = time.perf_counter()
        done = subprocess.run([EVALFLOW, *argv], cwd=work, env=env, capture_output=True, text=True, timeout=600)
        seconds = time.perf_counter() - started
        lines = done.stderr.strip().splitlines()
        last = (lines[-1] if lines else "").replace(str(work) + "/", "").replace("|", "\\|")
        traceback = "Traceback" in done.stderr
        bad += done.returncode != 2 or traceback
        flag = " **traceback**" if traceback else ""
        print(f"| {i + 1} | {name} | `evalflow {' '.join(argv)}` | {done.returncode} | {seconds:.1f} | {last}{flag} |")
    print(
        f"\n{bad} cases did not end with exit 2 and one line" if bad else "\nevery case: exit 2, one line, no traceback"
    )
    if not args.keep:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
