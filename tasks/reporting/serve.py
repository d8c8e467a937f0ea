"""Serve a run store's reports over HTTP for browsing: `evalflow reports serve --store URL [--port 8000]`.

One handler for local and object stores (s3://bucket/prefix): each request is read through the store's
fsspec filesystem, so index.html and every run's report open in a browser with their relative links
intact. Only report pages and what they link are served (`report_path`): index.html/index.json, each
run's pages (report.html, rollouts.html, ...), report.md and metrics.json, sweep pages and `static/`.
Everything else, `cache/` (batch records, partials, locks), rollout parquet files, logs, index entries
and any folder, is a 404, never a listing. Binds 127.0.0.1 by default; prints the URL of index.html,
then serves until interrupted.
"""

from __future__ import annotations

import mimetypes
import posixpath
import re
import urllib.parse
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from core.store import Store

_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"  # one path segment; never '.', '..' or hidden
# What the pages are and what they link: nothing else in a store is served.
REPORT_PATHS = re.compile(
    rf"""
      index\.(html|json)
    | static/{_NAME}\.(js|css)
    | runs/{_NAME}/({_NAME}\.html|report\.md|metrics\.json)
    | sweeps/{_NAME}/(report\.(html|md)|sweep\.json)
    """,
    re.VERBOSE,
)
CONTENT_TYPES = {".md": "text/markdown", ".json": "application/json", ".js": "text/javascript"}


def report_path(request_path: str) -> str | None:
    """The store path (relative to its root) that a request path may read, or None.

    Segments are decoded one by one, so an encoded slash (%2F) or backslash stays inside its segment
    and fails the pattern, as do '..', '.', empty segments, bad UTF-8 and anything not a report page or
    asset; "/" is index.html."""
    raw = urllib.parse.urlsplit(request_path).path
    if raw == "/":
        return "index.html"
    try:
        segments = [urllib.parse.unquote(s, errors="strict") for s in raw.removeprefix("/").split("/")]
    except UnicodeDecodeError:
        return None
    path = "/".join(segments)
    if any("/" in s or "\\" in s for s in segments) or not REPORT_PATHS.fullmatch(path):
        return None
    return path


def content_type(path: str) -> str:
    ctype = CONTENT_TYPES.get(posixpath.splitext(path)[1]) or mimetypes.guess_type(path)[0]
    ctype = ctype or "application/octet-stream"
    return f"{ctype}; charset=utf-8" if ctype.startswith("text/") or ctype.endswith("json") else ctype


class ReportHandler(BaseHTTPRequestHandler):
    """GET/HEAD of report pages and their assets, read through fsspec from `root`; 404 for the rest."""

    fs: Any = None
    root: str = ""

    def _send(self, body: bool) -> None:
        path = report_path(self.path)
        if path is None:
            self.send_error(HTTPStatus.NOT_FOUND, "not a report page")
            return
        try:
            data = self.fs.cat_file(posixpath.join(self.root, path))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            self.send_error(HTTPStatus.NOT_FOUND, "not in the store")
            return
        except Exception as exc:  # credentials, network: say so instead of dropping the connection
            self.send_error(HTTPStatus.BAD_GATEWAY, f"cannot read the store: {type(exc).__name__}")
            return
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", content_type(path))
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if body:
            self.wfile.write(data)

    def do_GET(self) -> None:
        self._send(body=True)

    def do_HEAD(self) -> None:
        self._send(body=False)


def make_server(store: Store, host: str = "127.0.0.1", port: int = 8000) -> ThreadingHTTPServer:
    """An HTTP server for the store's reports (not started); port 0 picks a free port."""
    fs, root = store.filesystem()
    handler = type("StoreHandler", (ReportHandler,), {"fs": fs, "root": root.rstrip("/")})
    return ThreadingHTTPServer((host, port), handler)


def index_url(server: ThreadingHTTPServer) -> str:
    host, port = server.server_address[:2]
    return f"http://{host}:{port}/index.html"
