"""Serve a run store over HTTP for browsing: `evalflow reports serve --store URL [--port 8000]`.

A local store is served as a folder (http.server, bound to 127.0.0.1 by default); an object store
(s3://bucket/prefix) through a small handler that reads each requested object with fsspec, so
index.html and every run's report.html open in a browser with their relative links intact.
Prints the URL of index.html, then serves until interrupted.
"""

from __future__ import annotations

import functools
import mimetypes
import posixpath
import threading
import urllib.parse
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from core.store import Store


class FsspecHandler(BaseHTTPRequestHandler):
    """GET/HEAD of `<store>/<request path>` through fsspec; a folder path serves its index.html."""

    fs: Any = None
    root: str = ""

    def _resolve(self) -> str | None:
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if ".." in parts:
            return None
        key = posixpath.join(self.root, *parts) if parts else self.root
        if path.endswith("/") or not parts:
            key = posixpath.join(key, "index.html")
        return key

    def _send(self, body: bool) -> None:
        key = self._resolve()
        if key is None:
            self.send_error(HTTPStatus.BAD_REQUEST, "bad path")
            return
        try:
            data = self.fs.cat_file(key)
        except (FileNotFoundError, IsADirectoryError):
            self.send_error(HTTPStatus.NOT_FOUND, "not in the store")
            return
        except Exception as exc:  # credentials, network: say so instead of dropping the connection
            self.send_error(HTTPStatus.BAD_GATEWAY, f"cannot read the store: {type(exc).__name__}")
            return
        ctype = mimetypes.guess_type(key)[0] or "application/octet-stream"
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", f"{ctype}; charset=utf-8" if ctype.startswith("text/") else ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def do_GET(self) -> None:
        self._send(body=True)

    def do_HEAD(self) -> None:
        self._send(body=False)


def make_server(store: Store, host: str = "127.0.0.1", port: int = 8000) -> ThreadingHTTPServer:
    """An HTTP server for the store (not started); port 0 picks a free port."""
    if store.is_local:
        handler: Any = functools.partial(SimpleHTTPRequestHandler, directory=store.local_path)
    else:
        fs, root = store.filesystem()
        handler = type("StoreHandler", (FsspecHandler,), {"fs": fs, "root": root.rstrip("/")})
    return ThreadingHTTPServer((host, port), handler)


def serve_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="serve-reports", daemon=True)
    thread.start()
    return thread


def index_url(server: ThreadingHTTPServer) -> str:
    host, port = server.server_address[:2]
    return f"http://{host}:{port}/index.html"
