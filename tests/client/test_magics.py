"""``%load_ext lakesession``: the magics in a real IPython shell, against real catalogs and the shared Spark JVM."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any

import httpx
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

import lakesession
from lakesession.notebook import _views
from lakesession.notebook._magics import LakesessionMagics, MagicError, explain, split_args
from lakesession.notebook._progress import DeviceLoginProgress, SparkJobProgress
from tests.conftest import SECRETS

NS = "nbmagic"


@pytest.fixture(scope="module")
def shell() -> Any:
    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "lakesession")
    yield sh
    sh.run_line_magic("unload_ext", "lakesession")
    _views.use(None)


def run(shell: Any, code: str) -> tuple[Any, str]:
    """Run a cell; return (result, everything it printed)."""
    with capture_output() as cap:
        result = shell.run_cell(code)
    return result, cap.stdout + cap.stderr + "".join(str(o.data) for o in cap.outputs)


def test_extension_registers_magics_also_from_the_extensions_option() -> None:
    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "lakesession")
    assert "lakesession" in sh.magics_manager.magics["line"] and "lakesql" in sh.magics_manager.magics["cell"]
    # c.InteractiveShellApp.extensions (--ext is its command-line alias) in a fresh IPython process
    out = subprocess.run(
        [sys.executable, "-m", "IPython", "--no-banner", "--ext", "lakesession", "-c", "%lakesession help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "%lakesession login" in out.stdout and "%%lakesql" in out.stdout, out.stderr[-2000:]


def test_login_with_client_credentials_then_status_and_grants(shell, catalog, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("LAKESESSION_URI", catalog.uri)
    monkeypatch.setenv("LAKESESSION_CREDENTIAL", f"alice:{SECRETS['alice']}")
    monkeypatch.setenv("LAKESESSION_TOKEN_URL", f"{catalog.issuer_uri}/token")
    res, out = run(shell, "%lakesession login --client-credentials")
    assert res.success, out
    html = LakesessionMagics.last_view._repr_html_()
    assert 'class="lakesession-status"' in html and "alice" in html and "token expires in" in html
    session = _views.active_session()
    assert session.identity.describe()["principal"] == "alice"
    res, out = run(shell, "%lakesession grants")
    assert "namespace sales" in LakesessionMagics.last_view._repr_html_() and "TABLE_READ_DATA" in repr(
        LakesessionMagics.last_view
    )
    texts = out + html + LakesessionMagics.last_view._repr_html_() + repr(LakesessionMagics.last_view)
    assert SECRETS["alice"] not in texts and session.identity.token() not in texts
    # a static token is not a client-credentials login: one readable line saying how to fix it
    monkeypatch.delenv("LAKESESSION_CREDENTIAL")
    monkeypatch.setenv("LAKESESSION_TOKEN", catalog.admin.token_for("bob"))
    res, out = run(shell, "%lakesession login --client-credentials")
    assert isinstance(res.error_in_exec, MagicError)
    assert "LAKESESSION_CREDENTIAL" in out and "Traceback" not in out and len(out.strip().splitlines()) == 1


def test_trailing_comments_are_not_arguments(shell, catalog, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The README's lines as written: a ``# comment`` after a magic, naming flags, is not parsed as them."""
    monkeypatch.setenv("LAKESESSION_URI", catalog.uri)
    monkeypatch.setenv("LAKESESSION_CREDENTIAL", f"alice:{SECRETS['alice']}")
    monkeypatch.setenv("LAKESESSION_TOKEN_URL", f"{catalog.issuer_uri}/token")
    res, out = run(shell, "%lakesession login               # embedded default or --device / --client-credentials")
    assert res.success, out  # not "--client-credentials: not allowed with argument --device"
    assert _views.active_session().identity.describe()["principal"] == "alice"
    for line in (
        "status   # principal, issuer",
        "grants  # what you may read",
        "audit --since 10m   # what you accessed",
    ):
        res, out = run(shell, f"%lakesession {line}")
        assert res.success and "unrecognized arguments" not in out, out
    res, out = run(shell, "%lakesession resolve sales.v1#2   # a '#' inside a word is the word's")
    assert "sales.v1#2" in repr(LakesessionMagics.last_view), out
    assert split_args("""audit --action 'a # b' "c\\" # d" # the comment""") == ["audit", "--action", "a # b", 'c" # d']
    assert split_args("# all comment") == [] and split_args(r"a\ #b # c") == ["a #b"]
    res, out = run(shell, "%lakesession audit --action 'unclosed  # comment")
    assert isinstance(res.error_in_exec, MagicError) and "No closing quotation" in out, out


def test_a_cell_of_several_magics_shows_every_view(shell, catalog, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The README's notebook block pasted into one cell: each magic's view is shown, not only the last one's."""
    monkeypatch.setenv("LAKESESSION_URI", catalog.uri)
    monkeypatch.setenv("LAKESESSION_CREDENTIAL", f"alice:{SECRETS['alice']}")
    monkeypatch.setenv("LAKESESSION_TOKEN_URL", f"{catalog.issuer_uri}/token")
    cell = "\n".join(
        [
            "%lakesession login --client-credentials",
            "%lakesession status              # principal, issuer, countdown",
            "%lakesession grants              # what you may read and write",
            "%lakesession credentials",
            "%lakesession audit --since 10m",
        ]
    )
    with capture_output() as cap:
        res = shell.run_cell(cell)
    assert res.success, cap.stdout + cap.stderr
    assert res.result is None  # nothing returned to be shown twice as Out[n]
    assert len(cap.outputs) == 5, [sorted(o.data) for o in cap.outputs]
    shown = "".join(str(o.data) for o in cap.outputs)
    assert "alice" in shown and SECRETS["alice"] not in shown


@pytest.mark.slow  # one device-flow polling interval (5 s)
def test_device_login_shows_code_and_progress(shell, catalog) -> None:  # type: ignore[no-untyped-def]
    DeviceLoginProgress.last = None

    def approve() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            p = DeviceLoginProgress.last
            if p is not None and p.prompt is not None:
                catalog.admin.approve_device(p.prompt.user_code, "bob")
                return
            time.sleep(0.05)

    threading.Thread(target=approve, daemon=True).start()
    res, out = run(shell, f"%lakesession login --device --uri {catalog.uri} --issuer {catalog.issuer_uri}")
    assert res.success, out
    progress = DeviceLoginProgress.last
    assert progress is not None and progress.bar.description == "signed in" and progress.bar.bar_style == "success"
    assert progress.prompt.user_code in out  # the user sees the code to confirm …
    assert "bob" in LakesessionMagics.last_view._repr_html_()
    assert _views.active_session().identity.kind == "device_code"
    refresh = _views.active_session().identity._current.refresh_token
    assert refresh and refresh not in out  # … but never a token


def test_resolve_shows_the_view_chain(shell, catalog) -> None:  # type: ignore[no-untyped-def]
    token = catalog.admin.token_for("etl")
    h = {"Authorization": f"Bearer {token}"}
    prefix = (
        httpx.get(f"{catalog.uri}/v1/config?warehouse={catalog.warehouse}", headers=h).json()["overrides"].get("prefix")
    )
    base = f"{catalog.uri}/v1/{prefix}" if prefix else f"{catalog.uri}/v1"
    httpx.post(f"{base}/namespaces", headers=h, json={"namespace": [NS]})
    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
    httpx.post(f"{base}/namespaces/{NS}/tables", headers=h, json={"name": "t", "schema": schema})
    version = {
        "version-id": 1,
        "timestamp-ms": int(time.time() * 1000),
        "schema-id": 0,
        "summary": {},
        "representations": [{"type": "sql", "sql": f"SELECT * FROM {NS}.t", "dialect": "spark"}],
        "default-namespace": [NS],
    }
    r = httpx.post(
        f"{base}/namespaces/{NS}/views",
        headers=h,
        json={"name": "v", "schema": schema, "view-version": version, "properties": {}},
    )
    assert r.status_code in (200, 409), r.text
    _views.use(
        lakesession.connect(
            uri=catalog.uri,
            credential=f"etl:{SECRETS['etl']}",
            token_url=f"{catalog.issuer_uri}/token",
            warehouse=catalog.warehouse,
        )
    )
    res, out = run(shell, f"%lakesession resolve {NS}.v")
    assert res.success, out
    html = LakesessionMagics.last_view._repr_html_()
    assert "lakesession-chain" in html and "INVOKER" in html and f"{NS}.t" in html and "allow" in html
    res, out = run(shell, "%lakesession resolve notqualified")
    assert isinstance(res.error_in_exec, MagicError) and "namespace.view" in out and "Traceback" not in out


@pytest.mark.slow  # the shared Spark JVM
def test_lakesql_limits_rows_stores_result_and_reports_spark_errors_in_one_line(shell, lake) -> None:  # type: ignore[no-untyped-def]
    _views.use(lake)
    res, out = run(shell, f"%%lakesql\nCREATE NAMESPACE IF NOT EXISTS lake.{NS}")
    assert res.success and "OK" in out, out
    run(shell, f"%%lakesql\nCREATE TABLE IF NOT EXISTS lake.{NS}.nums (id BIGINT) USING iceberg")
    res, out = run(shell, f"%%lakesql\nINSERT INTO lake.{NS}.nums SELECT id FROM range(30)")
    assert res.success, out
    res, out = run(shell, f"%%lakesql --limit 5 --out nums\nSELECT id FROM lake.{NS}.nums ORDER BY id")
    assert res.success, out
    assert "first 5 rows" in out and shell.user_ns["nums"].count() >= 30
    res, out = run(shell, f"%%lakesql\nSELECT * FROM lake.{NS}.does_not_exist")
    assert isinstance(res.error_in_exec, MagicError)
    assert "TABLE_OR_VIEW_NOT_FOUND" in out and "Traceback" not in out and "at org." not in out
    assert len([ln for ln in out.splitlines() if "lakesession:" in ln or "Exception" in ln]) == 1
    res, out = run(shell, "%lakesession audit --since 10m")
    assert res.success, out
    html = LakesessionMagics.last_view._repr_html_()
    assert "lakesession-timeline" in html and f"table {NS}.nums" in html and "load_table" in html
    res, out = run(shell, "%lakesession audit --since yesterday-ish")
    assert isinstance(res.error_in_exec, MagicError) and "10m" in out


@pytest.mark.slow  # the shared Spark JVM
def test_spark_job_progress_follows_the_cells_jobs(lake) -> None:  # type: ignore[no-untyped-def]
    spark = lake.spark()
    with SparkJobProgress(spark, interval=0.05) as p:
        spark.range(0, 200_000, numPartitions=4).selectExpr("sum(id)").collect()
    assert p.jobs and p.total_tasks >= 4 and p.done_tasks == p.total_tasks
    assert p.bar.value == p.bar.max == p.total_tasks and p.bar.bar_style == "success"
    assert spark.sparkContext.getLocalProperty("spark.jobGroup.id") is None  # the cell's group does not leak


def test_explain_gives_one_line_for_python_errors() -> None:
    from lakesession.credentials import CredentialsRevokedError

    msg = explain(CredentialsRevokedError("shop.orders", "grant removed\nsecond line"))
    assert "\n" not in msg and "shop.orders" in msg
    assert explain(ValueError("boom\n  at org.apache.Foo")) == "ValueError: boom"


@pytest.mark.slow  # the shared Spark JVM
def test_login_as_another_user_never_reads_as_the_first(shell, catalog, lake, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """%lakesession login as alice, query; login as bob: the magics and lakesession.spark() act as bob,
    alice's session is closed (her SparkSession no longer reaches the catalog), the catalog audits bob."""
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField, StringType

    from lakesession import _connect as session_mod
    from tests.conftest import rest_catalog

    etl = rest_catalog(catalog, "etl")
    if ("sales",) not in etl.list_namespaces():
        etl.create_namespace("sales")
    table = f"sales.magic_alice_{time.monotonic_ns()}"
    etl.create_table(table, Schema(NestedField(1, "x", StringType(), required=False))).append(
        pa.table({"x": pa.array(["only-for-alice"], pa.string())})
    )
    saved = session_mod._current
    session_mod._current = None
    monkeypatch.setenv("LAKESESSION_URI", catalog.uri)
    monkeypatch.setenv("LAKESESSION_TOKEN_URL", f"{catalog.issuer_uri}/token")
    monkeypatch.setenv("LAKESESSION_WAREHOUSE", "lakesession")
    try:
        monkeypatch.setenv("LAKESESSION_CREDENTIAL", f"alice:{SECRETS['alice']}")
        res, out = run(shell, "%lakesession login --client-credentials")
        assert res.success, out
        alice = _views.active_session()
        res, out = run(shell, f"%%lakesql --out rows\nSELECT x FROM lake.{table}")
        assert res.success and [tuple(r) for r in shell.user_ns["rows"].collect()] == [("only-for-alice",)], out
        alice_spark = alice.spark()
        assert lakesession.current_session() is alice and lakesession.spark() is alice_spark

        monkeypatch.setenv("LAKESESSION_CREDENTIAL", f"bob:{SECRETS['bob']}")
        since = time.time()
        res, out = run(shell, "%lakesession login --client-credentials")
        assert res.success, out
        bob = _views.active_session()
        assert bob is not alice and alice.closed and bob.identity.describe()["principal"] == "bob"
        assert lakesession.current_session() is bob and lakesession.spark() is not alice_spark
        res, out = run(shell, f"%%lakesql\nSELECT x FROM lake.{table}")
        assert isinstance(res.error_in_exec, MagicError) and "only-for-alice" not in out and "as bob" in out, out
        with pytest.raises(Exception):  # what alice's session handed out no longer reads at all
            alice_spark.sql(f"SELECT x FROM lake.{table}").collect()
        decisions = {
            r.principal: r.decision
            for r in catalog.admin.audit(securable=f"table {table}", since=since, action="load_table")
        }
        assert decisions == {"bob": "deny"}, decisions
    finally:
        current = session_mod._current
        if current is not None:
            current.close()
        session_mod._current = saved
        _views.use(None)
