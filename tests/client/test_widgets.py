"""Widgets against a real session: model state follows login, countdowns, a refresh and a revocation.

The session reads a table vended by the shared embedded catalog (S3 emulator, real STS
credentials) as its own principal, whose grant is then revoked with the admin handle.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

import ipywidgets
import pyarrow as pa
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

import lakesession
from lakesession.catalog._tables import create_table
from lakesession.notebook import _html
from lakesession.notebook._widgets import AuditPanel, ChainTree, CredentialsPanel, GrantsTable, StatusWidget, Ticker

pytestmark = pytest.mark.slow  # reads through the shared embedded catalog and Spark JVM

NS, TABLE = "nbwidgets", "nbwidgets.events"
WHO, SECRET, ROLE = "widget-user", "widget-user-secret-42", "widget_readers"


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


@pytest.fixture(scope="module")
def reader(lake) -> Any:  # type: ignore[no-untyped-def]
    """A session as ``widget-user`` on the shared embedded catalog, having read one vended table."""
    lake.uri  # noqa: B018 - waits for the embedded catalog (``embedded`` is set once it runs)
    emb = lake.embedded
    admin = emb.handle.admin
    admin.create_principal(WHO, "user", client_id=WHO, client_secret=SECRET)
    admin.create_role(ROLE, [WHO])
    admin.grant(ROLE, "TABLE_READ_DATA", f"table {TABLE}")
    lake.catalog.create_namespace_if_not_exists(NS)
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    t = create_table(lake.catalog, TABLE, schema, lake.credential_store, lake._token, lake.uri, mode="write")
    t.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    s = lakesession.connect(
        uri=emb.uri, credential=f"{WHO}:{SECRET}", token_url=emb.token_endpoint, warehouse=emb.warehouse
    )
    s.loaded = s.table(TABLE)  # type: ignore[attr-defined]
    assert s.loaded.scan().to_arrow().num_rows == 3  # type: ignore[attr-defined]
    yield s
    s.close()


def secrets_of(session: Any) -> list[str]:
    out = [SECRET, session.identity.token()]
    for name in session.credential_store.tables():
        for c in session.credential_store.entry(name).credentials:
            out += [
                v for k, v in c.config.items() if k in ("s3.access-key-id", "s3.secret-access-key", "s3.session-token")
            ]
    return [s for s in out if s]


def all_widget_state() -> str:
    return json.dumps([w.get_state() for w in list(ipywidgets.Widget.widgets.values())], default=str)


def test_status_header_counts_down_and_names_the_principal(reader) -> None:  # type: ignore[no-untyped-def]
    w = StatusWidget(reader, interval=0.3)
    try:
        first = w.header.get_state()["value"]
        assert 'class="lakesession-status"' in first and WHO in first and "token expires in" in first
        left1 = w.seconds_left
        assert wait_for(lambda: w.header.get_state()["value"] != first, 5), "the countdown did not move"
        assert w.seconds_left < left1 and w.ticker.ticks >= 1 and w.ticker.errors == 0
        bundle = w._repr_mimebundle_()
        assert "lakesession-status" in bundle["text/html"] and "token expires in" in bundle["text/html"]
        assert "application/vnd.jupyter.widget-view+json" in bundle
    finally:
        w.close()
    assert wait_for(lambda: not w.ticker.alive, 2), "closing the widget must stop its ticker"


def test_credentials_panel_follows_countdown_refresh_and_revocation(reader, lake) -> None:  # type: ignore[no-untyped-def]
    panel = CredentialsPanel(reader, interval=0.3)
    try:
        row = lambda: next(r for r in panel.model_rows() if r["table"] == TABLE)  # noqa: E731
        first = row()
        assert first["engine"] == "python" and first["state"] == "valid" and "valid" in first["badge"]
        expected = reader.credential_store.snapshot()[0]["seconds_left"]
        assert abs(first["seconds_left"] - expected) < 2  # the bar is the store's countdown
        assert wait_for(lambda: row()["seconds_left"] < first["seconds_left"], 5), "countdown did not decrease"
        refreshes = panel.rows[("python", TABLE)].refreshes.get_state()["value"]
        assert reader.credential_store.refresh(TABLE) == "valid"  # a forced refresh: new credentials
        assert wait_for(lambda: panel.rows[("python", TABLE)].refreshes.get_state()["value"] != refreshes, 5)
        assert lake.embedded.handle.admin.revoke(ROLE, "TABLE_READ_DATA", f"table {TABLE}")
        assert reader.credential_store.refresh(TABLE) == "revoked"
        assert wait_for(lambda: row()["state"] == "revoked", 5), panel.model_rows()
        assert "revoked" in row()["badge"] and panel.rows[("python", TABLE)].countdown.bar_style == "danger"
        assert "revoked" in panel._repr_mimebundle_()["text/html"]
        # with the extension loaded, using the revoked table in a cell is one readable line
        sh = InteractiveShell.instance()
        sh.run_line_magic("load_ext", "lakesession")
        sh.user_ns["t"] = reader.loaded  # type: ignore[index]
        with capture_output() as cap:
            res = sh.run_cell("t.scan().to_arrow()")
        assert not res.success and "lakesession:" in cap.stdout and "Traceback" not in cap.stdout, cap.stdout
        state = all_widget_state() + panel._repr_mimebundle_()["text/html"] + cap.stdout
        for secret in secrets_of(reader):
            assert secret not in state, "a secret reached widget state or output"
    finally:
        panel.close()
        lake.embedded.handle.admin.grant(ROLE, "TABLE_READ_DATA", f"table {TABLE}")


def test_ticker_survives_errors_and_shows_them() -> None:
    calls: list[int] = []
    shown: list[str] = []

    def flaky() -> None:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("catalog down")

    t = Ticker(flaky, 0.05, lambda e: shown.append(str(e)), "test")
    try:
        assert wait_for(lambda: len(calls) >= 4, 5)
        assert t.errors == 1 and shown == ["catalog down"] and t.alive
    finally:
        t.stop()


def test_grants_audit_and_chain_widgets(reader, lake) -> None:  # type: ignore[no-untyped-def]
    g = GrantsTable(reader)
    assert f"table {TABLE}" in g.table.get_state()["value"] and "TABLE_READ_DATA" in g.table.value
    lake.sql(f"SELECT count(*) FROM lake.{TABLE}").collect()
    a = AuditPanel(lake, since="1h")
    assert "load_table" in a.action.options and any(r["object"] == f"table {TABLE}" for r in a.shown)
    a.object.value = "no-such-object"  # filters re-render the table and the timeline from the traits
    assert a.shown == [] and "no accesses recorded" in a.table.value
    a.object.value = NS
    assert a.shown and "<line" in a.timeline.get_state()["value"]
    a.decision.value = "deny"
    assert all(r["decision"] == "deny" for r in a.shown)
    node = lake.resolve(TABLE)
    c = ChainTree(lake, node)
    assert "lakesession-chain" in c.tree.value and TABLE in c.tree.value
    for w in (g, a, c):
        w.close()


def test_html_fallbacks_without_widgets(reader) -> None:  # type: ignore[no-untyped-def]
    from lakesession.notebook import credentials, status

    st = status(reader, widget=False)
    assert re.search(r'class="lakesession-status".*widget-user.*token expires in', st._repr_html_(), re.S)
    assert "token expires in" in repr(st)
    cr = credentials(reader, widget=False)
    assert TABLE in cr._repr_html_() and TABLE in repr(cr)
    assert _html.duration(3725) == "1 h 02 min" and _html.duration(None) == "unknown"
    assert "&lt;script&gt;" in _html.grants_html(
        [{"securable": "<script>", "privileges": "", "granted": "", "roles": ""}]
    )
