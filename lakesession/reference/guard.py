"""``RequestGuard``: the catalog's outermost own layer — request size and nesting limits, and clean 500s.

* Bodies larger than ``max_body_bytes`` answer 413, checked on ``Content-Length`` and again
  while the body streams in (chunked uploads have no length). The body is read here, bounded,
  and replayed to the app.
* JSON nested deeper than ``max_json_depth`` answers 400 before any parser recurses into it.
* An exception no handler claimed (a bug) answers an ``IcebergErrorResponse`` 500 with
  ``Connection: close``. Starlette's ``ServerErrorMiddleware`` would send its 500 and then
  re-raise so the server can log it; uvicorn, seeing an exception after the response started,
  aborts the transport. The client was never told the connection ends, reuses it, and its next
  request is reset. Handling the error here (inside that middleware) ends the exchange the
  HTTP way: the response says ``Connection: close`` and uvicorn closes after sending it.
"""

from __future__ import annotations

import json
import logging
import re
from array import array
from collections.abc import Awaitable, Callable, MutableMapping
from itertools import accumulate
from typing import Any

from .errors import error_body

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_SIGNS = bytes.maketrans(b"[]{}", b"\x01\xff\x01\xff")  # +1 / -1 as signed bytes
_JSON_START = re.compile(rb"\s*[\[{]")


def json_too_deep(body: bytes, limit: int) -> bool:
    """True if ``body`` (taken as JSON) nests arrays/objects more than ``limit`` levels deep.

    Runs at C speed: escapes are dropped (so every remaining quote delimits a string), the
    strings are cut out (brackets inside them are not nesting), the brackets left become
    +1/-1, and the deepest running sum is the nesting depth.
    """
    if body.count(b"[") + body.count(b"{") <= limit:
        return False  # cannot be deeper than its number of openers (the common case: no scan)
    unescaped = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    outside = b"".join(unescaped.split(b'"')[::2])
    steps = outside.translate(None, _NOT_BRACKETS).translate(_SIGNS)
    return max(accumulate(array("b", steps)), default=0) > limit


class BodyTooLarge(Exception):
    pass


class RequestGuard:
    """Pure ASGI middleware (see the module docstring)."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, max_json_depth: int):
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_json_depth = max_json_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            body = await self._read_body(scope, receive)
        except BodyTooLarge:
            await _answer(send, 413, "BadRequestException", self._too_large(), close=True)
            return
        if _JSON_START.match(body) and json_too_deep(body, self.max_json_depth):
            message = f"Malformed request: the JSON body nests deeper than {self.max_json_depth} levels"
            await _answer(send, 400, "BadRequestException", message)
            return
        try:
            await self.app(scope, _replay(body, receive), tracking_send)
        except Exception as exc:
            if started:
                raise  # nothing better is possible mid-response: the server aborts the connection
            logger.exception("internal error on %s %s", scope.get("method"), scope.get("path"))
            message = f"Internal server error ({type(exc).__name__})"
            await _answer(send, 500, "InternalServerError", message, close=True)

    def _too_large(self) -> str:
        return f"Request body too large: the limit is {self.max_body_bytes} bytes"

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes:
        """The whole body, refusing (before reading) a declared length or (while reading) a stream over the limit."""
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_body_bytes:
                raise BodyTooLarge
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break  # disconnected: the app sees an empty body and the disconnect on its next receive
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise BodyTooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # afterwards: wait for the disconnect, as the server would

    return replay


async def _answer(send: Send, status: int, type_: str, message: str, *, close: bool = False) -> None:
    payload = json.dumps(error_body(status, type_, message)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    if close:  # the request body was not drained, or the app failed: do not reuse this connection
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload, "more_body": False})
