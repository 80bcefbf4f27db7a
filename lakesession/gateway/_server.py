"""Serve the gateway's ASGI app with hypercorn in a daemon thread, on a socket bound beforehand.

hypercorn, not uvicorn: the slim ``lakesession-client`` distribution carries none of the catalog
server's stack (uvicorn stays the server's). The gateway talks only to one JVM and one Python process on
loopback, so hypercorn's pure-Python HTTP/1.1 (h11) costs no measurable time next to the upstream call.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
from typing import Any

logger = logging.getLogger("lakesession.gateway")


class GatewayServer:
    """One hypercorn server in one daemon thread; ``start()`` returns once it serves."""

    def __init__(self, app: Any, sock: socket.socket, name: str) -> None:
        self._app = app
        self._sock = sock
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    def _config(self) -> Any:
        from hypercorn.config import Config

        config = Config()
        # hypercorn takes ownership of the descriptor it is given: a duplicate, so ours stays ours to close
        config.bind = [f"fd://{os.dup(self._sock.fileno())}"]
        config.accesslog = None
        config.errorlog = logger
        config.graceful_timeout = 2
        config.include_server_header = False
        return config

    async def _lifespan_aware(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """The app, with the lifespan startup's completion signalling readiness (hypercorn has no flag)."""

        async def send_and_mark(message: dict[str, Any]) -> None:
            await send(message)
            if message.get("type") == "lifespan.startup.complete":
                self._ready.set()

        await self._app(scope, receive, send_and_mark if scope["type"] == "lifespan" else send)

    def _run(self) -> None:
        from hypercorn.asyncio import serve

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            await serve(self._lifespan_aware, self._config(), shutdown_trigger=self._stop.wait)  # type: ignore[arg-type]

        try:
            asyncio.run(main())
        except BaseException as exc:  # reported by start(); a daemon thread has nobody else to tell
            self._error = exc
        finally:
            self._ready.set()

    def start(self, timeout: float = 30) -> None:
        self._thread.start()
        if not self._ready.wait(timeout) or self._error is not None or not self._thread.is_alive():
            raise RuntimeError(f"{self._thread.name} failed to start: {self._error!r}")

    def stop(self) -> None:
        if self._thread.is_alive() and self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout=10)
        self._sock.close()
