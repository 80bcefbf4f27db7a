"""The reference catalog vending from a real, independent S3 + STS: SeaweedFS.

SeaweedFS's STS enforces the catalog's session policies itself, so these tests check — with a store
nobody here wrote — what the moto emulator's hooks emulate: prefix scoping (a table's credentials
never reach its ``_archive`` sibling), and read-only credentials that cannot write. Expiry stays
on the emulator (tests/catalog/test_vending.py): SeaweedFS's minimum credential lifetime is 900 s.

Every test runs against two catalogs: one holding a standing S3 key (``AssumeRole``), and one holding
no key at all (``s3.web_identity``: ``AssumeRoleWithWebIdentity`` with tokens of its own issuer, which
SeaweedFS trusts as an OIDC provider on a role nothing else may assume).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from pyiceberg.catalog.rest import RestCatalog

from lakesession.reference import ReferenceCatalog
from lakesession.reference.vending import S3Settings
from lakesession.reference.webidentity import WebIdentity
from tests._seaweedfs import WEB_AUDIENCE, WEB_ROLE_ARN, WEB_SUBJECT, SeaweedFS, key_settings, seaweedfs
from tests.factories import ROWS, SCHEMA, free_port, make_catalog, shop_policy, vended_catalog, vended_s3_client
from tests.support import load_vended

pytestmark = pytest.mark.slow

POLICY = shop_policy("sw")


@pytest.fixture(scope="module")
def web_port() -> int:
    """The keyless catalog's port, chosen before SeaweedFS starts: its IAM config names the issuer's URL."""
    return free_port()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, web_port: int) -> Iterator[SeaweedFS]:
    with seaweedfs(tmp_path_factory.mktemp("seaweedfs"), oidc_issuer=f"http://127.0.0.1:{web_port}/oidc") as sw:
        yield sw


def web_identity_settings(store: SeaweedFS) -> S3Settings:
    """A catalog with no storage key: SeaweedFS's STS trusts its issuer's tokens (``s3.web_identity``)."""
    return S3Settings(
        role_arn=WEB_ROLE_ARN,
        endpoint=store.endpoint,
        path_style=True,
        credential_ttl=900,  # SeaweedFS's minimum
        web_identity=WebIdentity(audience=WEB_AUDIENCE, subject=WEB_SUBJECT, session_duration=900),
    )


@pytest.fixture(scope="module", params=["standing-key", "web-identity"])
def cat(
    request: pytest.FixtureRequest, store: SeaweedFS, web_port: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ReferenceCatalog]:
    if request.param == "web-identity":
        settings, port = web_identity_settings(store), web_port
    else:
        settings = key_settings(store)
        port = 0
    with make_catalog(
        POLICY,
        warehouse=f"s3://{store.bucket}/wh-{request.param}",
        s3=settings,
        port=port,
        data_dir=tmp_path_factory.mktemp("swcat"),
    ) as handle:
        etl = _client(handle, "etl", "etl-secret-sw")
        etl.create_namespace("shop")
        for name in ("orders", "orders_archive"):
            etl.create_table(("shop", name), SCHEMA).append(ROWS)
        identity = handle.services.vendor.identity
        if request.param == "web-identity":  # no key anywhere: every credential came from a web identity exchange
            assert handle.settings.s3.access_key_id is None and handle.settings.s3.secret_access_key is None
            assert identity is not None and identity.sts_calls >= 2  # its own session, and at least one vended
        else:
            assert identity is None
        yield handle


def _client(handle: ReferenceCatalog, who: str, secret: str) -> RestCatalog:
    return vended_catalog(handle, f"sw-{who}-{time.monotonic_ns()}", f"{who}:{secret}")


def _vended(handle: ReferenceCatalog, who: str, table: str) -> tuple[dict[str, str], str]:
    """loadTable as ``who`` (the real REST call); the vended config and the table location."""
    body = load_vended(handle.uri, handle.admin.token_for(who), "shop", table).json()
    creds = body.get("storage-credentials") or []
    cfg = dict(body.get("config") or {})
    if creds:
        cfg.update(creds[0]["config"])
    assert cfg.get("s3.session-token"), "SeaweedFS STS vended no credentials"
    return cfg, body["metadata"]["location"]


def _s3(store: SeaweedFS, cfg: dict[str, str]):  # type: ignore[no-untyped-def]
    return vended_s3_client(store.endpoint, cfg)


def _key(location: str) -> str:
    return location.split("/", 3)[3].rstrip("/") + "/"  # s3://bucket/<key prefix>/


def _denied(call) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(ClientError) as err:
        call()
    return str(err.value.response["Error"]["Code"])


def _a_data_file(s3, bucket: str, prefix: str) -> str:  # type: ignore[no-untyped-def]
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix + "data/").get("Contents", [])]
    assert keys, f"no data files under {prefix}"
    return keys[0]


def test_seaweedfs_scopes_vended_credentials_to_the_table(cat: ReferenceCatalog, store: SeaweedFS) -> None:
    cfg, location = _vended(cat, "reader", "orders")
    _, sibling_location = _vended(cat, "etl", "orders_archive")
    own, sibling = _key(location), _key(sibling_location)
    assert sibling.startswith(own.rstrip("/")) and not sibling.startswith(
        own
    )  # "orders" is a prefix of "orders_archive"
    reader = _s3(store, cfg)
    admin = boto3.client(
        "s3",
        endpoint_url=store.endpoint,
        region_name="us-east-1",
        aws_access_key_id=store.access_key,
        aws_secret_access_key=store.secret_key,
        config=Config(s3={"addressing_style": "path"}),
    )
    own_file = _a_data_file(reader, store.bucket, own)  # listing and reading its own table works
    assert reader.get_object(Bucket=store.bucket, Key=own_file)["Body"].read()[:4] == b"PAR1"
    sibling_file = _a_data_file(admin, store.bucket, sibling)
    # the sibling's bytes exist, but SeaweedFS refuses the reader's credentials for them
    assert _denied(lambda: reader.get_object(Bucket=store.bucket, Key=sibling_file)) == "AccessDenied"
    assert _denied(lambda: reader.list_objects_v2(Bucket=store.bucket, Prefix=sibling)) == "AccessDenied"
    assert _denied(lambda: reader.list_objects_v2(Bucket=store.bucket, Prefix=own.rstrip("/"))) == "AccessDenied"


def test_seaweedfs_enforces_read_only_credentials(cat: ReferenceCatalog, store: SeaweedFS) -> None:
    cfg, location = _vended(cat, "reader", "orders")
    reader = _s3(store, cfg)
    own = _key(location)
    victim = _a_data_file(reader, store.bucket, own)
    assert _denied(lambda: reader.put_object(Bucket=store.bucket, Key=own + "data/evil.parquet", Body=b"x")) == (
        "AccessDenied"
    )
    assert _denied(lambda: reader.delete_object(Bucket=store.bucket, Key=victim)) == "AccessDenied"
    assert reader.head_object(Bucket=store.bucket, Key=victim)["ContentLength"] > 0  # still there
    # the writer's credentials for the same table may write there, and still not into the sibling
    wcfg, _ = _vended(cat, "etl", "orders")
    writer = _s3(store, wcfg)
    writer.put_object(Bucket=store.bucket, Key=own + "data/probe.bin", Body=b"ok")
    writer.delete_object(Bucket=store.bucket, Key=own + "data/probe.bin")
    _, sibling_location = _vended(cat, "etl", "orders_archive")
    sibling = _key(sibling_location)
    assert _denied(lambda: writer.put_object(Bucket=store.bucket, Key=sibling + "data/evil", Body=b"x")) == (
        "AccessDenied"
    )


def test_seaweedfs_round_trip_through_the_catalog(cat: ReferenceCatalog) -> None:
    """pyiceberg reads with the credentials SeaweedFS vended through the catalog."""
    rows = _client(cat, "reader", "reader-secret-sw").load_table(("shop", "orders")).scan().to_arrow()
    assert sorted(rows.column("item").to_pylist()) == ["apple", "pear"]


def test_seaweedfs_scopes_location_credentials_to_the_registered_prefix(
    cat: ReferenceCatalog, store: SeaweedFS
) -> None:
    """Issue #22: a raw prefix registered as a storage location; SeaweedFS's STS enforces its scope."""
    admin_s3 = _s3(
        store, {"s3.access-key-id": store.access_key, "s3.secret-access-key": store.secret_key, "s3.session-token": ""}
    )
    for key in ("raw/landing/a.txt", "raw/landing_x/b.txt", "raw/other/c.txt"):
        admin_s3.put_object(Bucket=store.bucket, Key=key, Body=b"raw")
    cat.admin.register_location(f"s3://{store.bucket}/raw/landing/")
    cat.admin.grant("readers", "LOCATION_READ", f"location s3://{store.bucket}/raw/landing/")
    ask = lambda who, path, mode="read": httpx.get(  # noqa: E731
        f"{cat.uri}/v1/lakesession/lakesession/location-credentials",
        params={"location": path, "mode": mode},
        headers={"Authorization": f"Bearer {cat.admin.token_for(who)}"},
    )
    r = ask("reader", f"s3://{store.bucket}/raw/landing/a.txt")
    assert r.status_code == 200, r.text
    (entry,) = r.json()["storage-credentials"]
    assert entry["prefix"] == f"s3://{store.bucket}/raw/landing/"
    s3 = _s3(store, entry["config"])
    assert s3.get_object(Bucket=store.bucket, Key="raw/landing/a.txt")["Body"].read() == b"raw"
    assert _denied(lambda: s3.get_object(Bucket=store.bucket, Key="raw/landing_x/b.txt")) in ("AccessDenied", "403")
    assert _denied(lambda: s3.get_object(Bucket=store.bucket, Key="raw/other/c.txt")) in ("AccessDenied", "403")
    assert _denied(lambda: s3.put_object(Bucket=store.bucket, Key="raw/landing/w.txt", Body=b"w")) in (
        "AccessDenied",
        "403",
    )
    assert ask("reader", f"s3://{store.bucket}/raw/landing/", "write").status_code == 403
    assert ask("reader", f"s3://{store.bucket}/raw/other/c.txt").status_code == 403


def test_a_port_taken_before_weed_binds_it_is_picked_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CI once lost a run to "Port allocation failed … filer.port": another process bound a picked port first."""
    import socket

    from tests import _seaweedfs

    real = _seaweedfs._free_ports
    picks: list[list[int]] = []
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]

        def first_pick_collides(n: int) -> list[int]:
            ports = real(n)
            if not picks:
                ports[2] = taken  # the filer's port, as in the failed run
            picks.append(ports)
            return ports

        monkeypatch.setattr(_seaweedfs, "_free_ports", first_pick_collides)
        with seaweedfs(tmp_path / "sw") as store:
            assert httpx.head(f"{store.endpoint}/{store.bucket}", timeout=5).status_code in (200, 403)
    assert len(picks) == 2 and store.filer != f"127.0.0.1:{taken}"
    assert all(port < 32768 for port in picks[1]), picks  # below the ephemeral range
