"""Stand-in HTTP servers on loopback: one quiet JSON handler and one way to start and stop them.

Tests that fake a catalog, an identity provider or a proxy in a few lines of ``BaseHTTPRequestHandler``
share this, so each keeps only what its stand-in answers.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


class QuietHandler(BaseHTTPRequestHandler):
    """A stand-in's handler: ``reply`` sends a JSON answer; no access log (the test's output stays its own)."""

    def reply(self, status: int, body: Any) -> None:
        """Answer ``status`` with ``body`` (bytes as they are, anything else as JSON) and its length."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


class StubServer:
    """``handler`` served on a loopback port from a daemon thread until ``close()`` (or the ``with`` block ends)."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> StubServer:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


@contextmanager
def serve_asgi(app: Any, sock: socket.socket, *, access_log: bool = False) -> Iterator[str]:
    """Run the ASGI ``app`` with uvicorn on an already-bound, listening ``sock`` from a background thread until
    the block ends; yields its base URL. The socket comes first so a test can hand its port out before serving."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, log_config=None, lifespan="off", access_log=access_log))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
