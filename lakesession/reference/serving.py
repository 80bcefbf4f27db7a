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


class BackgroundServer:
    """One uvicorn server in one daemon thread; ``start()`` returns once it accepts connections."""

    def __init__(self, app: Any, sock: socket.socket, name: str, *, trusted_proxies: Sequence[str] = ()):
        config = server_config(app, trusted_proxies)
        self._server = uvicorn.Server(config)
        self._sock = sock
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._server.serve(sockets=[sock])), name=name, daemon=True
        )

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
