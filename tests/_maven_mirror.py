"""A Maven repository on loopback (``LAKESESSION_MAVEN_URL``): small stand-in jars served over real HTTP,
their sha1s pinned in place of Maven Central's, so the download path runs without 100 MB of traffic."""

from __future__ import annotations

import functools
import hashlib
import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class Mirror:
    def __init__(self, root: Path, url: str) -> None:
        self.root, self.url = root, url
        self.requests: list[str] = []

    def put(self, group: str, artifact: str, version: str, data: bytes) -> str:
        """Serve ``data`` as the jar; returns its sha1 (to pin)."""
        path = self.root / group.replace(".", "/") / artifact / version / f"{artifact}-{version}.jar"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return hashlib.sha1(data).hexdigest()


@contextmanager
def serve(root: Path) -> Iterator[Mirror]:
    root.mkdir(parents=True, exist_ok=True)
    mirror: Mirror

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self) -> None:
            mirror.requests.append(self.path)
            super().do_GET()

        def log_message(self, *_a: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
    mirror = Mirror(root, f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield mirror
    finally:
        server.shutdown()
        server.server_close()
