"""`evalflow reports serve`: a local store served over HTTP on loopback (S3: test_s3_e2e.py)."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from core.store import Store
from tasks.reporting.index import update_index

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    (root / "runs" / "r1").mkdir(parents=True)
    (root / "runs" / "r1" / "report.html").write_text("<html>report r1</html>")
    entry = {"run_id": "r1", "report": "runs/r1/report.html", "finished_at": "2025-01-01T00:00:00"}
    update_index(Store(str(root)), entry)
    return root


def test_serve_a_local_store_from_the_command_line(store_dir: Path) -> None:
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("evalflow")), "reports", "serve", "--store", str(store_dir), "--port", "0"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        match = re.search(r"(http://127\.0\.0\.1:\d+/index\.html)", line)
        assert match, line
        url = match.group(1)
        with urllib.request.urlopen(url, timeout=10) as resp:
            page = resp.read().decode()
        assert "evalflow runs" in page and 'href="runs/r1/report.html"' in page
        with urllib.request.urlopen(url.replace("index.html", "runs/r1/report.html"), timeout=10) as resp:
            assert resp.read().decode() == "<html>report r1</html>"
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(url.replace("index.html", "runs/none/report.html"), timeout=10)
        assert missing.value.code == 404
    finally:
        proc.terminate()
        proc.wait(timeout=10)
