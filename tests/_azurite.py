"""Azurite (npm ``azurite``) on loopback: Azure Blob storage that checks SAS signatures, permissions and
expiry itself — the independent judge of the SAS tokens the reference catalog vends.

Installed on first use with ``npm install`` into ``~/.cache/lakesession/azurite`` (a temporary directory
renamed into place, so concurrent test processes never see half an install); ``.ci/run`` does the same.
Azurite has no hierarchical namespace (ADLS Gen2 ``dfs`` API) and refuses directory SAS (``sr=d``):
tests vend container SAS (``sas_scope="container"``) and prove that refusal.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.factories import free_port, stop_process

AZURITE_VERSION = "3.35.0"
ACCOUNT = "devstoreaccount1"
# Azurite's well-known development account key (public, documented by Microsoft; loopback only)
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def install_dir() -> Path:
    root = Path(os.environ.get("LAKESESSION_CACHE_DIR") or Path.home() / ".cache" / "lakesession")
    return root / "azurite"


def azurite_binary() -> Path:
    """The ``azurite-blob`` launcher, installing Azurite with npm first if it is missing (fails loudly)."""
    target = install_dir()
    binary = target / "node_modules" / ".bin" / "azurite-blob"
    if binary.exists():
        return binary
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("Azurite needs Node.js and npm: apt-get install -y nodejs npm (then rerun)")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="azurite-", dir=target.parent))
    try:
        subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--silent", "--prefix", str(tmp), f"azurite@{AZURITE_VERSION}"],
            check=True,
            capture_output=True,
            timeout=600,
        )
        try:
            tmp.rename(target)
        except OSError:  # another process installed it meanwhile
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if not binary.exists():
        raise RuntimeError(f"npm installed Azurite but {binary} is missing")
    return binary


@dataclass
class Azurite:
    port: int
    account: str = ACCOUNT
    account_key: str = field(default=ACCOUNT_KEY, repr=False)

    @property
    def endpoint(self) -> str:
        """The blob endpoint, path-style (``http://127.0.0.1:<port>/devstoreaccount1``)."""
        return f"http://127.0.0.1:{self.port}/{self.account}"

    @property
    def host(self) -> str:
        """The account host ``abfss://`` locations name (``devstoreaccount1.dfs.core.windows.net``)."""
        return f"{self.account}.dfs.core.windows.net"

    def service(self):  # type: ignore[no-untyped-def]
        """A ``BlobServiceClient`` with the account key (setup and inspection only)."""
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient(
            self.endpoint, credential={"account_name": self.account, "account_key": self.account_key}
        )

    def create_container(self, name: str) -> None:
        self.service().create_container(name)

    def blobs(self, container: str, prefix: str = "") -> list[str]:
        return [b.name for b in self.service().get_container_client(container).list_blobs(name_starts_with=prefix)]


@contextmanager
def azurite(tmp: Path) -> Iterator[Azurite]:
    """Azurite's blob service on a free loopback port, in memory, until the block ends."""
    binary = azurite_binary()
    port = free_port()
    log = open(tmp / "azurite.log", "wb")
    proc = subprocess.Popen(
        [
            str(binary),
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--inMemoryPersistence",
            "--disableTelemetry",
            "--disableProductStyleUrl",
            "--skipApiVersionCheck",
        ],
        cwd=tmp,  # Azurite's debug/telemetry state files land here
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"Azurite exited ({proc.returncode}): {(tmp / 'azurite.log').read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("Azurite did not listen within 60 s") from None
                time.sleep(0.2)
        yield Azurite(port)
    finally:
        stop_process(proc, 10)
        log.close()
