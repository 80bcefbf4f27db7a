"""Raw ``s3a://`` paths in a plain ``lakesession.spark()`` — no Comet — on ``lakesession serve`` and on the
embedded default (issue #42 item 2), the real Spark JVM: Spark 4.1 here and in CI's default run, 3.5 in CI's Spark
matrix (``.ci/spark-matrix``), 4.0 by hand (``PYTHONPATH=<pyspark 4.0>:.``).

One JVM for the module, in a process of its own: ``lakesession.spark()`` on ``serve`` launches it (the catalog's
``/v1/config`` offers location credentials, so the JVM gets S3A), then bob (another user of ``serve``) and the
embedded default's demo user get sessions of their own on it. Spark 3.5 (Hadoop 3.3.4) runs the same tests
through lakesession's AWS SDK v1 classes (``*V1``); a line without S3A wiring would get one
``RawPathsUnavailableError`` line naming the supported lines and the fix instead.

Attack-minded: a user without LOCATION_READ gets no byte of a granted prefix through ``spark.read.parquet``,
``spark.read.text`` or ``binaryFile`` of one file, Hadoop's FileSystem API in the JVM, nor a table's data
directory he may see the metadata of; his gateway, asked directly with his session's secret, hands out no key.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakesession
from lakesession._spark.comet import HADOOP_FOR_SPARK
from lakesession.errors import CatalogAccessError, RawPathsUnavailableError
from tests._serve import Served
from tests.conftest import SPARK_TEST_CONF

# own_jvm: the module's first session must launch Spark (no suite JVM running: the catalog probe, S3A on the class path)
pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.own_jvm]
LINE = ".".join(__import__("pyspark").__version__.split(".")[:2])
WIRED = LINE in HADOOP_FOR_SPARK  # Spark lines whose sessions get S3A (4.1, 4.0: SDK v2; 3.5: SDK v1)

B = "lake"  # serve's bucket: the warehouse and both locations
E = f"rawemb-{secrets.token_hex(4)}"  # the embedded catalog's bucket (moto's names are global in a process)
POLICY = f"""
principals:
  - {{name: etl, type: service, client_id: etl, client_secret: etl-raw-123}}
  - {{name: alice, type: user, client_id: alice, client_secret: alice-raw-123}}
  - {{name: bob, type: user, client_id: bob, client_secret: bob-raw-123}}
roles:
  - {{name: eng, members: [etl]}}
  - {{name: r_alice, members: [alice]}}
  - {{name: r_bob, members: [bob]}}
locations:
  - {{location: s3://{B}/landing/}}
  - {{location: s3://{B}/landing_old/}}
grants:
  - {{role: eng, privilege: CATALOG_MANAGE_CONTENT, on: catalog}}
  - {{role: eng, privilege: LOCATION_WRITE, on: location s3://{B}/landing/}}
  - {{role: eng, privilege: LOCATION_WRITE, on: location s3://{B}/landing_old/}}
  - {{role: r_alice, privilege: LOCATION_READ, on: location s3://{B}/landing/}}
  - {{role: r_bob, privilege: TABLE_READ_PROPERTIES, on: namespace ns}}
"""


def _rows(n: int, start: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


def _connect(srv: Served, user: str, **extra: Any) -> dict[str, Any]:
    return {
        "uri": srv.uri,
        "credential": f"{user}:{user}-raw-123",
        "token_url": srv.token_endpoint,
        "warehouse": srv.lines["warehouse"],
        "catalog_name": f"lake_{user}",
        "master": "local[2]",
        "spark_conf": dict(SPARK_TEST_CONF),
        **extra,
    }


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``serve`` with its S3 emulator; etl writes ``landing/`` (3 rows + 2 rows), ``landing_old/`` (a sibling
    nobody reads) through its LOCATION_WRITE filesystems, and a table ``ns.t`` bob may see the metadata of."""
    root = tmp_path_factory.mktemp("rawserve")
    (root / "policy.yaml").write_text(POLICY)
    args = ["--port", "0", "--data-dir", str(root / "d"), "--bootstrap", str(root / "policy.yaml")]
    srv = Served([*args, "--warehouse", f"s3://{B}/wh", "--s3-emulator"])
    try:
        with lakesession.connect(**_connect(srv, "etl")) as etl:
            fs = etl.filesystem(f"s3://{B}/landing/", mode="write")
            pq.write_table(_rows(3, 0), f"{B}/landing/part-0.parquet", filesystem=fs)
            pq.write_table(_rows(2, 3), f"{B}/landing/part-1.parquet", filesystem=fs)
            old = etl.filesystem(f"s3://{B}/landing_old/", mode="write")
            pq.write_table(_rows(7, 100), f"{B}/landing_old/part-0.parquet", filesystem=old)
            etl.catalog.create_namespace("ns")
            table = etl.catalog.create_table(("ns", "t"), _rows(1, 0).schema)
            table.append(_rows(4, 500))
            srv.table_location = table.location()  # type: ignore[attr-defined]
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def alice(served: Served) -> Iterator[Any]:
    """A plain ``lakesession.spark()`` (no Comet) on ``serve``: the module's JVM starts here."""
    from pyspark import SparkContext

    assert SparkContext._active_spark_context is None  # this session launches Spark
    spark = lakesession.spark(**_connect(served, "alice"))
    yield spark
    session = lakesession.current_session()
    if session is not None:
        session.close()


@pytest.fixture(scope="module")
def bob(served: Served, alice: Any) -> Iterator[lakesession.Session]:
    with lakesession.connect(**_connect(served, "bob")) as session:
        session.spark()
        yield session


@pytest.fixture(scope="module")
def demo(alice: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[lakesession.Session]:
    """The embedded default's one user, on the running JVM: ``landing/`` granted LOCATION_READ, ``private/`` not."""
    session = lakesession.connect(data_dir=tmp_path_factory.mktemp("rawemb"), catalog_name="lake_demo")
    try:
        handle = session.embedded.handle
        for name in ("landing", "private"):
            handle.admin.register_location(f"s3://{E}/{name}/")
        handle.admin.create_role("raw_users", ["demo"])
        handle.admin.grant("raw_users", "LOCATION_READ", f"location s3://{E}/landing/")
        s3 = handle.s3_emulator.client()
        for key, table in (("landing/a.parquet", _rows(2, 10)), ("landing/b.parquet", _rows(1, 12))):
            sink = pa.BufferOutputStream()
            pq.write_table(table, sink)
            s3.put_object(Bucket=E, Key=key, Body=sink.getvalue().to_pybytes())
        s3.put_object(Bucket=E, Key="private/secret.parquet", Body=b"PAR1 not for demo")
        session.spark()
        yield session
    finally:
        session.close()


def _unavailable(call: Any) -> str:
    """A session without S3A: one line naming the supported lines and the fix (the Spark 3.5 path)."""
    with pytest.raises(RawPathsUnavailableError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message and "at org." not in message, message
    assert "Spark 4.1" in message and "Fix:" in message and "session.filesystem(" in message, message
    return message


def _refused(call: Any, path: str, who: str) -> str:
    """The ungranted read: one CatalogAccessError line naming the path, the principal and LOCATION_READ."""
    if not WIRED:
        return _unavailable(call)
    with pytest.raises(CatalogAccessError) as caught:
        call()
    message = str(caught.value)
    assert path.rstrip("/") in message and who in message and "LOCATION_READ" in message, message
    assert "\n" not in message and "at org." not in message and "Service: S3" not in message, message
    return message


@pytest.mark.parametrize("slash", ["/", ""])
def test_a_granted_user_reads_a_raw_directory_on_serve(alice: Any, slash: str) -> None:
    read = lambda: alice.read.parquet(f"s3a://{B}/landing{slash}")  # noqa: E731
    if not WIRED:
        _unavailable(lambda: read().collect())
        return
    assert sorted(r.id for r in read().collect()) == [0, 1, 2, 3, 4]
    assert alice.conf.get("spark.comet.enabled", "unset") == "unset"  # no Comet anywhere
    assert "CometPlugin" not in (alice.sparkContext.getConf().get("spark.plugins") or "")


@pytest.mark.parametrize("slash", ["/", ""])
def test_an_ungranted_user_is_refused_in_one_line_on_serve(bob: lakesession.Session, slash: str) -> None:
    path = f"s3a://{B}/landing{slash}"
    _refused(lambda: bob.spark().read.parquet(path).collect(), path, "bob")


def test_attack_no_other_spark_or_hadoop_route_reads_the_bytes(bob: lakesession.Session, served: Served) -> None:
    """bob tries what a user controlling his own Spark can: one file as text or binary, Hadoop's FileSystem
    API in the JVM, a table's data directory (he may read its metadata, not its data); then his gateway."""
    spark = bob.spark()
    one = f"s3a://{B}/landing/part-0.parquet"
    _refused(lambda: spark.read.text(one).collect(), one, "bob")
    _refused(lambda: spark.read.format("binaryFile").load(one).collect(), one, "bob")
    if WIRED:
        jvm: Any = spark._jvm
        conf = spark._jsparkSession.sessionState().newHadoopConf()
        path = jvm.org.apache.hadoop.fs.Path(one)
        with pytest.raises(Exception) as hadoop:
            path.getFileSystem(conf).open(path).read()
        said = str(hadoop.value)
        assert "LOCATION_READ" in said and "bob" in said and "PAR1" not in said
    props = dict(spark.sql("SHOW TBLPROPERTIES lake_bob.ns.t").collect())  # loaded through bob's gateway: granted
    assert props, props
    data = "s3a" + served.table_location[2:] + "/data/"
    if WIRED:
        with pytest.raises(CatalogAccessError) as caught:
            spark.read.parquet(data).collect()
        assert data.rstrip("/") in str(caught.value) and "\n" not in str(caught.value)
    else:
        _unavailable(lambda: spark.read.parquet(data).collect())
    gw = bob.gateway
    auth = {"Authorization": f"Bearer {gw.secret}"}
    for route, params in (
        ("path-credentials", {"path": f"s3://{B}/landing/part-0.parquet", "mode": "read"}),
        ("path-credentials", {"path": f"s3://{B}/wh/ns/t/data/", "mode": "read"}),
    ):
        r = httpx.get(f"{gw.uri}/lakesession/{route}", params=params, headers=auth, timeout=30)
        assert r.status_code == 403 and "storage-credentials" not in r.text, (route, params, r.text)
    r = httpx.get(f"{gw.uri}/lakesession/bucket-credentials", params={"bucket": B, "mode": "read"}, headers=auth)
    # S3A's own route: no prefix of the bucket is bob's, so no key at all (a 403 would do as well)
    assert r.status_code == 403 or (r.json()["prefixes"] == [] and r.json()["storage-credentials"] == []), r.text


@pytest.mark.parametrize("slash", ["/", ""])
def test_the_embedded_default_reads_a_granted_directory_and_refuses_another(
    demo: lakesession.Session, slash: str
) -> None:
    spark = demo.spark()
    if not WIRED:
        _unavailable(lambda: spark.read.parquet(f"s3a://{E}/landing{slash}").collect())
        return
    assert sorted(r.id for r in spark.read.parquet(f"s3a://{E}/landing{slash}").collect()) == [10, 11, 12]
    emulator = demo.embedded.handle.s3_emulator
    since = time.time()
    private = f"s3a://{E}/private{slash}"
    _refused(lambda: spark.read.parquet(private).collect(), private, "demo")
    _refused(lambda: spark.read.text(f"s3a://{E}/private/secret.parquet").collect(), f"s3a://{E}/private", "demo")
    touched = [r for r in emulator.requests if r.time >= since and r.path.startswith(f"/{E}/private")]
    assert touched == [], touched  # refused before the store: not even a HEAD


def test_serve_offers_location_credentials_and_a_catalog_that_cannot_answer_gets_no_jars(
    alice: Any, served: Served, tmp_path: Path
) -> None:
    """The launch decision: serve's ``/v1/config`` lists the route (the JVM has hadoop-aws); a catalog that cannot
    answer (nothing listens) gets none, and a raw read there says why in one line."""
    from lakesession._spark import _rawpaths

    token = served.token("alice", "alice-raw-123")
    assert _rawpaths.probe(served.uri, lambda: token, served.lines["warehouse"]) is True
    assert _rawpaths.probe(served.uri, lambda: "not-a-token", None) is False  # 401: no jars, no failure
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    started = time.monotonic()
    assert _rawpaths.probe(closed, lambda: token, None) is False
    assert time.monotonic() - started < 5
    class_path = alice.sparkContext.getConf().get("spark.driver.extraClassPath") or ""
    assert ("hadoop-aws" in class_path) == WIRED, class_path
    assert _rawpaths.wired(alice.sparkContext) == WIRED
