"""`evalflow reports serve`: a store's reports served over HTTP on loopback, local and on S3 (moto), and
nothing else of the store: no listings, no cache/, no rollout files, no traversal."""

from __future__ import annotations

import http.client
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.record import IndexEntry
from core.store import Store
from tasks.reporting.index import update_index
from tasks.reporting.serve import make_server, report_path
from tests.tasks.conftest import serve_in_thread
from tests.tasks.test_s3_e2e import BUCKET, s3_endpoint, s3_options  # noqa: F401 (s3_endpoint: a fixture)

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    (root / "runs" / "r1").mkdir(parents=True)
    (root / "runs" / "r1" / "report.html").write_text("<html>report r1</html>")
    entry = {"run_id": "r1", "report": "runs/r1/report.html", "finished_at": "2025-01-01T00:00:00"}
    update_index(Store(str(root)), IndexEntry.model_validate(entry))
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


STORE_FILES = {  # path -> whether the report server serves it
    "index.html": True,
    "index.json": True,
    "static/plotly-9.9.9.min.js": True,
    "runs/r1/report.html": True,
    "runs/r1/report.md": True,
    "runs/r1/metrics.json": True,
    "runs/r1/rollouts.html": True,
    "sweeps/s1/report.html": True,
    "sweeps/s1/sweep.json": True,
    "cache/batches/abc.json": False,
    "cache/locks/abc.lock": False,
    "runs/r1/rollouts/gsm8k/batch-0000.parquet": False,
    "runs/r1/logs/vllm.log": False,
    "runs/r1/.report.html.1234.tmp": False,
    "index/entries/r1.json": False,
    "secret.txt": False,
}
TRICKS = [  # requests that must not reach cache/, a listing or anything outside the allowed pages
    "/cache/", "/cache", "/runs/", "/runs/r1/", "/runs/r1", "/static/", "/index/entries/",
    "/runs/r1/../../cache/batches/abc.json", "/runs/%2e%2e/cache/batches/abc.json",
    "/runs/r1%2F..%2F..%2Fcache%2Fbatches%2Fabc.json", "/runs%2Fr1%2Freport.html", "/runs/r1%2freport.html",
    "/runs/r1/report.html%00", "/runs/r1\\report.html", "/..%2Fsecret.txt", "/%ff", "//secret.txt",
    "/runs/r1/rollouts/gsm8k/batch-0000.parquet", "/./index.html", "/runs/./r1/report.html",
]  # fmt: skip


def fill(store: Store) -> None:
    for path in STORE_FILES:
        store.write_text(store.path(*path.split("/")), f"content of {path}")


def get(base: str, path: str) -> tuple[int, str, bytes]:
    """A raw GET (http.client sends the path exactly as given: no normalisation)."""
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.headers.get("Content-Type", ""), resp.read()
    finally:
        conn.close()


@pytest.fixture(params=["local", "s3"])
def served_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store holding STORE_FILES, local or on S3 (moto on loopback), served on loopback: its base URL."""
    if request.param == "local":
        store = Store(str(tmp_path / "store"))
    else:
        endpoint = request.getfixturevalue("s3_endpoint")
        store = Store(f"s3://{BUCKET}/served-{tmp_path.name}", s3_options(endpoint))
    fill(store)
    server = make_server(store, port=0)
    serve_in_thread(server)
    host, port = server.server_address[:2]
    yield f"http://{host}:{port}"
    server.shutdown()
    server.server_close()


def test_only_report_pages_and_assets_are_served(served_store: str) -> None:
    for path, allowed in STORE_FILES.items():
        status, _, body = get(served_store, "/" + path)
        if allowed:
            assert (status, body) == (200, f"content of {path}".encode()), path
        else:
            assert status == 404 and b"content of" not in body, path
    assert get(served_store, "/")[2] == b"content of index.html"
    assert get(served_store, "/static/plotly-9.9.9.min.js")[1] == "text/javascript; charset=utf-8"
    assert get(served_store, "/runs/r1/metrics.json")[1] == "application/json; charset=utf-8"
    assert get(served_store, "/runs/r1/report.md")[1] == "text/markdown; charset=utf-8"


def test_no_listing_traversal_or_encoded_slash_reaches_the_store(served_store: str) -> None:
    for path in TRICKS:
        status, _, body = get(served_store, path)
        assert status == 404, path
        assert b"content of" not in body and b"Directory listing" not in body and b"<li>" not in body, path


def test_report_path_rules() -> None:
    assert report_path("/runs/r1/report.html?x=1#top") == "runs/r1/report.html"
    assert report_path("/runs/r%31/report.html") == "runs/r1/report.html"  # decoded per segment
    assert report_path("/") == "index.html"
    assert [p for p in TRICKS if report_path(p) is not None] == []
