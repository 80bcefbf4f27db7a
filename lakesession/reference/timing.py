"""``Server-Timing`` on every answer (opt-in, ``LAKESESSION_SERVER_TIMING=1``): where a request's time went.

Why: under load a client sees one latency; the split tells apart time queued in the server (waiting
for a threadpool thread and the GIL before the route's first line) from time handling the request,
and what is left (client minus server) is the network, uvicorn's event loop and the client itself.
``benchmarks/load.py`` turns it on and prints the split per operation.

* ``queue``: from the ASGI call to the route's request context (``context.get_context``) starting,
* ``app``: from there to the response's start,
* ``audit``: of ``app``, the wait for the request's audit records to be committed (SQLite's writer),
* ``total``: ASGI call to response start (the body follows; the header cannot time it),
* ``gate``: of ``queue``, the wait at the admission gate (``admission``), and ``ahead``: how many requests
  the gate let in while this one waited (a count, not milliseconds).

Off by default: timings are no secret, but nobody needs them outside a measurement.
"""

from __future__ import annotations

import os
import time
from typing import Any

from .guard import ASGIApp, Message, Receive, Scope, Send

ENV = "LAKESESSION_SERVER_TIMING"
STARTED = "ls_timing_started"  # scope["state"] key set by get_context (perf_counter seconds)


def enabled() -> bool:
    return os.environ.get(ENV, "") not in ("", "0")


def mark_started(scope: Scope) -> None:
    """The route's context starts now (called by ``get_context``; cheap when timing is off)."""
    state = scope.get("state")
    if isinstance(state, dict) and "ls_timing_t0" in state:
        state[STARTED] = time.perf_counter()


def add(scope: Scope, name: str, seconds: float) -> None:
    """Account ``seconds`` to ``name`` in this request's Server-Timing (only when timing is on)."""
    state = scope.get("state")
    if isinstance(state, dict) and "ls_timing_t0" in state:
        state[f"ls_timing_{name}"] = state.get(f"ls_timing_{name}", 0.0) + seconds


class ServerTiming:
    """Pure ASGI middleware adding ``Server-Timing: queue;dur=…, app;dur=…, total;dur=…`` (ms)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        state: dict[str, Any] = scope.setdefault("state", {})
        state["ls_timing_t0"] = t0

        async def timed(message: Message) -> None:
            if message["type"] == "http.response.start":
                now = time.perf_counter()
                started = state.get(STARTED, now)
                value = f"queue;dur={(started - t0) * 1000:.2f}, app;dur={(now - started) * 1000:.2f}, "
                value += f"total;dur={(now - t0) * 1000:.2f}"
                for key, dur in state.items():
                    if key.startswith("ls_timing_") and key not in ("ls_timing_t0", STARTED):
                        value += f", {key[10:]};dur={dur * 1000:.2f}"
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"server-timing", value.encode())]
            await send(message)

        await self.app(scope, receive, timed)
