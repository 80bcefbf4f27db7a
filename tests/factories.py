"""The suite's shared factories: one ``free_port``, one policy builder, one ``make_catalog`` (``Lake``: tests/_lake.py).

Every module that needs a loopback port, a bootstrap policy or a reference catalog of its own takes it
from here, so a catalog's start (and its stop) reads the same everywhere and a policy is data, not a
copied YAML string.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import yaml
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from lakesession.reference import ReferenceCatalog, start
from lakesession.reference import bootstrap as bootstrap_mod

#: the ``shop.orders`` table of ``shop_policy``: its schema and two rows
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "item", StringType(), required=False))
ROWS = pa.table({"id": pa.array([1, 2], pa.int64()), "item": ["apple", "pear"]})


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on loopback right now (for a server that must be told its port before it starts)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def stop_process(proc: subprocess.Popen[Any], timeout: float = 15) -> None:
    """SIGTERM, then SIGKILL if ``proc`` has not exited within ``timeout`` s: no server outlives its test."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@dataclass
class Policy:
    """A bootstrap document (principals, roles, grants) built in code instead of copied YAML.

    ``Policy().service("etl", "etl-secret", role="eng").grant("eng", "CATALOG_MANAGE_CONTENT", "catalog")``
    """

    principals: list[dict[str, Any]] = field(default_factory=list)
    roles: dict[str, list[str]] = field(default_factory=dict)
    grants: list[dict[str, str]] = field(default_factory=list)
    locations: list[str] = field(default_factory=list)

    def principal(
        self, name: str, kind: str, secret: str | None = None, *, role: str | None = None, **extra: Any
    ) -> Policy:
        """Add a principal (with client credentials when ``secret`` is given) and put it in ``role``."""
        entry: dict[str, Any] = {"name": name, "type": kind}
        if secret is not None:
            entry.update(client_id=name, client_secret=secret)
        entry.update(extra)
        self.principals.append(entry)
        if role is not None:
            self.member(role, name)
        return self

    def user(self, name: str, secret: str | None = None, *, role: str | None = None, **extra: Any) -> Policy:
        return self.principal(name, "user", secret, role=role, **extra)

    def service(self, name: str, secret: str | None = None, *, role: str | None = None, **extra: Any) -> Policy:
        return self.principal(name, "service", secret, role=role, **extra)

    def member(self, role: str, *names: str) -> Policy:
        """Declare ``role`` (possibly empty) with ``names`` among its members."""
        self.roles.setdefault(role, []).extend(names)
        return self

    def grant(self, role: str, privilege: str, on: str) -> Policy:
        self.grants.append({"role": role, "privilege": privilege, "on": on})
        return self

    def location(self, *urls: str) -> Policy:
        """Register storage locations (``s3://bucket/prefix/``) that grants may then name."""
        self.locations.extend(urls)
        return self

    def grant_all(self, role: str, privileges: Iterable[str], on: str) -> Policy:
        for privilege in privileges:
            self.grant(role, privilege, on)
        return self

    def secrets(self, *names: str) -> dict[str, str]:
        """principal → client secret, for ``names`` (every principal with a secret when none are given)."""
        found = {p["name"]: p["client_secret"] for p in self.principals if "client_secret" in p}
        return {n: found[n] for n in names} if names else found

    def document(self) -> dict[str, Any]:
        roles = [{"name": name, "members": members} for name, members in self.roles.items()]
        doc: dict[str, Any] = {"principals": self.principals, "roles": roles, "grants": self.grants}
        if self.locations:
            doc["locations"] = [{"location": url} for url in self.locations]
        return doc

    def yaml(self) -> str:
        """The bootstrap file's text (what ``lakesession serve --bootstrap`` reads)."""
        return yaml.safe_dump(self.document(), sort_keys=False)

    def parse(self) -> bootstrap_mod.Bootstrap:
        return bootstrap_mod.parse(self.yaml())


def shop_policy(suffix: str, *, others: Iterable[str] = (), reads: str = "table shop.orders") -> Policy:
    """The suite's most common policy: service ``etl`` manages the catalog, user ``reader`` reads
    ``reads``; secrets are ``<who>-secret-<suffix>``; ``others`` are users without grants."""
    policy = (
        Policy()
        .service("etl", f"etl-secret-{suffix}", role="eng")
        .user("reader", f"reader-secret-{suffix}", role="readers")
    )
    for name in others:
        policy.user(name, f"{name}-secret-{suffix}")
    return policy.grant("eng", "CATALOG_MANAGE_CONTENT", "catalog").grant("readers", "TABLE_READ_DATA", reads)


@contextmanager
def make_catalog(
    policy: Policy | str | None = None, *, bucket: str | None = None, **options: Any
) -> Iterator[ReferenceCatalog]:
    """A reference catalog on loopback (``lakesession.reference.start``) with ``policy`` bootstrapped,
    stopped when the block ends. ``bucket`` puts the warehouse at ``s3://<bucket>/wh`` on the embedded S3
    emulator; ``options`` go to ``start`` (``data_dir``, ``warehouse``, ``s3``, ``credential_ttl`` …)."""
    if bucket is not None:
        options.update(warehouse=f"s3://{bucket}/wh", s3_emulator=True)
    if isinstance(policy, Policy):
        options["bootstrap"] = policy.parse()
    elif policy is not None:
        options["bootstrap"] = bootstrap_mod.parse(policy)
    handle = start(**options)
    try:
        yield handle
    finally:
        handle.stop()


def seed_tables(handle: Any, bucket: str, tables: Iterable[str], namespace: str = "ns") -> dict[str, str]:
    """Create ``namespace`` and ``tables`` over real HTTP as ``etl`` and put one data object in each on the
    S3 emulator (``<prefix>/data/<table>.parquet``); returns table → key prefix inside ``bucket``."""
    import httpx

    p = f"{handle.uri}/v1/lakesession"
    etl = {"Authorization": f"Bearer {handle.admin.token_for('etl')}"}
    assert httpx.post(f"{p}/namespaces", json={"namespace": [namespace]}, headers=etl).status_code == 200
    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
    loc = {}
    for t in tables:
        r = httpx.post(f"{p}/namespaces/{namespace}/tables", json={"name": t, "schema": schema}, headers=etl)
        assert r.status_code == 200, r.text
        loc[t] = r.json()["metadata"]["location"].split(f"s3://{bucket}/", 1)[1].rstrip("/")
    s3 = handle.s3_emulator.client()
    for t in loc:
        s3.put_object(Bucket=bucket, Key=f"{loc[t]}/data/{t}.parquet", Body=f"{t} rows".encode())
    return loc


def vended_catalog(handle: Any, name: str, credential: str, **properties: str) -> Any:
    """A plain pyiceberg RestCatalog on ``handle`` logging in with ``credential`` (``who:secret``) at its
    issuer and asking for vended credentials (what pyiceberg users configure)."""
    from pyiceberg.catalog.rest import RestCatalog

    return RestCatalog(
        name,
        uri=handle.uri,
        warehouse="lakesession",
        credential=credential,
        **{
            "oauth2-server-uri": f"{handle.issuer_uri}/token",
            "header.X-Iceberg-Access-Delegation": "vended-credentials",
            **properties,
        },
    )


def vended_s3_client(endpoint: str, cfg: dict[str, str], region: str = "us-east-1", retries: int | None = 1) -> Any:
    """A boto3 S3 client holding exactly the vended credentials in ``cfg`` (a storage-credential config)."""
    import boto3
    from botocore.config import Config

    options: dict[str, Any] = {"s3": {"addressing_style": "path"}}
    if retries is not None:
        options["retries"] = {"max_attempts": retries}
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id=cfg["s3.access-key-id"],
        aws_secret_access_key=cfg["s3.secret-access-key"],
        aws_session_token=cfg["s3.session-token"],
        config=Config(**options),
    )


def without_storage_access(store: Any, table: str) -> None:
    """Make ``table``'s registered credentials say nothing of their access level (``lakesession.storage-access``),
    as a catalog other than lakesession's vends them: the client cannot refuse early, so the store must."""
    from lakesession._wire.cloudkeys import STORAGE_ACCESS

    entry = store.entry(table)
    creds = [(c.prefix, {k: v for k, v in c.config.items() if k != STORAGE_ACCESS}) for c in entry.credentials]
    store.register(table, creds, location=entry.location)
