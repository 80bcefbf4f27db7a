"""A pure ASGI middleware that keeps every response (status, headers, body) for later scanning."""

from __future__ import annotations

import threading
from typing import Any


class ResponseRecorder:
    def __init__(self, limit: int = 20_000):
        self.responses: list[tuple[str, int, bytes, bytes]] = []  # (path, status, raw headers, body)
        self._lock = threading.Lock()
        self._limit = limit

    def wrap(self, app: Any) -> Any:
        async def recorded(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            state: dict[str, Any] = {"status": 0, "headers": b"", "body": []}

            async def capture(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    state["status"] = message["status"]
                    state["headers"] = b"\n".join(k + b": " + v for k, v in message.get("headers", []))
                elif message["type"] == "http.response.body":
                    state["body"].append(message.get("body", b""))
                    if not message.get("more_body"):
                        with self._lock:
                            if len(self.responses) < self._limit:
                                self.responses.append(
                                    (scope["path"], state["status"], state["headers"], b"".join(state["body"]))
                                )
                await send(message)

            await app(scope, receive, capture)

        return recorded

    def containing(self, secret: str) -> list[str]:
        needle = secret.encode()
        with self._lock:
            return [path for path, _, headers, body in self.responses if needle in body or needle in headers]
