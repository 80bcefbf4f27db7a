"""Serve the catalog's ASGI app with uvicorn (and its C HTTP parser) on a pre-bound socket.

The server's own runner: the client's gateway runs on hypercorn (``lakesession.gateway._server``) so the
slim client distribution carries no uvicorn.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

import uvicorn


def server_config(app: Any, trusted_proxies: Sequence[str] = ()) -> uvicorn.Config:
    """uvicorn's config for our servers. Forwarding headers (``X-Forwarded-For``) are believed only from
    ``trusted_proxies``: uvicorn's own default believes them from 127.0.0.1, which lets any local process
    pose as any address (and so escape every per-address limit)."""
    trusted = [p.strip() for p in trusted_proxies if p.strip()]
    return uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=2,
        proxy_headers=bool(trusted),
        forwarded_allow_ips=trusted or [],
    )


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop where it is installed (libuv, in C): asyncio's own loop, its transports and its
    thread wake-ups were a fifth of a loadTable's CPU. Without it (Windows), asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run_server(server: uvicorn.Server, sockets: list[socket.socket]) -> None:
    """``server`` on ``sockets`` until it exits, on :func:`new_event_loop` (this thread's own loop)."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        runner.run(server.serve(sockets=sockets))


class BackgroundServer:
    """One uvicorn server in one daemon thread; ``start()`` returns once it accepts connections."""

    def __init__(self, app: Any, sock: socket.socket, name: str, *, trusted_proxies: Sequence[str] = ()):
        config = server_config(app, trusted_proxies)
        self._server = uvicorn.Server(config)
        self._sock = sock
        self._thread = threading.Thread(target=lambda: run_server(self._server, [sock]), name=name, daemon=True)

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    def start(self, timeout: float = 30) -> None:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{self._thread.name} failed to start")
            time.sleep(0.005)

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.should_exit = True
            self._thread.join(timeout=10)
        self._sock.close()
