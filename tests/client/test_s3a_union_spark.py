"""Raw ``s3a://`` reads and writes with several grants in one bucket (issue #33), the real Spark JVM, Spark 4.1.

One SparkContext (Comet loaded, ``comet=True``) for the module; alice (two locations and two tables in bucket
``lake``) and bob (no grant there) each have a Session on it. No test sets ``fs.s3a.endpoint``, path style or
a region: S3A finds the store as the catalog vends it. The ground truth is the store's request log (a recorder
around the S3 emulator) and the STS session policies the emulator holds for each access key.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import lakesession
from lakesession.errors import CatalogAccessError
from lakesession.reference import ReferenceCatalog
from lakesession.reference.storage.policysize import split_union
from tests.client.test_comet_spark import StoreLog, _parquet, minted_for
from tests.conftest import SPARK_TEST_CONF
from tests.factories import make_catalog

_SPARK_LINE = ".".join(__import__("pyspark").__version__.split(".")[:2])
pytestmark = [
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.own_jvm,  # Comet must be in the JVM's plugins from launch
    pytest.mark.skipif(_SPARK_LINE != "4.1", reason=f"no Comet release for Spark {_SPARK_LINE} on Maven Central"),
]


B = "lake"
WH = f"s3://{B}/wh"
POLICY = f"""
principals:
  - {{name: etl, type: service}}
  - {{name: alice, type: user, client_id: alice, client_secret: alice-union-123}}
  - {{name: bob, type: user, client_id: bob, client_secret: bob-union-123}}
roles:
  - {{name: eng, members: [etl]}}
  - {{name: r_alice, members: [alice]}}
  - {{name: r_bob, members: [bob]}}
locations:
  - {{location: s3://{B}/landing/}}
  - {{location: s3://{B}/landing_old/}}
  - {{location: s3://{B}/archive/}}
grants:
  - {{role: eng, privilege: CATALOG_MANAGE_CONTENT, on: catalog}}
  - {{role: r_alice, privilege: LOCATION_READ, on: location s3://{B}/landing/}}
  - {{role: r_alice, privilege: LOCATION_READ, on: location s3://{B}/archive/}}
  - {{role: r_alice, privilege: CATALOG_MANAGE_CONTENT, on: namespace ns}}
  - {{role: r_bob, privilege: TABLE_READ_PROPERTIES, on: namespace ns}}
"""
WIDE = "lake-wide"  # issue #40 B1: 64 granted locations of 31-60 characters, more than one STS policy holds
WIDE_NAMES = [f"landing/dept-{i:02d}/feed-{'x' * 40}"[: 31 + (i * 29) // 63] for i in range(64)]
POLICY += "".join(
    f"  - {{role: r_alice, privilege: LOCATION_WRITE, on: location s3://{WIDE}/{n}/}}\n" for n in WIDE_NAMES
)
POLICY = POLICY.replace(
    "grants:\n", "".join(f"  - {{location: s3://{WIDE}/{n}/}}\n" for n in WIDE_NAMES) + "grants:\n", 1
)
USER_SET = ("fs.s3a.endpoint", "fs.s3a.path.style.access", "fs.s3a.endpoint.region")


@pytest.fixture(scope="module")
def cat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ReferenceCatalog, StoreLog]]:
    with make_catalog(
        POLICY, warehouse=WH, s3_emulator=True, credential_ttl=900, data_dir=tmp_path_factory.mktemp("union")
    ) as handle:
        admin = handle.s3_emulator.client()
        admin.put_object(Bucket=B, Key="landing/part-0.parquet", Body=_parquet(1000, 0))
        admin.put_object(Bucket=B, Key="landing/part-1.parquet", Body=_parquet(1000, 1000))
        admin.put_object(Bucket=B, Key="archive/part-0.parquet", Body=_parquet(10, 5000))
        admin.put_object(Bucket=B, Key="landing_old/part-0.parquet", Body=_parquet(7, 0))
        for i, n in enumerate(WIDE_NAMES):
            admin.put_object(Bucket=WIDE, Key=f"{n}/part-0.parquet", Body=_parquet(10 + i, 100 * i))
            admin.put_object(Bucket=WIDE, Key=f"{n}_archive/part-0.parquet", Body=_parquet(3, 0))
        etl = {"Authorization": f"Bearer {handle.admin.token_for('etl')}"}
        r = httpx.post(f"{handle.uri}/v1/lakesession/namespaces", json={"namespace": ["ns"]}, headers=etl, timeout=30)
        assert r.status_code == 200, r.text
        log = StoreLog(handle.s3_emulator._server.app)
        handle.s3_emulator._server.app = log
        yield handle, log


@pytest.fixture(scope="module")
def users(cat: tuple[ReferenceCatalog, StoreLog]) -> Iterator[dict[str, lakesession.Session]]:
    handle, _ = cat
    out: dict[str, lakesession.Session] = {}
    try:
        for user in ("alice", "bob"):
            out[user] = lakesession.connect(
                uri=handle.uri,
                credential=f"{user}:{user}-union-123",
                token_url=f"{handle.issuer_uri}/token",
                warehouse=handle.warehouse,
                catalog_name=f"lake_{user}",
                master="local[2]",
                spark_conf=dict(SPARK_TEST_CONF),  # no fs.s3a.endpoint, path style or region: the catalog vends them
                comet=True,
            )
        yield out
    finally:
        for s in out.values():
            s.close()


def _user_set(spark: Any) -> dict[str, list[str]]:
    """The S3A store settings someone set (Hadoop's own core-default.xml values are not)."""
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    out = {}
    for k in USER_SET:
        sources = conf.getPropertySources(k)
        if conf.get(k) is not None and (sources is None or any(not s.endswith("-default.xml") for s in sources)):
            out[k] = list(sources or [])
    return out


def _comet(spark: Any, on: bool) -> None:
    spark.conf.set("spark.comet.enabled", "true" if on else "false")


def test_directory_reads_with_and_without_slash_comet_off_and_on(
    cat: tuple[ReferenceCatalog, StoreLog], users: dict[str, lakesession.Session]
) -> None:
    handle, log = cat
    spark = users["alice"].spark()
    assert _user_set(spark) == {}  # nothing set by hand, by anyone
    try:
        for on in (False, True):  # S3A, then Comet's native reader (its store comes from comet.store_conf)
            _comet(spark, on)
            for path in (f"s3a://{B}/landing/", f"s3a://{B}/landing"):
                since = time.time()
                df = spark.read.parquet(path)
                plan = str(df._jdf.queryExecution().executedPlan().toString())
                assert ("CometNativeScan" in plan or "CometScan" in plan) == on, plan  # Comet's reader, or S3A's
                assert df.count() == 2000, (on, path)
                assert df.agg({"id": "sum"}).collect()[0][0] == sum(range(2000)), (on, path)
                hits = [h for h in log.hits if h.at >= since and h.path.startswith(f"/{B}/")]
                assert hits and all(h.status != 403 for h in hits), (on, path, [h for h in hits if h.status == 403])
                for key in {h.key for h in hits if h.key}:
                    policy = minted_for(handle, key)
                    assert f"{B}/landing/" in policy and f"{B}/landing_old/" not in policy
    finally:
        _comet(spark, True)


def test_two_tables_and_two_locations_in_one_bucket_read_in_one_session(
    cat: tuple[ReferenceCatalog, StoreLog], users: dict[str, lakesession.Session]
) -> None:
    handle, log = cat
    spark = users["alice"].spark()
    for t in ("t1", "t2"):
        spark.sql(f"CREATE TABLE IF NOT EXISTS lake_alice.ns.{t} (id BIGINT) USING iceberg")
        spark.sql(f"INSERT INTO lake_alice.ns.{t} SELECT id FROM range(5)")
        assert spark.table(f"lake_alice.ns.{t}").count() >= 5
    _comet(spark, False)  # S3A itself: one credential for the whole bucket
    try:
        since = time.time()
        assert spark.read.parquet(f"s3a://{B}/landing/").count() == 2000
        assert spark.read.parquet(f"s3a://{B}/archive").agg({"id": "min"}).collect()[0][0] == 5000
        data_dir = spark.sql("SELECT file_path FROM lake_alice.ns.t1.files").first()[0].rsplit("/", 1)[0]
        assert data_dir.startswith(f"s3://{B}/wh/ns/t1")
        t1 = spark.read.parquet("s3a" + data_dir[2:])  # a loaded table's files, raw
        assert t1.count() >= 5
        s3a = [h for h in log.hits if h.at >= since and h.path.startswith(f"/{B}/") and h.agent.startswith("Hadoop")]
        assert s3a and all(h.status != 403 for h in s3a)
        for key in {h.key for h in s3a}:  # S3A's union keys: alice's prefixes in the bucket, nothing else
            policy = minted_for(handle, key)
            assert f"{B}/landing/" in policy and f"{B}/archive/" in policy
            assert f"{B}/landing_old/" not in policy
        assert f"{B}/wh/ns/t1" in minted_for(handle, s3a[-1].key)  # the union grew with the loaded table
    finally:
        _comet(spark, True)


def test_attack_a_path_outside_every_grant_is_refused_by_the_catalog_before_the_store(
    cat: tuple[ReferenceCatalog, StoreLog], users: dict[str, lakesession.Session]
) -> None:
    _, log = cat
    for who, path in (("bob", f"s3a://{B}/landing/"), ("alice", f"s3a://{B}/landing_old/")):
        spark = users[who].spark()
        _comet(spark, False)
        try:
            since = time.time()
            with pytest.raises(CatalogAccessError) as caught:
                spark.read.parquet(path).collect()
            message = str(caught.value)
            assert path.rstrip("/") in message and "LOCATION_READ" in message and who in message, message
            assert "\n" not in message and "at org." not in message and "Service: S3" not in message, message
            touched = [h for h in log.hits if h.at >= since and h.path.startswith(f"/{B}/{path.split('/')[3]}")]
            assert touched == [], touched  # the store never saw the request
        finally:
            _comet(spark, True)


def test_a_write_to_a_read_only_location_names_location_write_and_the_path(
    cat: tuple[ReferenceCatalog, StoreLog], users: dict[str, lakesession.Session]
) -> None:
    _, log = cat
    spark = users["alice"].spark()
    since = time.time()
    with pytest.raises(CatalogAccessError) as caught:
        spark.range(3).write.mode("overwrite").parquet(f"s3a://{B}/landing/out/")
    message = str(caught.value)
    assert f"s3a://{B}/landing/out" in message and "LOCATION_WRITE" in message, message
    assert "TABLE_WRITE_DATA" not in message and "at org." not in message
    writes = [
        h for h in log.hits if h.at >= since and h.method in ("PUT", "POST", "DELETE") and h.path.startswith(f"/{B}/")
    ]
    assert writes == [], writes  # refused before the store


def test_sixty_four_locations_in_one_bucket_are_read_and_written_through_several_keys(
    cat: tuple[ReferenceCatalog, StoreLog], users: dict[str, lakesession.Session]
) -> None:
    """#40 B1: the union of 64 locations needs several keys (was a 503 for the whole bucket); S3A signs each
    request with the key of its prefix: the first and the last key's prefixes read, the last one written."""
    handle, log = cat
    groups = split_union([f"s3://{WIDE}/{n}/" for n in WIDE_NAMES], write=False)
    assert len(groups) > 1
    first, last = (g.split(f"{WIDE}/", 1)[1].rstrip("/") for g in (groups[0][0], groups[-1][-1]))
    i_first, i_last = WIDE_NAMES.index(first), WIDE_NAMES.index(last)
    spark = users["alice"].spark()
    _comet(spark, False)  # S3A itself
    try:
        since = time.time()
        for n, i in ((first, i_first), (last, i_last)):
            df = spark.read.parquet(f"s3a://{WIDE}/{n}/")
            assert df.count() == 10 + i and df.agg({"id": "min"}).collect()[0][0] == 100 * i
        spark.range(5).write.mode("overwrite").parquet(f"s3a://{WIDE}/{last}/out/")
        assert spark.read.parquet(f"s3a://{WIDE}/{last}/out/").count() == 5
        hits = [
            h for h in log.hits if h.at >= since and h.path.startswith(f"/{WIDE}/") and h.agent.startswith("Hadoop")
        ]
        assert hits and all(h.status != 403 for h in hits), [h for h in hits if h.status == 403]
        used = {h.key for h in hits if h.key}
        assert len(used) >= 2  # the first key's prefix and the last key's, each signed with its own
        for key in used:
            policy = minted_for(handle, key)
            assert f"{WIDE}/{first}/" in policy or f"{WIDE}/{last}/" in policy
            assert not (f"{WIDE}/{first}/" in policy and f"{WIDE}/{last}/" in policy) or len(groups) == 1
            assert "_archive" not in policy
        with pytest.raises(CatalogAccessError):
            spark.read.parquet(f"s3a://{WIDE}/{last}_archive/").collect()
    finally:
        _comet(spark, True)
