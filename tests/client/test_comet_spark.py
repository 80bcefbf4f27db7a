"""Comet's native scans and raw s3a:// paths with credentials from the session's gateway (issue #22), Spark 4.1.

One SparkContext (Comet loaded, ``comet=True``) for the whole module; alice and bob each have a Session
(a SparkSession of their own on it). The ground truth is the store: a recorder wrapped around the S3
emulator's WSGI app notes every request (method, path, access key, status, user agent); Comet's native
reader sends no user agent (Iceberg's S3FileIO, S3A and boto3 do), and each access key's STS session
policy (the emulator's realm) says which prefix it was minted for.
"""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakesession
from lakesession.errors import CatalogAccessError
from lakesession.reference import ReferenceCatalog
from tests.conftest import SPARK_TEST_CONF
from tests.factories import make_catalog

_SPARK_LINE = ".".join(__import__("pyspark").__version__.split(".")[:2])
pytestmark = [
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.own_jvm,  # Comet must be on the JVM's class path and in its plugins from launch
    # Comet 1.2.0 exists here for Spark 4.1 only; elsewhere comet=True is a ConfigError (tests/client/test_comet_conf.py)
    pytest.mark.skipif(_SPARK_LINE != "4.1", reason=f"no Comet release for Spark {_SPARK_LINE} on Maven Central"),
]


TTL = 30  # seconds: vended credentials' lifetime
IO_TIMEOUT = "5s"  # Comet's I/O deadline: the provider asks for 15 s of life (5 + margin), half a lifetime
WH = "s3://comet-wh/wh"
RAW = "comet-raw"
POLICY = f"""
principals:
  - {{name: etl, type: service}}
  - {{name: alice, type: user, client_id: alice, client_secret: alice-comet-123}}
  - {{name: bob, type: user, client_id: bob, client_secret: bob-comet-123}}
roles:
  - {{name: eng, members: [etl]}}
  - {{name: r_alice, members: [alice]}}
  - {{name: r_bob, members: [bob]}}
locations:
  - {{location: s3://{RAW}/landing/}}
  - {{location: s3://{RAW}/secret/}}
grants:
  - {{role: eng, privilege: CATALOG_MANAGE_CONTENT, on: catalog}}
  - {{role: r_alice, privilege: CATALOG_MANAGE_CONTENT, on: namespace na}}
  - {{role: r_alice, privilege: LOCATION_READ, on: location s3://{RAW}/landing/}}
  - {{role: r_bob, privilege: CATALOG_MANAGE_CONTENT, on: namespace nb}}
"""


@dataclass
class Hit:
    at: float
    method: str
    path: str
    key: str
    status: int
    agent: str
    query: str = ""


class StoreLog:
    """Wraps the emulator's WSGI app: records each request; ``delay`` may slow chosen ones down."""

    def __init__(self, app: Any):
        self.app, self.hits = app, []  # type: list[Hit]
        self.delay: Callable[[str, str, str], float] = lambda method, path, agent: 0.0
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
        agent = environ.get("HTTP_USER_AGENT", "")
        pause = self.delay(method, path, agent)
        if pause:
            time.sleep(pause)
        status: list[str] = []

        def capture(code: str, headers: Any, *exc: Any) -> Any:
            status.append(code)
            return start_response(code, headers, *exc)

        result = self.app(environ, capture)
        key = environ.get("HTTP_AUTHORIZATION", "").partition("Credential=")[2].partition("/")[0]
        with self._lock:
            code = int(status[0][:3]) if status else 0
            self.hits.append(Hit(time.time(), method, path, key, code, agent, environ.get("QUERY_STRING", "")))
        return result

    def native(self, since: float, prefix: str) -> list[Hit]:
        """Requests of Comet's native readers under ``prefix`` (/bucket/key...): iceberg-rust (opendal) sends
        no user agent, the raw Parquet scan (object_store) its own; the JVM's readers name the AWS SDK."""
        return [
            h
            for h in self.hits
            if h.at >= since and h.path.startswith(prefix) and (not h.agent or h.agent.startswith("object_store"))
        ]

    def agents(self, since: float, prefix: str) -> set[str]:
        return {h.agent.split(" ")[0] for h in self.hits if h.at >= since and h.path.startswith(prefix)}


def minted_for(catalog: ReferenceCatalog, key: str) -> str:
    """The STS session policy the emulator holds for ``key`` (JSON text)."""
    session = catalog.s3_emulator._realm.sessions.get(key)
    assert session is not None, f"{key} is not an STS session key of this store"
    return json.dumps(session.policy)


def _parquet(rows: int, start_at: int) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(range(start_at, start_at + rows), pa.int64())}), buf)
    return buf.getvalue()


@pytest.fixture(scope="module")
def cat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ReferenceCatalog, StoreLog]]:
    with make_catalog(
        POLICY, warehouse=WH, s3_emulator=True, credential_ttl=TTL, data_dir=tmp_path_factory.mktemp("comet")
    ) as handle:
        emu = handle.s3_emulator
        emu.create_bucket(RAW)
        admin = emu.client()
        admin.put_object(Bucket=RAW, Key="landing/part-0.parquet", Body=_parquet(1000, 0))
        admin.put_object(Bucket=RAW, Key="landing/part-1.parquet", Body=_parquet(1000, 1000))
        admin.put_object(Bucket=RAW, Key="secret/part-0.parquet", Body=_parquet(10, 0))
        etl = {"Authorization": f"Bearer {handle.admin.token_for('etl')}"}
        for ns in ("na", "nb"):
            r = httpx.post(f"{handle.uri}/v1/lakesession/namespaces", json={"namespace": [ns]}, headers=etl, timeout=30)
            assert r.status_code == 200, r.text
        log = StoreLog(emu._server.app)
        emu._server.app = log
        yield handle, log


@pytest.fixture(scope="module")
def users(cat: tuple[ReferenceCatalog, StoreLog]) -> Iterator[dict[str, lakesession.Session]]:
    handle, _ = cat
    endpoint = handle.s3_emulator.endpoint
    conf = {
        **SPARK_TEST_CONF,
        "spark.comet.iceberg.ioTimeout": IO_TIMEOUT,
        # S3A and Comet's raw Parquet reader find the store here (an S3-compatible endpoint, path-style)
        "spark.hadoop.fs.s3a.endpoint": endpoint,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
    }
    out: dict[str, lakesession.Session] = {}
    try:
        for user in ("alice", "bob"):
            out[user] = lakesession.connect(
                uri=handle.uri,
                credential=f"{user}:{user}-comet-123",
                token_url=f"{handle.issuer_uri}/token",
                warehouse=handle.warehouse,
                catalog_name=f"lake_{user}",
                master="local[2]",
                spark_conf=conf,
                comet=True,
            )
        yield out
    finally:
        for s in out.values():
            s.close()


def _plan(df: Any) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def test_native_iceberg_scans_of_two_users_sign_only_with_their_own_tables_keys(
    cat: tuple[ReferenceCatalog, StoreLog], users: dict[str, lakesession.Session]
) -> None:
    handle, log = cat
    sparks = {u: s.spark() for u, s in users.items()}
    assert sparks["alice"].sparkContext is sparks["bob"].sparkContext
    for user, ns in (("alice", "na"), ("bob", "nb")):
        sparks[user].sql(f"CREATE TABLE lake_{user}.{ns}.t (id BIGINT, v DOUBLE) USING iceberg")
        sparks[user].sql(f"INSERT INTO lake_{user}.{ns}.t SELECT id, id * 1.5 FROM range(20000)")
    since = time.time()
    for _round in (1, 2):  # interleaved: each user's provider instance exists while the other reads
        for user, ns in (("alice", "na"), ("bob", "nb")):
            df = sparks[user].sql(f"SELECT count(*), sum(v) FROM lake_{user}.{ns}.t")
            assert "CometIcebergNativeScan" in _plan(df)
            assert df.collect()[0][0] == 20000
    keys = {ns: {h.key for h in log.native(since, f"/comet-wh/wh/{ns}/")} for ns in ("na", "nb")}
    assert keys["na"] and keys["nb"], "Comet's native reader made no requests"
    assert not keys["na"] & keys["nb"], "bob's native scan signed with alice's keys (or the reverse)"
    for ns, other in (("na", "nb"), ("nb", "na")):
        for key in keys[ns]:
            policy = minted_for(handle, key)
            assert f"wh/{ns}/t/" in policy and f"wh/{other}/" not in policy
    assert all(h.status < 300 for h in log.native(since, "/comet-wh/"))


def test_a_native_scan_running_across_several_credential_lifetimes_completes(
    cat: tuple[ReferenceCatalog, StoreLog], users: dict[str, lakesession.Session]
) -> None:
    handle, log = cat
    spark = users["alice"].spark()
    spark.sql("CREATE TABLE lake_alice.na.long (id BIGINT, v DOUBLE) USING iceberg")
    spark.sql("INSERT INTO lake_alice.na.long SELECT /*+ REPARTITION(64) */ id, id * 2.0 FROM range(32000)")
    # the store answers Comet's reads of this table slowly (2 s, within its 5 s deadline; two tasks read
    # one request at a time each): the 64 files take > 2 lifetimes (2 x 30 s)
    log.delay = lambda method, path, agent: 2.0 if not agent and "/wh/na/long/data/" in path else 0.0
    since = time.time()
    try:
        df = spark.sql("SELECT count(*), sum(v) FROM lake_alice.na.long")
        assert "CometIcebergNativeScan" in _plan(df)
        row = df.collect()[0]
    finally:
        log.delay = lambda method, path, agent: 0.0
    took = time.time() - since
    assert row[0] == 32000 and row[1] == 2.0 * sum(range(32000))
    hits = log.native(since, "/comet-wh/wh/na/long/data/")
    assert hits and all(h.status < 300 for h in hits)
    assert took > 2 * TTL, f"the query took {took:.0f} s: not across two lifetimes"
    keys = list(dict.fromkeys(h.key for h in hits))
    assert len(keys) >= 2, f"one key for {took:.0f} s of reads: credentials were not refreshed"
    for key in keys:
        policy = minted_for(handle, key)
        assert "wh/na/long/" in policy and "wh/na/t/" not in policy


def test_raw_s3a_paths_granted_read_natively_and_by_s3a_ungranted_refused(
    cat: tuple[ReferenceCatalog, StoreLog], users: dict[str, lakesession.Session]
) -> None:
    handle, log = cat
    spark = users["alice"].spark()
    since = time.time()
    # a glob: S3A lists "landing/" rather than probing the object "landing", which the location's
    # credentials (path-boundary safe: "landing/…" only) may not read
    df = spark.read.parquet(f"s3a://{RAW}/landing/*.parquet")
    assert "CometNativeScan" in _plan(df) or "CometScan" in _plan(df), _plan(df)
    assert df.count() == 2000 and df.agg({"id": "sum"}).collect()[0][0] == sum(range(2000))
    native = log.native(since, f"/{RAW}/landing/")
    assert native and all(h.status < 300 for h in native), log.agents(since, f"/{RAW}/")
    for key in {h.key for h in native}:
        assert f"{RAW}/landing/" in minted_for(handle, key) and "secret" not in minted_for(handle, key)

    spark.conf.set("spark.comet.enabled", "false")  # Spark's own reader: S3A with lakesession's SDK v2 provider
    try:
        since = time.time()
        plain = spark.read.parquet(f"s3a://{RAW}/landing/*.parquet")
        assert "Comet" not in _plan(plain)
        assert plain.agg({"id": "sum"}).collect()[0][0] == sum(range(2000))
        s3a = [h for h in log.hits if h.at >= since and h.path.startswith(f"/{RAW}/landing") and h.agent]
        assert s3a and {h.key for h in s3a} <= {h.key for h in log.hits if h.key.startswith("ASIA")}
        landing_key = s3a[-1].key
        assert f"{RAW}/landing/" in minted_for(handle, landing_key)

        # a write with a read-only location grant: the catalog refuses it (naming LOCATION_WRITE) before the store
        since = time.time()
        with pytest.raises(CatalogAccessError, match="LOCATION_WRITE") as write_error:
            spark.range(3).write.mode("overwrite").parquet(f"s3a://{RAW}/landing/out/")
        assert f"s3a://{RAW}/landing/out" in str(write_error.value)
        puts = [h for h in log.hits if h.at >= since and h.method in ("PUT", "POST") and h.path.startswith(f"/{RAW}/")]
        assert puts == []
    finally:
        spark.conf.set("spark.comet.enabled", "true")

    # a location without a grant: a CatalogAccessError naming it, and the store refuses alice's key there
    since = time.time()
    for comet_on in ("true", "false"):
        spark.conf.set("spark.comet.enabled", comet_on)
        try:
            with pytest.raises(CatalogAccessError, match=f"s3a?://{RAW}/secret"):
                spark.read.parquet(f"s3a://{RAW}/secret/*.parquet").collect()
        finally:
            spark.conf.set("spark.comet.enabled", "true")
    tried = [h for h in log.hits if h.at >= since and h.path.startswith(f"/{RAW}") and "secret" in h.query + h.path]
    assert tried == []  # refused by the catalog (S3A's request check, Comet's provider) before the store
    creds = handle.s3_emulator.client(credentials=_creds_for(users["alice"], f"s3://{RAW}/landing/x"))
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError, match="AccessDenied"):
        creds.get_object(Bucket=RAW, Key="secret/part-0.parquet")


def _creds_for(session: lakesession.Session, path: str) -> Any:
    """The credentials the JVM would get for ``path``: the gateway's path route, with the session secret."""
    from lakesession.reference.storage.emulator import Credentials

    gw = session._gateway
    assert gw is not None
    r = httpx.get(
        f"{gw.uri}/lakesession/path-credentials",
        params={"path": path},
        headers={"Authorization": f"Bearer {gw.secret}"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    cfg = r.json()["storage-credentials"][0]["config"]
    return Credentials(cfg["s3.access-key-id"], cfg["s3.secret-access-key"], cfg["s3.session-token"])


def test_a_revoked_table_grant_stops_a_running_comet_loop_within_one_ttl(
    cat: tuple[ReferenceCatalog, StoreLog], users: dict[str, lakesession.Session]
) -> None:
    handle, _ = cat
    spark = users["bob"].spark()
    spark.sql("CREATE TABLE lake_bob.nb.loop (id BIGINT) USING iceberg")
    spark.sql("INSERT INTO lake_bob.nb.loop SELECT id FROM range(1000)")
    df = spark.sql("SELECT sum(id) FROM lake_bob.nb.loop")
    assert "CometIcebergNativeScan" in _plan(df) and df.collect()[0][0] == sum(range(1000))
    revoked_at = None
    stopped = None
    deadline = time.time() + 6 * TTL
    while time.time() < deadline:
        if revoked_at is None:
            handle.admin.revoke("r_bob", "CATALOG_MANAGE_CONTENT", "namespace nb")
            revoked_at = time.time()
        try:
            spark.sql("SELECT sum(id) FROM lake_bob.nb.loop").collect()
        except CatalogAccessError as exc:
            stopped = time.time()
            assert "nb" in str(exc) or "forbidden" in str(exc).lower() or "not authorized" in str(exc).lower()
            break
        time.sleep(1)
    assert revoked_at is not None and stopped is not None, "the loop kept reading after the revocation"
    assert stopped - revoked_at <= TTL
