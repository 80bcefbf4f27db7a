"""The gateway flooded (issue 23, finding 5) and the Connect-mode gateway reached from elsewhere (finding 9).

Any local user can reach a notebook's loopback gateway. A 400 MB body without the session secret
must be refused before it is read (the process's RSS, sampled while it is sent, must not grow with
it); a body over the cap is 413 even with the secret. A gateway for a Spark Connect server answers
only the addresses it was given (a real second loopback source address stands in for "elsewhere").
"""

from __future__ import annotations

import os
import select
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from lakesession._wire.sockets import bind
from lakesession.errors import ConfigError
from lakesession.gateway import Gateway, gateway_clients
from lakesession.gateway._app import MAX_BODY_BYTES
from lakesession.reference.serving import BackgroundServer

from .test_gateway_attacks import Recorder

MB = 1024 * 1024
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class PeakRss:
    """The largest RSS of this process (which serves the gateway) while the block runs."""

    def __init__(self) -> None:
        self.base = self.peak = rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, rss())

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss())

    @property
    def growth(self) -> int:
        return self.peak - self.base


@pytest.fixture()
def gateway() -> Iterator[tuple[Gateway, Recorder]]:
    rec = Recorder()
    upstream = BackgroundServer(rec, bind("127.0.0.1", 0), "flood-upstream")
    upstream.start()
    gw = Gateway(f"http://127.0.0.1:{upstream.port}", lambda: "the-users-token").start()
    yield gw, rec
    gw.stop()
    upstream.stop()


def send_big_body(uri: str, size: int, secret: str | None) -> tuple[bytes, int]:
    """POST ``size`` bytes (1 MB at a time) on a raw socket; stop once the gateway answers or hangs up.
    Returns (the response's status line, bytes sent)."""
    host, port = uri.split("//")[1].split(":")
    auth = f"Authorization: Bearer {secret}\r\n" if secret else ""
    head = (
        f"POST /v1/lakesession/namespaces HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"{auth}Content-Length: {size}\r\n\r\n"
    )
    chunk = b"x" * MB
    sent = 0
    with socket.create_connection((host, int(port)), timeout=120) as sock:
        sock.sendall(head.encode())
        try:
            while sent < size:
                if select.select([sock], [], [], 0)[0]:
                    break  # the gateway has answered: it won't read the rest
                sock.sendall(chunk[: min(MB, size - sent)])
                sent += min(MB, size - sent)
        except (BrokenPipeError, ConnectionResetError):
            pass
        response = b""
        try:
            while b"\r\n" not in response:
                data = sock.recv(65536)
                if not data:
                    break
                response += data
        except ConnectionResetError:
            pass
    return response.split(b"\r\n", 1)[0], sent


def test_a_huge_body_without_the_secret_is_refused_before_it_is_read(gateway: tuple[Gateway, Recorder]) -> None:
    gw, rec = gateway
    with PeakRss() as mem:
        status, sent = send_big_body(gw.uri, 400 * MB, secret=None)
    assert status.startswith(b"HTTP/1.1 401"), status
    # fa6e17e buffered the whole body first: RSS +400 MB (or more) before its 401
    assert mem.growth < 64 * MB, f"RSS grew by {mem.growth // MB} MB while {sent // MB} MB were sent"
    assert sent < 400 * MB and rec.seen == []


def test_a_body_over_the_cap_is_413_even_with_the_secret(gateway: tuple[Gateway, Recorder]) -> None:
    gw, rec = gateway
    with PeakRss() as mem:
        status, _ = send_big_body(gw.uri, MAX_BODY_BYTES + MB, secret=gw.secret)
    assert status.startswith(b"HTTP/1.1 413"), status
    assert mem.growth < 64 * MB

    def chunks() -> Iterator[bytes]:  # no Content-Length: the cap holds while streaming
        for _ in range(MAX_BODY_BYTES // MB + 2):
            yield b"y" * MB

    with httpx.Client(base_url=gw.uri, timeout=60) as c:
        auth = {"Authorization": f"Bearer {gw.secret}"}
        try:
            streamed = c.post("/v1/lakesession/namespaces", content=chunks(), headers=auth)
            assert streamed.status_code == 413 and streamed.json()["error"]["code"] == 413
        except httpx.TransportError:  # the gateway answered and hung up while the body was still going out
            pass
        assert rec.seen == []
        ok = c.get("/v1/config", headers=auth)  # the gateway still serves
        assert ok.status_code == 200 and len(rec.seen) == 1


def from_address(uri: str, address: str) -> httpx.Client:
    return httpx.Client(base_url=uri, timeout=30, transport=httpx.HTTPTransport(local_address=address))


def test_connect_gateway_answers_only_its_allowed_clients() -> None:
    rec = Recorder()
    upstream = BackgroundServer(rec, bind("127.0.0.1", 0), "connect-upstream")
    upstream.start()
    # loopback stands in for the network: 127.0.0.2 is "the Connect server", 127.0.0.3 "anyone else"
    gw = Gateway(f"http://127.0.0.1:{upstream.port}", lambda: "t", allowed_clients=["127.0.0.2"]).start()
    try:
        auth: dict[str, Any] = {"Authorization": f"Bearer {gw.secret}"}
        with from_address(gw.uri, "127.0.0.3") as stranger:  # holds the secret (it travels in the Connect conf)
            refused = stranger.get("/v1/config", headers=auth)
            assert refused.status_code == 403 and refused.json()["error"]["type"] == "ForbiddenException"
        assert rec.seen == []
        with from_address(gw.uri, "127.0.0.2") as server:
            assert server.get("/v1/config", headers=auth).status_code == 200
        assert len(rec.seen) == 1 and rec.seen[0]["headers"]["authorization"] == "Bearer t"
    finally:
        gw.stop()
        upstream.stop()


def test_who_may_reach_a_gateway() -> None:
    assert gateway_clients("127.0.0.1", None, None) is None  # loopback: local processes (with the secret)
    assert gateway_clients("10.0.0.5", ["10.0.0.0/24"], None) == ["10.0.0.0/24"]
    with pytest.raises(ConfigError, match="gateway_clients"):
        gateway_clients("10.0.0.5", None, None)  # routable and nobody named: refused
    allowed = gateway_clients("10.0.0.5", None, "sc://localhost:15002")
    assert allowed is not None and "127.0.0.1" in allowed  # the Connect server's host (and loopback)
    with pytest.raises(ValueError, match="not an IP address"):
        Gateway("http://127.0.0.1:9", lambda: "t", allowed_clients=["not-an-address"])
