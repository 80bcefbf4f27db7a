"""lakesession's client against Apache Iceberg's own REST catalog fixture: the plain spec reference.

The fixture (``org.apache.iceberg.rest.RESTCatalogServer`` from ``iceberg-open-api``'s test-fixtures
jar on Maven Central, see ``tests/_restfixture.py``) is a JDBC catalog behind the spec's routes and
nothing else: no authentication (its ``/v1/oauth/tokens`` hands any client a token, and no route
checks one), no credential vending, no ``/credentials`` endpoint, no remote signing, no grants.

Storage: a ``file://`` warehouse in a temporary directory. The fixture cannot vend credentials — its
``include-credentials`` option copies the catalog's own static S3 keys into every table's config —
and lakesession's client holds no standing storage keys, so an S3 store would have meant handing the
catalog's keys to every client. With ``file://`` there are no credentials anywhere, which is the
honest setup for a catalog without vending: lakesession must work without any, attempt no refresh
(the fixture's own request log shows no ``/credentials`` call), and show an empty credential table
without failing. "Survives a credential expiry" does not apply: there is nothing to expire.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pyarrow as pa
import pytest

import lakesession
from tests._restfixture import RestFixture, restfixture

pytestmark = pytest.mark.slow

CATALOG = "apache"


@pytest.fixture(scope="module")
def fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestFixture]:
    with restfixture(tmp_path_factory.mktemp("iceberg-rest-fixture")) as rf:
        yield rf


@pytest.fixture(scope="module")
def session(fixture: RestFixture) -> Iterator[lakesession.Session]:
    # the fixture's token endpoint (client credentials) is lakesession's ordinary OAuth path
    s = lakesession.connect(uri=fixture.uri, credential="alice:not-checked", catalog_name=CATALOG)
    yield s
    s.close()


def credential_calls(fixture: RestFixture) -> list[str]:
    return [line for line in fixture.request_lines() if "/credentials" in line]


def test_the_fixture_offers_no_credentials_endpoint_and_no_grants(fixture: RestFixture) -> None:
    """What lakesession is up against, as the fixture's ``/v1/config`` says it."""
    config = httpx.get(f"{fixture.uri}/v1/config").json()
    endpoints = config["endpoints"]
    assert "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}" in endpoints
    assert "GET /v1/{prefix}/namespaces/{namespace}/views/{view}" in endpoints  # views: the JDBC catalog has them
    assert not [e for e in endpoints if e.endswith("/credentials")]
    assert "prefix" not in config["overrides"]


def test_pyiceberg_round_trip_without_storage_credentials(session: lakesession.Session, fixture: RestFixture) -> None:
    session.catalog.create_namespace("py")
    session.catalog.create_table(("py", "orders"), schema=pa.schema([("id", pa.int64()), ("item", pa.string())]))
    table = session.table("py.orders")
    table.append(pa.table({"id": pa.array([1, 2], pa.int64()), "item": ["apple", "pear"]}))
    assert sorted(table.scan().to_arrow().column("item").to_pylist()) == ["apple", "pear"]
    assert table.metadata_location.startswith(f"{fixture.location}/py/orders/metadata/")
    assert list((fixture.warehouse / "py" / "orders" / "data").glob("*.parquet"))  # really written, by pyiceberg
    # nothing vended, nothing tracked, nothing refreshed
    assert session.credential_store.snapshot() == []
    assert session.credentials().empty
    assert credential_calls(fixture) == []


def test_a_session_without_any_login_reads_the_same_tables(session: lakesession.Session, fixture: RestFixture) -> None:
    """The fixture checks no token, so ``identity="none"`` (no ``Authorization`` header at all) is enough."""
    anonymous = lakesession.connect(uri=fixture.uri, identity="none", catalog_name="open")
    try:
        assert anonymous.identity.describe()["kind"] == "none" and anonymous.identity.principal is None
        table = anonymous.table("py.orders")  # written by the other session's pyiceberg test
        assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [1, 2]
        table.append(pa.table({"id": pa.array([9], pa.int64()), "item": ["plum"]}))
        assert sorted(session.table("py.orders").scan().to_arrow().column("id").to_pylist()) == [1, 2, 9]
    finally:
        anonymous.close()


def test_grants_are_unknown_without_a_grants_endpoint(session: lakesession.Session) -> None:
    """The fixture answers 400 "No route for request" to anything outside the spec (not 404)."""
    assert session.grants().to_dict("records") == [
        {"securable": "unknown", "privileges": "unknown", "granted": "unknown", "roles": "unknown"}
    ]


@pytest.mark.spark
def test_spark_crud_and_metadata_tables_through_the_gateway(session: lakesession.Session, fixture: RestFixture) -> None:
    spark = session.spark()
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.sp")
    spark.sql(f"CREATE TABLE {CATALOG}.sp.orders (id BIGINT, item STRING) USING iceberg")
    spark.sql(f"INSERT INTO {CATALOG}.sp.orders VALUES (1, 'apple'), (2, 'pear'), (3, 'fig')")
    spark.sql(f"DELETE FROM {CATALOG}.sp.orders WHERE id = 2")
    rows = [tuple(r) for r in spark.sql(f"SELECT id, item FROM {CATALOG}.sp.orders ORDER BY id").collect()]
    assert rows == [(1, "apple"), (3, "fig")]
    snapshots = spark.sql(f"SELECT operation FROM {CATALOG}.sp.orders.snapshots ORDER BY committed_at").collect()
    assert [r.operation for r in snapshots] == ["append", "overwrite"]  # copy-on-write DELETE
    files = spark.sql(f"SELECT file_path FROM {CATALOG}.sp.orders.files").collect()
    assert files and all(r.file_path.startswith(f"{fixture.location}/sp/orders/data/") for r in files)
    # the same table from pyiceberg, and a pyiceberg write Spark then reads
    table = session.table("sp.orders")
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [1, 3]
    table.append(pa.table({"id": pa.array([4], pa.int64()), "item": ["kiwi"]}))
    spark.sql(f"REFRESH TABLE {CATALOG}.sp.orders")
    assert [r.id for r in spark.sql(f"SELECT id FROM {CATALOG}.sp.orders ORDER BY id").collect()] == [1, 3, 4]
    # Spark went through the gateway, which tracked loads but no credentials (none were vended)
    actions = {r.action for r in session.access_log.records()}
    assert {"create_table", "load_table", "commit_table"} <= actions, actions
    assert "refresh_credentials" not in actions
    creds = session.credentials()
    assert set(creds["engine"]) == {"spark"}  # pyiceberg's reads left nothing in the credential store
    assert set(creds["table"]) == {"sp.orders"}  # not the `sp.orders.snapshots`/`.files` probes (404)
    assert set(creds["state"]) == {"unknown"} and creds["expires_at"].isna().all()  # no expiry seen: none vended
    assert (creds["refreshes"] == 0).all()
    assert credential_calls(fixture) == []
    spark.sql(f"DROP TABLE {CATALOG}.sp.orders")
    assert "orders" not in {r.tableName for r in spark.sql(f"SHOW TABLES IN {CATALOG}.sp").collect()}


@pytest.mark.spark
def test_spark_multi_level_namespace_reaches_the_fixture_with_its_separator(
    session: lakesession.Session, fixture: RestFixture
) -> None:
    """The fixture asks for ``%2E`` between namespace levels and its Jetty 12 refuses Iceberg Java's ``%1F``
    (400 "Suspicious Path Character"): the gateway re-joins the levels, so ``lvl.two`` works from Spark."""
    spark = session.spark()
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.lvl")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.lvl.two")
    spark.sql(f"CREATE TABLE IF NOT EXISTS {CATALOG}.lvl.two.t (id BIGINT) USING iceberg")
    spark.sql(f"INSERT INTO {CATALOG}.lvl.two.t VALUES (7)")
    assert [r.id for r in spark.sql(f"SELECT id FROM {CATALOG}.lvl.two.t").collect()] == [7]
    assert [r.operation for r in spark.sql(f"SELECT operation FROM {CATALOG}.lvl.two.t.snapshots").collect()] == [
        "append"
    ]
    lines = fixture.request_lines()
    assert any("/v1/namespaces/lvl%2Etwo/tables/t HTTP" in line for line in lines)
    assert not [line for line in lines if "%1F" in line.upper() and '" 400 ' in line]  # none refused by Jetty
    assert sorted(session.table("lvl.two.t").scan().to_arrow().column("id").to_pylist()) == [7]  # pyiceberg too


@pytest.mark.spark
def test_gateway_offers_the_jvm_no_refresh_endpoint_when_nothing_was_vended(
    session: lakesession.Session, fixture: RestFixture
) -> None:
    """Without credentials there is nothing to refresh: the JVM's table config names no refresh endpoint."""
    spark = session.spark()
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.jr")
    spark.sql(f"CREATE TABLE IF NOT EXISTS {CATALOG}.jr.t (id BIGINT) USING iceberg")
    gw = session.gateway
    auth = {"Authorization": f"Bearer {gw.secret}", "X-Iceberg-Access-Delegation": "vended-credentials"}
    loaded = httpx.get(f"{gw.uri}/v1/namespaces/jr/tables/t", headers=auth)
    assert loaded.status_code == 200, loaded.text
    body = loaded.json()
    assert "client.refresh-credentials-endpoint" not in body.get("config", {})
    assert not body.get("storage-credentials")
    assert credential_calls(fixture) == []


@pytest.mark.spark
def test_widgets_and_status_without_credentials(session: lakesession.Session, fixture: RestFixture) -> None:
    """No credential to count down, refresh or revoke: the panel and the status render, nothing refreshes."""
    from lakesession.notebook._widgets import CredentialsPanel, GrantsTable, StatusWidget

    session.spark().sql(f"SELECT * FROM {CATALOG}.jr.t").collect()
    panel = CredentialsPanel(session, interval=None, auto_refresh=True)
    try:
        panel.tick()  # auto refresh: refresh_all() over an empty store
        assert panel.error.value == ""
        assert {(r["table"], r["state"]) for r in panel.model_rows()} >= {("jr.t", "unknown")}
        assert "jr.t" in panel._repr_mimebundle_()["text/html"]
    finally:
        panel.close()
    grants = GrantsTable(session)
    assert grants.error.value == "" and "unknown" in grants.fallback_html()
    grants.close()
    status = StatusWidget(session, interval=None)
    assert status.error.value == "" and status.seconds_left is None  # the fixture's token has no expiry
    assert "apache" in status.fallback_html()
    status.close()
    assert session.status()["state"] == "ready"
    assert session.credential_store.snapshot() == [] and credential_calls(fixture) == []


@pytest.mark.spark
def test_a_spark_view_read_through_session_sql(session: lakesession.Session, fixture: RestFixture) -> None:
    spark = session.spark()
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.vw")
    spark.sql(f"CREATE TABLE IF NOT EXISTS {CATALOG}.vw.sales (id BIGINT, amount BIGINT) USING iceberg")
    spark.sql(f"INSERT INTO {CATALOG}.vw.sales VALUES (1, 10), (2, 250), (3, 400)")
    spark.sql(f"CREATE OR REPLACE VIEW {CATALOG}.vw.big AS SELECT id FROM {CATALOG}.vw.sales WHERE amount > 100")
    assert httpx.get(f"{session.uri}/v1/namespaces/vw/views/big").status_code == 200  # stored by the fixture
    rows = session.sql(f"SELECT id FROM {CATALOG}.vw.big ORDER BY id").collect()
    assert [r.id for r in rows] == [2, 3]
    # the table under the view was loaded through a chain catalog, with `referenced-by` (which the fixture ignores)
    # (levels joined by the fixture's separator, %2E: "vw.big")
    chained = [line for line in fixture.request_lines() if "GET /v1/namespaces/vw/tables/sales?" in line]
    assert [line for line in chained if "referenced-by=vw.big" in line and '" 200 ' in line]


def test_what_the_rest_fixture_answers_for_a_missing_table_is_one_line(fixture: RestFixture) -> None:
    """Apache's REST fixture's own 404 meets the mapping every catalog gets: the missing table named. (It
    serves one catalog and ignores ``warehouse``: an unknown one is not an error there.)"""
    from pyiceberg.exceptions import NoSuchTableError

    with lakesession.connect(uri=fixture.uri, credential="alice:x", warehouse="nosuchwh", catalog_name="rf_404") as s:
        with pytest.raises(NoSuchTableError) as missing:
            s.table("nowhere.orders")
    said = str(missing.value)
    assert "nowhere.orders" in said and "\n" not in said, said
