"""Checkpoint conversion throughput: MB/s of source bytes for a DCP checkpoint and a GGUF file, next
to a plain copy (`shutil.copyfile`) of the same bytes on the same disk, measured in one run.

    uv run python -m bench.conversion_throughput [--repeats 2] [--workdir DIR]

DCP: the default model (SmolLM2-135M) written as NeMo RL saves it (fp32, two shard files, the tied
lm_head present: 652 MB). GGUF: the default model's Q4_1 file. Each conversion runs end to end as
`prepare_model_impl` runs it (force=True into a scratch cache): the runtime subprocess and its
torch/transformers imports, reading, casting or dequantizing, writing, validating, fingerprinting.
The converter's own split is shown as well. The copy reads what the conversion just read, so both
see a warm page cache; a cache hit (the same request again) is timed last.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from core.config import ModelConfig
from tasks.checkpoints.hashing import MARKER
from tasks.checkpoints.prepare import prepare_model_impl
from tasks.checkpoints.results import DcpExport
from tasks.checkpoints.runner import run_script
from tasks.checkpoints.sources import find_default_gguf
from tasks.runtime.venv import ensure_runtime


def copy_seconds(files: list[Path], dst: Path) -> float:
    dst.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    for i, file in enumerate(files):
        shutil.copyfile(file, dst / f"{i}-{file.name}")
    seconds = time.perf_counter() - started
    shutil.rmtree(dst)
    return seconds


def measure(label: str, source: Path, files: list[Path], work: Path, repeats: int) -> dict:
    size = sum(f.stat().st_size for f in files)
    cfg = ModelConfig(source=str(source), cache_dir=str(work / "cache"), force=True)
    converts, inner = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        model = prepare_model_impl(cfg)
        converts.append(time.perf_counter() - started)
        inner.append(json.loads((Path(model.path) / MARKER).read_text())["converter"]["seconds"])
    copies = [copy_seconds(files, work / "copy") for _ in range(repeats)]
    started = time.perf_counter()
    hit = prepare_model_impl(cfg.model_copy(update={"force": False}))
    hit_ms = (time.perf_counter() - started) * 1000
    assert hit.cache_hit
    convert, copy = statistics.median(converts), statistics.median(copies)
    return {"label": label, "mb": size / 1e6, "convert": convert, "copy": copy, "inner": inner[-1], "hit_ms": hit_ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=1, help="conversions and copies per source (median)")
    parser.add_argument("--workdir", help="scratch folder (default: a temporary one); its disk is measured")
    args = parser.parse_args()

    runtime = ensure_runtime("auto")
    original = prepare_model_impl(ModelConfig())  # the default model as an HF folder (cached)
    work = Path(tempfile.mkdtemp(prefix="bench-convert-", dir=args.workdir))
    try:
        step = work / "run" / "step_1"
        export = [original.path, str(step), "--files", "2"]
        run_script(runtime, "hf_to_dcp.py", export, "writing the DCP checkpoint", DcpExport)
        weights = sorted((step / "policy" / "weights").iterdir())
        gguf = find_default_gguf(runtime)
        rows = [
            measure("DCP fp32 -> bf16 safetensors", step, weights, work, args.repeats),
            measure("GGUF Q4_1 -> bf16 safetensors", gguf, [gguf], work, args.repeats),
        ]
    finally:
        shutil.rmtree(work, ignore_errors=True)

    disk = args.workdir or tempfile.gettempdir()
    print(f"\nconversion throughput in MB/s of source bytes (median of {args.repeats}; scratch disk: {disk})")
    head = f"{'source':32} {'MB':>7} {'convert s':>10} {'MB/s':>7} {'copy s':>7} {'MB/s':>7} {'convert/copy':>12}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['label']:32} {r['mb']:7.1f} {r['convert']:10.2f} {r['mb'] / r['convert']:7.1f} "
            f"{r['copy']:7.2f} {r['mb'] / r['copy']:7.0f} {r['convert'] / r['copy']:11.0f}x"
        )
    print("\nconverter's own split (s) and a cache hit (the same request again):")
    for r in rows:
        print(f"  {r['label']:32} {json.dumps(r['inner'])}  hit {r['hit_ms']:.1f} ms")


if __name__ == "__main__":
    main()
