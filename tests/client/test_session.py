"""`lakesession.connect()`: configuration sources, identities, grants and audit views — no Spark needed."""

from __future__ import annotations

import logging
import threading

import pytest

import lakesession
from lakesession.config import ConfigError
from tests._stub import QuietHandler, StubServer
from tests.conftest import SECRETS


def who(session) -> str:  # type: ignore[no-untyped-def]
    session.identity.token()  # log in (client credentials fetch lazily)
    return session.identity.describe()["principal"]


def test_connect_with_client_credentials_shows_grants_and_identity(catalog) -> None:  # type: ignore[no-untyped-def]
    s = lakesession.connect(
        uri=catalog.uri,
        credential=f"alice:{SECRETS['alice']}",
        token_url=f"{catalog.issuer_uri}/token",
        warehouse="lakesession",
    )
    g = s.grants()
    row = g[g["securable"] == "namespace sales"].iloc[0]
    assert "TABLE_READ_DATA" in row["privileges"] and row["roles"] == "analysts"
    who = s.identity.describe()
    assert who["principal"] == "alice" and who["issuer"] == catalog.issuer_uri and who["expires_at"] > 0
    assert list(s.audit().columns) == [
        "time",
        "action",
        "object",
        "via_chain",
        "ran_on",
        "decision",
        "credentials_expire_at",
    ]
    text = repr(s) + repr(s.identity) + str(who)
    assert SECRETS["alice"] not in text and s.identity.token() not in text
    s.close()


def test_grants_unknown_without_a_grants_endpoint(catalog) -> None:  # type: ignore[no-untyped-def]
    s = lakesession.connect(uri=catalog.uri + "/nothing-here", token=catalog.admin.token_for("alice"))
    assert s.grants().to_dict("records") == [
        {"securable": "unknown", "privileges": "unknown", "granted": "unknown", "roles": "unknown"}
    ]


def test_grants_unknown_when_the_catalog_knows_no_such_route() -> None:
    """Apache's REST fixture answers 400 "No route for request" (not 404) to paths outside the spec."""

    class NoRoute(QuietHandler):
        def do_GET(self) -> None:
            message = f"No route for request: GET {self.path.lstrip('/')}"
            self.reply(400, {"error": {"message": message, "type": "BadRequestException", "code": 400}})

    with StubServer(NoRoute) as server:
        s = lakesession.connect(uri=server.url, token="t0ken-value")
        assert s.grants().to_dict("records") == [
            {"securable": "unknown", "privileges": "unknown", "granted": "unknown", "roles": "unknown"}
        ]


def test_named_catalog_from_config_file_and_pyiceberg_yaml(catalog, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        f"default: ref\ncatalogs:\n  ref:\n    uri: {catalog.uri}\n    warehouse: lakesession\n"
        f"    credential: alice:{SECRETS['alice']}\n    token_url: {catalog.issuer_uri}/token\n"
    )
    monkeypatch.setenv("LAKESESSION_CONFIG", str(cfg))
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path))
    (tmp_path / ".pyiceberg.yaml").write_text(
        f"catalog:\n  viaiceberg:\n    uri: {catalog.uri}\n    credential: bob:{SECRETS['bob']}\n"
        f"    oauth2-server-uri: {catalog.issuer_uri}/token\n    warehouse: lakesession\n"
    )
    assert who(lakesession.connect("ref")) == "alice"
    assert lakesession.connect().uri == catalog.uri  # the config's default catalog, not the embedded one
    assert who(lakesession.connect("viaiceberg")) == "bob"
    monkeypatch.setenv("LAKESESSION_CREDENTIAL", f"bob:{SECRETS['bob']}")  # environment beats the file
    assert who(lakesession.connect("ref")) == "bob"
    with pytest.raises(ConfigError, match="no catalog named 'nope'"):
        lakesession.connect("nope")


@pytest.mark.slow  # one device-flow polling interval (5 s)
def test_device_login_through_connect(catalog) -> None:  # type: ignore[no-untyped-def]
    prompts = []

    def approve(prompt) -> None:  # type: ignore[no-untyped-def]
        prompts.append(prompt)
        threading.Timer(0.2, catalog.admin.approve_device, args=(prompt.user_code, "alice")).start()

    s = lakesession.connect(uri=catalog.uri, issuer=catalog.issuer_uri, client_id="lakesession-cli", on_prompt=approve)
    assert prompts and prompts[0].verification_uri.startswith(catalog.issuer_uri)
    assert s.identity.describe()["principal"] == "alice"
    assert "namespace sales" in set(s.grants()["securable"])


def test_no_secret_in_debug_logs_or_errors(catalog, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.DEBUG)
    s = lakesession.connect(
        uri=catalog.uri, credential=f"alice:{SECRETS['alice']}", token_url=f"{catalog.issuer_uri}/token"
    )
    token = s.identity.token()
    s.grants()
    with pytest.raises(Exception) as err:
        lakesession.connect(
            uri=catalog.uri, credential="alice:wrong-secret", token_url=f"{catalog.issuer_uri}/token"
        ).identity.token()
    for text in (caplog.text, str(err.value), repr(err.value)):
        assert SECRETS["alice"] not in text and token not in text and "wrong-secret" not in text


# -- grants(): "unknown" only without a grants endpoint -----------------------------------------------------
def test_grants_raise_the_real_cause_instead_of_unknown(catalog) -> None:  # type: ignore[no-untyped-def]
    """An expired or forged token, a failing catalog and a silent one are errors, not "unknown" grants."""
    import socket

    from lakesession.errors import CatalogAccessError, LakesessionError

    s = lakesession.connect(uri=catalog.uri, token="not-a-token")
    with pytest.raises(CatalogAccessError, match="401.*log in again") as err:
        s.grants()
    assert err.value.kind == "not authorized" and err.value.status == 401 and "not-a-token" not in str(err.value)

    class Failing(QuietHandler):
        def do_GET(self) -> None:
            self.reply(503, b'{"error": {"message": "maintenance", "type": "ServiceUnavailable", "code": 503}}')

    with StubServer(Failing) as server:
        failing = lakesession.connect(uri=server.url, token="t0ken-value")
        with pytest.raises(CatalogAccessError, match="answered 503 .*: maintenance") as err:
            failing.grants()
        assert err.value.kind == "catalog failure"
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        quiet = lakesession.connect(uri=f"http://127.0.0.1:{silent.getsockname()[1]}", token="t0ken-value")
        with pytest.raises(LakesessionError, match="did not answer"):
            quiet.reports.grants(timeout=0.5)


def test_embedded_default_is_keyed_by_its_lifetimes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Asking for other token/credential lifetimes gives a catalog started with them, not the cached one."""
    from lakesession import embedded

    short = embedded.start_embedded(tmp_path, storage="file", access_token_ttl=600, credential_ttl=60)
    try:
        assert embedded.start_embedded(tmp_path, storage="file", access_token_ttl=600, credential_ttl=60) is short
        longer = embedded.start_embedded(tmp_path, storage="file", access_token_ttl=1200, credential_ttl=60)
        other_creds = embedded.start_embedded(tmp_path, storage="file", access_token_ttl=600, credential_ttl=120)
        assert longer is not short and other_creds is not short and other_creds is not longer
        assert short.handle.settings.access_token_ttl == 600 and longer.handle.settings.access_token_ttl == 1200
    finally:
        with embedded._lock:
            for key, emb in list(embedded._running.items()):
                if key.startswith(str(tmp_path.resolve())):
                    emb.handle.stop()
                    del embedded._running[key]


def test_server_start_keeps_an_explicit_credential_ttl_of_3600(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``credential_ttl=3600`` is a value, not "not given": it overrides the S3 settings' own lifetime."""
    from lakesession.reference import start
    from lakesession.reference.vending import S3Settings

    s3 = S3Settings(role_arn="arn:aws:iam::123456789012:role/vend", credential_ttl=900)
    explicit = start("s3://bucket/wh", data_dir=tmp_path / "a", s3=s3, credential_ttl=3600)
    default = start("s3://bucket/wh", data_dir=tmp_path / "b", s3=s3)
    try:
        assert explicit.settings.s3 is not None and explicit.settings.s3.credential_ttl == 3600
        assert default.settings.s3 is not None and default.settings.s3.credential_ttl == 900
    finally:
        explicit.stop()
        default.stop()


# -- one identity per Spark catalog ---------------------------------------------------------------------------------
@pytest.fixture
def only_alice(catalog):  # type: ignore[no-untyped-def]
    """A table alice may read (namespace sales) and bob may not, holding one row "only-for-alice"."""
    import time

    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField, StringType

    from tests.conftest import rest_catalog

    etl = rest_catalog(catalog, "etl")
    if ("sales",) not in etl.list_namespaces():
        etl.create_namespace("sales")
    name = f"sales.only_alice_{time.monotonic_ns()}"
    etl.create_table(name, Schema(NestedField(1, "x", StringType(), required=False))).append(
        pa.table({"x": pa.array(["only-for-alice"], pa.string())})
    )
    return name


class _Launched(Exception):
    """Stands in for the JVM launch: ``bind`` is where Session.spark() launches Spark."""


@pytest.mark.parametrize("can_wait", [True, False])
def test_embedded_start_begins_with_the_jvm_only_when_the_first_query_needs_it(monkeypatch, can_wait) -> None:  # type: ignore[no-untyped-def]
    """Spark 3.5's first query loads the catalog: its embedded start must run alongside the JVM's launch,
    not after it (that cost 1.2 s of a 3.5 cold start); on Spark 4 it waits until the JVM is up."""
    from lakesession import _sparkbind
    from lakesession.embedded import EmbeddedStart
    from lakesession.session import Session

    begun = threading.Event()
    pending = EmbeddedStart(lambda: (begun.set(), (None, None))[1])
    at_launch: list[bool] = []

    def bind(*args: object, **kwargs: object) -> None:
        at_launch.append(begun.wait(0 if can_wait else 10))
        raise _Launched

    monkeypatch.setattr(_sparkbind, "catalog_can_wait", lambda remote: can_wait)
    monkeypatch.setattr(_sparkbind, "bind", bind)
    session = Session(None, None, pending=pending)
    try:
        with pytest.raises(_Launched):
            session.spark()
    finally:
        session.close()
    assert at_launch == [not can_wait]


def test_which_first_queries_load_the_catalog() -> None:
    from lakesession._sparkbind import catalog_can_wait, first_query_loads_catalog

    assert first_query_loads_catalog("3.5.9") and first_query_loads_catalog("3.4.0")
    assert not first_query_loads_catalog("4.1.4") and not first_query_loads_catalog("4.0.0")
    assert catalog_can_wait("sc://localhost:15002") is False  # a Connect channel launches no JVM here


@pytest.fixture
def no_current_session():  # type: ignore[no-untyped-def]
    """``lakesession.spark()``'s current session starts empty and is closed and forgotten after the test."""
    from lakesession import _connect as session_mod
    from lakesession.notebook import _views

    saved = session_mod._current
    session_mod._current = None
    yield
    if session_mod._current is not None:
        session_mod._current.close()
    session_mod._current = saved
    _views.use(None)


def as_user(catalog, who: str, **options):  # type: ignore[no-untyped-def]
    return dict(
        uri=catalog.uri,
        credential=f"{who}:{SECRETS[who]}",
        token_url=f"{catalog.issuer_uri}/token",
        warehouse="lakesession",
        **options,
    )


def loads_of(catalog, principal: str, table: str, since: float) -> list[str]:  # type: ignore[no-untyped-def]
    """The catalog's audited decisions on ``table`` for ``principal`` since ``since``."""
    return [r.decision for r in catalog.admin.audit(principal=principal, securable=f"table {table}", since=since)]


def assert_bob_cannot_read(spark, catalog, table: str, since: float) -> None:  # type: ignore[no-untyped-def]
    """bob's query returns no rows of alice's table; the catalog saw bob (denied) and not alice."""
    with pytest.raises(Exception) as err:
        spark.sql(f"SELECT x FROM lake.{table}").collect()
    assert "only-for-alice" not in str(err.value)
    assert "deny" in loads_of(catalog, "bob", table, since)
    assert loads_of(catalog, "alice", table, since) == []


@pytest.mark.slow  # the shared Spark JVM
def test_alice_then_bob_in_one_process_never_reads_as_alice(catalog, lake, only_alice) -> None:  # type: ignore[no-untyped-def]
    import time

    from lakesession.errors import SessionClosedError

    shared = lake.spark()
    default = shared.conf.get("spark.sql.defaultCatalog")
    alice = lakesession.connect(**as_user(catalog, "alice"))  # catalog "lake": the name the shared session uses too
    sa = alice.spark()
    assert [tuple(r) for r in sa.sql(f"SELECT x FROM lake.{only_alice}").collect()] == [("only-for-alice",)]
    bob = lakesession.connect(**as_user(catalog, "bob"))
    try:
        sb = bob.spark()
        assert sb is not sa and sb is not shared
        # touched first outside spark.sql: Spark loads a catalog with the *active* session's conf
        assert sb.catalog.currentCatalog() == "lake"
        since = time.time()
        assert_bob_cannot_read(sb, catalog, only_alice, since)
        assert bob.audit()["decision"].tolist()[-1] == "deny"  # bob's own audit shows bob's denial
        # alice still reads as alice; the shared SparkSession's catalogs and default are untouched
        assert [tuple(r) for r in sa.sql(f"SELECT x FROM lake.{only_alice}").collect()] == [("only-for-alice",)]
        assert shared.conf.get("spark.sql.defaultCatalog") == default
        assert shared.sql("SHOW NAMESPACES IN lake").count() >= 0
        alice.close()
        started = time.monotonic()
        with pytest.raises(Exception) as err:  # closed: her SparkSession no longer reaches the catalog
            sa.sql(f"SELECT x FROM lake.{only_alice}").collect()
        assert time.monotonic() - started < 30 and "only-for-alice" not in str(err.value)
        with pytest.raises(SessionClosedError, match="connect"):
            alice.spark()
        assert sb.sql("SELECT 1").collect()[0][0] == 1  # closing alice stopped nothing of bob's
        assert set(loads_of(catalog, "alice", only_alice, since)) <= {"allow", "issued"}  # her read before closing
    finally:
        alice.close()
        bob.close()
    assert shared.sql("SELECT 1").collect()[0][0] == 1


@pytest.mark.slow  # the shared Spark JVM
def test_spark_makes_its_session_the_active_one_for_the_catalog_api(catalog, lake) -> None:  # type: ignore[no-untyped-def]
    """pyspark leaves the last Session to run ``createDataFrame`` active for good, and Spark's catalog API reads
    the default catalog through the active session: ``lake.spark().catalog.currentCatalog()`` answered another
    Session's catalog (in CI, one whose server had stopped: "Error occurred while processing GET request")."""
    other = lakesession.connect(**as_user(catalog, "alice", catalog_name="other"))
    try:
        so = other.spark()
        assert so.createDataFrame([(1,)], "x INT").collect()[0].x == 1  # leaves `so` active on this thread
        assert so.catalog.currentCatalog() == "other"
        spark = lake.spark()
        assert spark.catalog.currentCatalog() == "lake"
        assert other.spark().catalog.currentCatalog() == "other"
    finally:
        other.close()
    assert lake.spark().catalog.currentCatalog() == "lake"


@pytest.mark.slow  # the shared Spark JVM
def test_spark_with_other_options_replaces_the_current_session(catalog, lake, only_alice, no_current_session) -> None:  # type: ignore[no-untyped-def]
    import time

    sa = lakesession.spark(**as_user(catalog, "alice"))
    alice = lakesession.current_session()
    assert alice is not None and lakesession.spark(**as_user(catalog, "alice")) is sa  # same options: reused
    assert lakesession.spark() is sa
    assert [tuple(r) for r in sa.sql(f"SELECT x FROM lake.{only_alice}").collect()] == [("only-for-alice",)]
    since = time.time()
    sb = lakesession.spark(**as_user(catalog, "bob"))  # other options: an explicit replacement
    bob = lakesession.current_session()
    assert bob is not alice and alice.closed and not bob.closed
    assert_bob_cannot_read(sb, catalog, only_alice, since)
    with pytest.raises(Exception):
        sa.sql(f"SELECT x FROM lake.{only_alice}").collect()
    assert loads_of(catalog, "alice", only_alice, since) == []


def test_spark_credential_rows_skip_loads_that_found_nothing() -> None:
    """Iceberg Java probes ``ns.t`` as a namespace before each metadata table (``ns.t.files`` answers 404):
    no row for a table that was never loaded; a catalog that vends nothing shows "unknown", no expiry."""
    import time as _time
    from types import SimpleNamespace

    from lakesession._reports import Reports
    from lakesession.credentials import CredentialStore
    from lakesession.gateway import AccessLog, AccessRecord

    log = AccessLog()
    now = _time.time()
    log.add(AccessRecord(time=now, action="load_table", object="table sp.orders", status=200, duration_ms=1.0))
    log.add(AccessRecord(time=now, action="load_table", object="table sp.orders.files", status=404, duration_ms=1.0))
    source = SimpleNamespace(access_log=log, credential_store=CredentialStore())
    rows = Reports(source).credential_rows()  # type: ignore[arg-type]
    assert [(r["engine"], r["table"], r["state"], r["expires_at"], r["refreshes"]) for r in rows] == [
        ("spark", "sp.orders", "unknown", None, 0)
    ]


def test_identity_none_sends_no_authorization_anywhere() -> None:
    """A catalog without authentication (local development): asked for explicitly, nothing invented —
    pyiceberg, the grants report and the gateway's forwarding all go without an ``Authorization`` header."""
    import httpx

    from lakesession.identity import Anonymous

    seen: list[tuple[str, str | None]] = []

    class Open(QuietHandler):
        def do_GET(self) -> None:
            seen.append((self.path, self.headers.get("Authorization")))
            if self.path.startswith("/v1/config"):
                status, body = 200, {"defaults": {}, "overrides": {}}
            elif self.path.startswith("/v1/namespaces"):
                status, body = 200, {"namespaces": [["open"]]}
            else:
                status, body = 404, {"error": {"message": "no route", "type": "NotFoundException", "code": 404}}
            self.reply(status, body)

    with StubServer(Open) as server:
        uri = server.url
        with pytest.raises(ConfigError, match="identity='none'"):  # no identity at all: the hint names the option
            lakesession.connect(uri=uri)
        with pytest.raises(ConfigError, match="token was given too"):
            lakesession.connect(uri=uri, identity="none", token="t0ken-value")
        s = lakesession.connect(uri=uri, identity="none")
        try:
            assert isinstance(s.identity, Anonymous) and s.identity.describe()["kind"] == "none"
            assert s.catalog.list_namespaces() == [("open",)]
            assert s.grants()["securable"].tolist() == ["unknown"]
            gw = s.gateway
            r = httpx.get(f"{gw.uri}/v1/namespaces", headers={"Authorization": f"Bearer {gw.secret}"})
            assert r.status_code == 200 and r.json()["namespaces"] == [["open"]]
        finally:
            s.close()
        assert {p.split("?")[0] for p, _ in seen} >= {"/v1/config", "/v1/namespaces", "/management/v1/me/grants"}
        assert [auth for _, auth in seen] == [None] * len(seen)


def test_identity_none_from_the_environment(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from lakesession.identity import Anonymous

    monkeypatch.setenv("LAKESESSION_IDENTITY", "none")
    s = lakesession.connect(uri="http://127.0.0.1:9")  # nothing is contacted yet
    assert isinstance(s.identity, Anonymous) and s.identity.token() == ""
    assert s.identity.describe()["kind"] == "none"
    s.close()
