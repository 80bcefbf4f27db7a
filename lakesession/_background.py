"""Serve an ASGI app with uvicorn in a background thread on a pre-bound socket.

Neutral ground shared by the reference catalog and the client gateway (neither
imports the other). Binding first means the URL is known before the app is
built, and port 0 picks a free port without races.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

import uvicorn


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio only sets TCP_NODELAY on accepted sockets whose listening socket
    # names the protocol; without it every response waits ~40 ms for the client's delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(512)
    sock.set_inheritable(True)
    return sock


def url_host(host: str) -> str:
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


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
