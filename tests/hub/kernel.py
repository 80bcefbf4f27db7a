"""A minimal Jupyter kernel client over a single-user server's REST API and kernel websocket.

Talks to ``{server}/api/kernels`` (through the hub's proxy) with a hub API token in the
``Authorization`` header — never in a URL, so it cannot end up in an access log.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
import websocket


class KernelError(AssertionError):
    """The code raised in the kernel (the message carries its traceback)."""


@dataclass
class Result:
    stdout: str = ""
    stderr: str = ""
    error: str | None = None
    outputs: list[dict[str, Any]] = field(default_factory=list)

    def json_lines(self) -> list[Any]:
        return [json.loads(line) for line in self.stdout.splitlines() if line.startswith(("{", "["))]


class Kernel:
    """Start a kernel on a Jupyter server, run code in it, shut it down."""

    def __init__(self, server_url: str, api_token: str, *, timeout: float = 60.0):
        self._url = server_url.rstrip("/")
        self._headers = {"Authorization": f"token {api_token}"}
        self._http = httpx.Client(headers=self._headers, timeout=timeout)
        resp = self._http.post(f"{self._url}/api/kernels", json={"name": "python3"})
        assert resp.status_code == 201, f"starting a kernel: HTTP {resp.status_code} {resp.text[:300]}"
        self.id = resp.json()["id"]
        ws_url = self._url.replace("http", "ws", 1) + f"/api/kernels/{self.id}/channels"
        self._ws = websocket.create_connection(
            ws_url, header=[f"{k}: {v}" for k, v in self._headers.items()], timeout=timeout
        )
        self._session = uuid.uuid4().hex

    def run(self, code: str, *, timeout: float = 120.0) -> Result:
        msg_id = uuid.uuid4().hex
        self._ws.send(
            json.dumps(
                {
                    "header": {
                        "msg_id": msg_id,
                        "msg_type": "execute_request",
                        "username": "test",
                        "session": self._session,
                        "date": "",
                        "version": "5.3",
                    },
                    "parent_header": {},
                    "metadata": {},
                    "channel": "shell",
                    "buffers": [],
                    "content": {
                        "code": code,
                        "silent": False,
                        "store_history": False,
                        "user_expressions": {},
                        "allow_stdin": False,
                        "stop_on_error": True,
                    },
                }
            )
        )
        result, idle, replied = Result(), False, False
        deadline = time.monotonic() + timeout
        while not (idle and replied):
            self._ws.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                msg = json.loads(self._ws.recv())
            except websocket.WebSocketTimeoutException:
                raise AssertionError(
                    f"the kernel did not finish within {timeout} s; output so far:\n"
                    f"{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
                ) from None
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                if content["name"] == "stdout":
                    result.stdout += content["text"]
                else:
                    result.stderr += content["text"]
            elif kind in ("execute_result", "display_data"):
                result.outputs.append(content.get("data", {}))
            elif kind == "error":
                result.error = f"{content['ename']}: {content['evalue']}\n" + "\n".join(content["traceback"])
            elif kind == "status" and content["execution_state"] == "idle":
                idle = True
            elif kind == "execute_reply":
                replied = True
        return result

    def check(self, code: str, *, timeout: float = 120.0) -> Result:
        """``run`` that fails the test when the code raised."""
        result = self.run(code, timeout=timeout)
        if result.error:
            raise KernelError(result.error + "\n" + result.stderr[-3000:])
        return result

    def close(self) -> None:
        try:
            self._ws.close()
        finally:
            self._http.delete(f"{self._url}/api/kernels/{self.id}")
            self._http.close()
