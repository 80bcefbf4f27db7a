"""lakesession's client against Project Nessie (0.99, the runner jar from Maven Central), authenticated by
lakesession's embedded issuer.

Nessie validates our access tokens itself (Quarkus OIDC: discovery, JWKS, ``iss``, ``aud``, expiry)
and vends per-table STS credentials (``client-iam``: AssumeRole with a session policy naming the
table's location) from an S3 + STS store the test starts (the moto-based emulator, which enforces
session policies and expiry). What Nessie 0.99 does not do, and what lakesession does about it:

- its ``/v1/config`` lists no ``endpoints`` (so no ``/credentials``): credentials are refreshed by
  reloading the table;
- it vends credentials in the table ``config`` with no ``s3.session-token-expires-at-ms``: Iceberg
  Java's refresh needs one, so by default the JVM keeps the keys of each load, and every query reloads
  the table (Spark's catalog cache is off) and gets fresh keys; pyiceberg tables count them as never
  expiring until a forced refresh. With ``assumed_credential_ttl`` both refresh ahead of that assumed
  lifetime (the gateway stamps it on the keys for the JVM);
- its table metadata holds the current snapshot only, and lives at a Nessie URL, not in the store;
- its ``/v1/config`` overrides ``uri`` with its own address: the gateway rewrites it, or the JVM would
  leave the gateway (and fail: it holds no user token).
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.table import Table

import lakesession
from lakesession.reference import ReferenceCatalog
from lakesession.reference.storage.emulator import Credentials, S3Emulator
from tests._nessie import WAREHOUSE, Nessie, nessie, nessie_properties
from tests.conftest import SECRETS, SPARK_TEST_CONF

pytestmark = pytest.mark.slow

BUCKET = "nessie-interop"
AUDIENCE = "lakesession"  # what the embedded issuer puts in ``aud`` (ServerSettings.audience)
CREDENTIAL_TTL = 900  # Nessie's client-iam session duration; expiry is forced through the emulator


@dataclass(frozen=True)
class Stack:
    issuer: ReferenceCatalog
    store: S3Emulator
    nessie: Nessie


@pytest.fixture(scope="module")
def stack(catalog: ReferenceCatalog, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    for var in [k for k in os.environ if k.startswith("AWS_")]:
        os.environ.pop(var)  # neither Nessie nor the JVM may find ambient storage keys
    with S3Emulator() as emu:
        emu.create_bucket(BUCKET)
        key, secret = emu.admin_credentials
        props = nessie_properties(
            issuer=catalog.issuer_uri,
            audience=AUDIENCE,
            s3_endpoint=emu.endpoint,
            region=emu.region,
            bucket=BUCKET,
            access_key=key,
            secret_key=secret,
            role_arn=emu.vending_role_arn,
            credential_ttl=CREDENTIAL_TTL,
        )
        with nessie(tmp_path_factory.mktemp("nessie"), props) as server:
            yield Stack(catalog, emu, server)


@pytest.fixture(scope="module")
def session(stack: Stack) -> Iterator[lakesession.Session]:
    s = lakesession.connect(
        uri=stack.nessie.iceberg_uri,
        warehouse=WAREHOUSE,
        issuer=stack.issuer.issuer_uri,  # client credentials at lakesession's embedded issuer
        credential=f"etl:{SECRETS['etl']}",
        catalog_name="nessie",
        master="local[2]",
        spark_conf=SPARK_TEST_CONF,
    )
    yield s
    s.close()


def _table(session: lakesession.Session, name: str, **options: str) -> Table:
    table = session.table(name, **options)
    assert isinstance(table, Table)
    return table


def _config(stack: Stack, token: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return httpx.get(f"{stack.nessie.iceberg_uri}/v1/config", params={"warehouse": WAREHOUSE}, headers=headers)


def _resign(token: str, key: object, alg: str, **claims: object) -> str:
    """``token``'s header and claims (changed by ``claims``), signed with ``key``."""
    from joserfc import jws, jwt

    parts = token.split(".")
    header = json.loads(base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4)))
    payload = json.loads(jws.extract_compact(token.encode()).payload)
    return jwt.encode({**header, "alg": alg}, {**payload, **claims}, key)  # type: ignore[arg-type]


def test_nessie_validates_tokens_of_our_issuer_itself(stack: Stack) -> None:
    """Nessie (Quarkus OIDC) found our issuer by discovery and checks signature, audience and expiry."""
    from joserfc.jwk import ECKey

    issuer = stack.issuer.app.state.issuer
    genuine = stack.issuer.admin.token_for("etl")
    assert _config(stack, genuine).status_code == 200
    assert _config(stack, None).status_code == 401
    forged = _resign(genuine, ECKey.generate_key("P-256"), "ES256")  # same kid and claims, another key
    assert _config(stack, forged).status_code == 401
    other_audience = _resign(genuine, issuer.key, issuer.alg, aud="another-service")  # our key, not for Nessie
    assert _config(stack, _resign(genuine, issuer.key, issuer.alg)).status_code == 200  # re-signing alone is fine
    assert _config(stack, other_audience).status_code == 401
    expired = stack.issuer.admin.token_for("etl", ttl=-600)
    assert _config(stack, expired).status_code == 401


def test_what_nessie_offers(stack: Stack) -> None:
    """The facts behind lakesession's choices (and the README's compatibility row)."""
    body = _config(stack, stack.issuer.admin.token_for("etl")).json()
    assert "endpoints" not in body or not body["endpoints"]  # nothing listed: no /credentials, no views for Java
    assert body["overrides"]["uri"].startswith(stack.nessie.base)  # its own address, which the gateway rewrites
    assert body["defaults"]["prefix"] == "main%7Cwarehouse"  # {ref}|{warehouse}, already percent-encoded
    uri, auth = stack.nessie.iceberg_uri, {"Authorization": f"Bearer {stack.issuer.admin.token_for('etl')}"}
    # no token endpoint of its own: clients get tokens from the issuer (lakesession: client credentials or device)
    assert httpx.post(f"{uri}/v1/oauth/tokens", data={"grant_type": "client_credentials"}).status_code == 501
    # views are served (though unlisted: Iceberg Java then assumes none without view-endpoints-supported=true)
    created = httpx.post(f"{uri}/v1/main%7Cwarehouse/namespaces", json={"namespace": ["obs"]}, headers=auth)
    assert created.status_code == 200, created.text
    views = httpx.get(f"{uri}/v1/main%7Cwarehouse/namespaces/obs/views", headers=auth)
    assert views.status_code == 200 and views.json()["identifiers"] == []


def test_pyiceberg_round_trip_with_nessie_vended_credentials(session: lakesession.Session, stack: Stack) -> None:
    session.catalog.create_namespace("py")
    session.catalog.create_table(("py", "orders"), schema=pa.schema([("id", pa.int64()), ("item", pa.string())]))
    table = _table(session, "py.orders")
    table.append(pa.table({"id": pa.array([1, 2], pa.int64()), "item": ["apple", "pear"]}))
    assert sorted(table.scan().to_arrow().column("item").to_pylist()) == ["apple", "pear"]
    entry = session.credential_store.entry("py.orders")
    assert entry.state == "valid" and len(entry.credentials) == 1
    vended = entry.credentials[0]
    assert vended.prefix.startswith(f"s3://{BUCKET}/py/orders")
    assert vended.expires_at is None  # Nessie 0.99 states no expiry
    assert not any(k.endswith("expires-at-ms") for k in vended.config)
    # Nessie's session policy scopes the keys to the table: another table's files are out of reach
    session.catalog.create_table(("py", "other"), schema=pa.schema([("id", pa.int64())]))
    other = _table(session, "py.other")
    other.append(pa.table({"id": pa.array([7], pa.int64())}))
    scoped = stack.store.client("s3", _keys(vended.config))
    other_file = next(iter(other.scan().plan_files())).file.file_path
    with pytest.raises(Exception, match="AccessDenied"):
        scoped.get_object(Bucket=BUCKET, Key=other_file.removeprefix(f"s3://{BUCKET}/"))
    own_file = next(iter(table.scan().plan_files())).file.file_path
    assert scoped.get_object(Bucket=BUCKET, Key=own_file.removeprefix(f"s3://{BUCKET}/"))["Body"].read()
    # Nessie serves table metadata itself (no metadata.json in the store)
    assert table.metadata_location.startswith(f"{stack.nessie.base}/catalog/v1/trees/main%40")


def _keys(cfg: Mapping[str, str]) -> Credentials:
    return Credentials(cfg["s3.access-key-id"], cfg["s3.secret-access-key"], cfg.get("s3.session-token"))


def _expire_all(store: S3Emulator) -> int:
    """Expire every STS credential the emulator issued so far (Nessie's, for every table and engine)."""
    sessions = list(store._realm.sessions)
    for key in sessions:
        store.expire(key)
    return len(sessions)


def test_pyiceberg_survives_expiry_by_reload(session: lakesession.Session, stack: Stack) -> None:
    """Nessie lists no ``/credentials``: lakesession refreshes by reloading the table, and Nessie vends new keys."""
    table = _table(session, "py.orders")
    store = session.credential_store
    entry = store.entry("py.orders")
    assert entry.refresh_url is not None and entry.refresh_url.endswith("/namespaces/py/tables/orders")
    before = {c.config["s3.access-key-id"] for c in entry.credentials}
    direct = httpx.get(
        f"{stack.nessie.iceberg_uri}/v1/main%7Cwarehouse/namespaces/py/tables/orders/credentials",
        headers={"Authorization": f"Bearer {session.identity.token()}"},
    )
    assert direct.status_code in (404, 405, 501)  # no loadCredentials route in Nessie 0.99
    assert _expire_all(stack.store) >= 1
    with pytest.raises(OSError):  # the store really refuses them now
        table.scan().to_arrow()
    assert store.refresh("py.orders") == "valid", entry.last_error
    after = {c.config["s3.access-key-id"] for c in store.entry("py.orders").credentials}
    assert after and after.isdisjoint(before)
    table.append(pa.table({"id": pa.array([3], pa.int64()), "item": ["fig"]}))  # the same handle, new keys
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [1, 2, 3]


def test_a_held_table_refreshes_ahead_of_an_assumed_lifetime(stack: Stack) -> None:
    """``assumed_credential_ttl``: keys that state no expiry are reloaded ahead of the lifetime the user
    assumes for them, so a table handle outlives its first keys without a forced refresh."""
    s = lakesession.connect(
        uri=stack.nessie.iceberg_uri,
        warehouse=WAREHOUSE,
        issuer=stack.issuer.issuer_uri,
        credential=f"etl:{SECRETS['etl']}",
        assumed_credential_ttl=3,
    )
    try:
        table = _table(s, "py.orders")
        entry = s.credential_store.entry("py.orders")
        assert entry.expires_at is not None and entry.expires_at - time.time() <= 3
        before = {c.config["s3.access-key-id"] for c in entry.credentials}
        time.sleep(2.5)  # due: refresh margin 1 s of the assumed 3 s (never before half the lifetime)
        assert _expire_all(stack.store) >= 1  # and the first keys really are dead now
        assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [1, 2, 3]
        refreshed = s.credential_store.entry("py.orders")
        assert refreshed.refreshes >= 1 and before.isdisjoint(
            c.config["s3.access-key-id"] for c in refreshed.credentials
        )
    finally:
        s.close()


def test_pyiceberg_remote_signing_by_nessie(session: lakesession.Session) -> None:
    """With ``access='remote-signing'`` Nessie signs every S3 request; the table holds no storage keys."""
    table = _table(session, "py.orders", access="remote-signing")
    assert table.config.get("s3.remote-signing-enabled") == "true"
    assert not any(k.endswith(("access-key-id", "secret-access-key", "session-token")) for k in table.config)
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [1, 2, 3]
    table.append(pa.table({"id": pa.array([4], pa.int64()), "item": ["kiwi"]}))
    assert sorted(_table(session, "py.orders").scan().to_arrow().column("id").to_pylist()) == [1, 2, 3, 4]


@pytest.mark.spark
def test_spark_crud_and_metadata_tables_through_the_gateway(session: lakesession.Session) -> None:
    spark = session.spark()
    spark.sql("CREATE NAMESPACE IF NOT EXISTS nessie.sp")
    spark.sql("CREATE TABLE nessie.sp.orders (id BIGINT, item STRING) USING iceberg")
    spark.sql("INSERT INTO nessie.sp.orders VALUES (1, 'apple'), (2, 'pear'), (3, 'fig')")
    spark.sql("DELETE FROM nessie.sp.orders WHERE id = 2")
    rows = [tuple(r) for r in spark.sql("SELECT id, item FROM nessie.sp.orders ORDER BY id").collect()]
    assert rows == [(1, "apple"), (3, "fig")]
    snapshots = spark.sql("SELECT operation FROM nessie.sp.orders.snapshots ORDER BY committed_at").collect()
    # Nessie serves table metadata with the current snapshot only (history is Nessie's commit log)
    assert [r.operation for r in snapshots] == ["overwrite"]  # the copy-on-write DELETE
    files = spark.sql("SELECT file_path FROM nessie.sp.orders.files").collect()
    assert files and all(r.file_path.startswith(f"s3://{BUCKET}/sp/orders") for r in files)
    # the same table from pyiceberg, as the same identity
    assert sorted(_table(session, "sp.orders").scan().to_arrow().column("id").to_pylist()) == [1, 3]
    conf = dict(spark.sparkContext.getConf().getAll())
    assert not any("secret-access-key" in k or "session-token" in k for k in conf)  # no storage keys in the conf
    assert all(v != session.identity.token() for v in conf.values())  # nor the user's token


@pytest.mark.spark
def test_spark_survives_expiry_by_reload(session: lakesession.Session, stack: Stack) -> None:
    """Every query reloads the table through the gateway, and Nessie vends fresh keys with each load."""
    spark = session.spark()
    spark.sql("CREATE NAMESPACE IF NOT EXISTS nessie.ex")
    spark.sql("CREATE TABLE IF NOT EXISTS nessie.ex.t (id BIGINT) USING iceberg")
    spark.sql("INSERT INTO nessie.ex.t VALUES (1)")
    assert _expire_all(stack.store) >= 1  # every key the JVM holds is dead now
    spark.sql("INSERT INTO nessie.ex.t VALUES (2)")
    assert [r.id for r in spark.sql("SELECT id FROM nessie.ex.t ORDER BY id").collect()] == [1, 2]
    # what the JVM gets for the table: the keys of this load, no refresh endpoint it could not use
    gw = session.gateway
    auth = {"Authorization": f"Bearer {gw.secret}", "X-Iceberg-Access-Delegation": "vended-credentials"}
    config = httpx.get(f"{gw.uri}/v1/config", params={"warehouse": WAREHOUSE}, headers=auth).json()
    assert config["overrides"]["uri"].startswith(gw.uri)  # rewritten: the JVM stays on the gateway
    prefix = config["defaults"]["prefix"]
    loaded = httpx.get(f"{gw.uri}/v1/{prefix}/namespaces/ex/tables/t", headers=auth)
    assert loaded.status_code == 200, loaded.text
    table_config = loaded.json()["config"]
    assert table_config["s3.access-key-id"] and "client.refresh-credentials-endpoint" not in table_config
    assert table_config["client.region"] == stack.store.region


@pytest.mark.spark
def test_spark_refreshes_through_the_gateway_with_an_assumed_lifetime(stack: Stack) -> None:
    """With ``assumed_credential_ttl`` the gateway stamps an expiry on Nessie's keys: Iceberg Java then takes
    the gateway's refresh endpoint (served by reloading the table at Nessie) instead of keeping the load's keys.
    (Keys revoked out of band are not noticed before the assumed lifetime: the gateway caches refreshes.)"""
    s = lakesession.connect(
        uri=stack.nessie.iceberg_uri,
        warehouse=WAREHOUSE,
        issuer=stack.issuer.issuer_uri,
        credential=f"etl:{SECRETS['etl']}",
        catalog_name="nessie_assumed",
        master="local[2]",
        spark_conf=SPARK_TEST_CONF,
        assumed_credential_ttl=60,  # under Iceberg Java's 5-minute prefetch: it refreshes before using the keys
    )
    try:
        spark = s.spark()
        spark.sql("CREATE NAMESPACE IF NOT EXISTS nessie_assumed.lt")
        spark.sql("CREATE TABLE IF NOT EXISTS nessie_assumed.lt.t (id BIGINT) USING iceberg")
        spark.sql("INSERT INTO nessie_assumed.lt.t VALUES (1), (2)")
        spark.sql("INSERT INTO nessie_assumed.lt.t VALUES (3)")
        assert [r.id for r in spark.sql("SELECT id FROM nessie_assumed.lt.t ORDER BY id").collect()] == [1, 2, 3]
        refreshes = [r for r in s.access_log.records() if r.action == "refresh_credentials"]
        assert refreshes and all(r.status == 200 for r in refreshes)
        assert any(r.via in ("upstream", "shared") for r in refreshes)  # reloads at Nessie: it has no /credentials
        stamped = [(r.time, r.credentials_expire_at) for r in refreshes if r.credentials_expire_at is not None]
        assert stamped and all(0 < at - t <= 61 for t, at in stamped)  # the assumed 60 s, stamped by the gateway
        gw = s.gateway
        auth = {"Authorization": f"Bearer {gw.secret}", "X-Iceberg-Access-Delegation": "vended-credentials"}
        loaded = httpx.get(f"{gw.uri}/v1/main%7Cwarehouse/namespaces/lt/tables/t", headers=auth).json()["config"]
        assert loaded["client.refresh-credentials-endpoint"].startswith(gw.uri)
        assert int(loaded["s3.session-token-expires-at-ms"]) / 1000 - time.time() <= 60
    finally:
        s.close()


@pytest.mark.spark
def test_spark_remote_signing_by_nessie_through_the_gateway(stack: Stack) -> None:
    """``access='remote-signing'`` against a catalog nobody here wrote: Nessie names its signer in each table
    load, the gateway points the JVM's signer at itself and forwards each signing call to Nessie as the user;
    the JVM holds no storage keys (conf and table FileIO) and Nessie's emulator accepts what Nessie signed.
    Runs after other signing sessions on the same JVM too (Iceberg's signer client is static, issue 15)."""
    s = lakesession.connect(
        uri=stack.nessie.iceberg_uri,
        warehouse=WAREHOUSE,
        issuer=stack.issuer.issuer_uri,
        credential=f"etl:{SECRETS['etl']}",
        catalog_name="nessie_signed",
        master="local[2]",
        spark_conf=SPARK_TEST_CONF,
        access="remote-signing",
    )
    try:
        since = time.time()
        spark = s.spark()
        spark.sql("CREATE NAMESPACE IF NOT EXISTS nessie_signed.rs")
        spark.sql("CREATE TABLE IF NOT EXISTS nessie_signed.rs.t (id BIGINT, item STRING) USING iceberg")
        spark.sql("INSERT INTO nessie_signed.rs.t VALUES (1, 'apple'), (2, 'pear')")
        rows = [tuple(r) for r in spark.sql("SELECT id, item FROM nessie_signed.rs.t ORDER BY id").collect()]
        assert rows == [(1, "apple"), (2, "pear")]
        conf = dict(spark.sparkContext.getConf().getAll())
        assert not any(k.endswith(("access-key-id", "secret-access-key", "session-token")) for k in conf)
        jvm: Any = spark._jvm
        levels = spark.sparkContext._gateway.new_array(jvm.java.lang.String, 1)  # type: ignore[union-attr]
        levels[0] = "rs"
        ident = jvm.org.apache.spark.sql.connector.catalog.Identifier.of(levels, "t")
        jcat = spark._jsparkSession.sessionState().catalogManager().catalog("nessie_signed")
        io_props = {str(k): str(v) for k, v in dict(jcat.loadTable(ident).table().io().properties()).items()}
        assert io_props.get("s3.remote-signing-enabled") == "true"
        assert not any(k.endswith(("access-key-id", "secret-access-key", "session-token")) for k in io_props)
        # signer calls go to this session's /sign/{id} route, whichever key the JVM's Iceberg reads
        for key in ("s3.signer.endpoint", "signer.endpoint"):
            assert io_props[key].startswith(f"{s.gateway.uri}/sign/"), (key, io_props.get(key))
        signed = [r for r in s.access_log.records(since) if r.action == "sign_request"]
        assert signed and all(r.status == 200 for r in signed), [(r.action, r.status) for r in signed]
        assert sum(r.count for r in signed) >= 4  # at least: data file PUT, manifest PUTs, data file GET
    finally:
        s.close()


def test_what_nessie_answers_for_a_missing_table_and_warehouse_is_one_line(stack: Stack) -> None:
    """Nessie's own answers (not a double's) meet the mappings every catalog gets: a missing table names
    itself, an unknown warehouse is the ``ConfigError`` naming it."""
    from pyiceberg.exceptions import NoSuchTableError

    from lakesession.errors import ConfigError

    kwargs = dict(uri=stack.nessie.iceberg_uri, issuer=stack.issuer.issuer_uri, credential=f"etl:{SECRETS['etl']}")
    with lakesession.connect(warehouse=WAREHOUSE, catalog_name="nessie_404", **kwargs) as s:
        with pytest.raises(NoSuchTableError) as missing:
            s.table("nowhere.orders")
    said = str(missing.value)
    assert "nowhere.orders" in said and "\n" not in said, said
    with lakesession.connect(warehouse="nosuchwh", catalog_name="nessie_nowh", **kwargs) as s:
        with pytest.raises(ConfigError) as unknown:  # Nessie says 500 IllegalStateException, not a 404
            s.table("nowhere.orders")
    said = str(unknown.value)
    assert "no warehouse 'nosuchwh'" in said and "\n" not in said and "Fix:" in said, said
