"""Attack: replacing the SQL of someone else's DEFINER view, which keeps running as its owner.

Catalog ``lake`` trusts the engine (``trusted_engines=[{"principal": "engine"}]``), which acts for users
through RFC 8693 token exchange. bob reads ``sales.orders`` (an EU and a US data file) and
``sales.margins``, and, through the engine, owns the DEFINER view ``sales.v_eu``
(``SELECT id FROM sales.orders WHERE region = 'EU'``, ``trino.run-as-owner=bob``). alice may read that view
and replace it (``VIEW_READ`` and ``VIEW_WRITE_PROPERTIES`` on it), and nothing else.

The attack: alice (with her own token, or through the engine) replaces the view's SQL and leaves the
owner alone, so the view now runs *her* SQL as bob: ``SELECT * FROM sales.orders`` hands her the non-EU
rows, ``SELECT * FROM sales.margins`` a table the view never read. While trusted engines give the owner
property effect, only the owner may change a DEFINER view's SQL (or make himself the owner in the same
request, which only the engine acting for him may do): anything else is a 403. Every step is the real
HTTP request (the issuer's token endpoint, the catalog), then the store call the answer enables.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from lakesession.reference import ReferenceCatalog
from tests._lake import Lake
from tests.factories import make_catalog, vended_s3_client
from tests.support import OWNER, REGION_SCHEMA, engine_policy, exchange_response, issuer_token, view_body

P = "/v1/lakesession"
BUCKET = "lake-definer-replace"
VENDED = {"X-Iceberg-Access-Delegation": "vended-credentials"}
EU_SQL = "SELECT id FROM sales.orders WHERE region = 'EU'"
ALL_ORDERS = "SELECT * FROM sales.orders"
MARGINS = "SELECT * FROM sales.margins"
RULE = "only the owner of a DEFINER view may change its SQL"
SECRETS = {who: f"{who}-secret-{secrets.token_hex(4)}" for who in ("etl", "engine", "alice", "bob")}
POLICY = (
    engine_policy(SECRETS)
    .grant("platform", "VIEW_WRITE_PROPERTIES", "view sales.v_eu")  # the engine calling as itself
    .grant("r_bob", "TABLE_READ_DATA", "table sales.orders")
    .grant("r_bob", "TABLE_READ_DATA", "table sales.margins")
    .grant_all("r_bob", ["VIEW_CREATE", "VIEW_READ", "VIEW_WRITE_PROPERTIES"], "namespace sales")
    .grant_all("r_alice", ["VIEW_READ", "VIEW_WRITE_PROPERTIES"], "view sales.v_eu")
)


# ---------------------------------------------------------------- real HTTP: issuer and catalog
def client_token(handle: ReferenceCatalog, who: str) -> str:
    """``who``'s own access token (client credentials at the issuer): what their own Spark presents."""
    return issuer_token(handle, who, SECRETS[who])


def via_engine(handle: ReferenceCatalog, who: str) -> str:
    """What ``lakesession engine`` presents for ``who``: ``who``'s token exchanged by the engine (RFC 8693)."""
    r = exchange_response(handle, "engine", SECRETS["engine"], client_token(handle, who))
    assert r.status_code == 200, r.text
    return str(r.json()["access_token"])


def call(
    handle: ReferenceCatalog, method: str, path: str, token: str, body: Any = None, **headers: str
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}", **VENDED, **headers}
    return httpx.request(method, f"{handle.uri}{P}{path}", headers=headers, json=body, timeout=30)


def message(r: httpx.Response) -> str:
    return str(r.json()["error"]["message"])


def version(sql: str, version_id: int = 2) -> dict[str, Any]:
    return {
        "version-id": version_id,
        "timestamp-ms": int(time.time() * 1000),
        "schema-id": 0,
        "summary": {"engine-name": "spark"},
        "representations": [{"type": "sql", "sql": sql, "dialect": "spark"}],
        "default-namespace": ["sales"],
    }


def replacement(sql: str, *extra: dict[str, Any]) -> list[dict[str, Any]]:
    """The updates of an Iceberg ``replace view`` (``CREATE OR REPLACE VIEW``) with ``sql``, plus ``extra``."""
    return [
        {"action": "add-view-version", "view-version": version(sql)},
        {"action": "set-current-view-version", "view-version-id": -1},
        *extra,
    ]


def set_owner(owner: str) -> dict[str, Any]:
    return {"action": "set-properties", "updates": {OWNER: owner}}


# ---------------------------------------------------------------- the lake
def commit(lake: Lake, token: str, updates: list[dict[str, Any]], **headers: str) -> httpx.Response:
    return call(lake.handle, "POST", "/namespaces/sales/views/v_eu", token, {"updates": updates}, **headers)


def view_metadata(lake: Lake) -> dict[str, Any]:
    r = call(lake.handle, "GET", "/namespaces/sales/views/v_eu", client_token(lake.handle, "bob"))
    assert r.status_code == 200, r.text
    return dict(r.json()["metadata"])


def view_sql(lake: Lake) -> str:
    md = view_metadata(lake)
    [current] = [v for v in md["versions"] if v["version-id"] == md["current-version-id"]]
    return str(current["representations"][0]["sql"])


def load_through_view(lake: Lake, token: str, table: str) -> httpx.Response:
    """The engine's chained loadTable: ``table`` read through ``sales.v_eu`` (``referenced-by``)."""
    return call(lake.handle, "GET", f"/namespaces/sales/tables/{table}?referenced-by=sales%1Fv_eu", token)


TABLE_SCHEMA = REGION_SCHEMA


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    with make_catalog(
        POLICY,
        bucket=BUCKET,
        data_dir=tmp_path_factory.mktemp("definer-replace"),
        trusted_engines=[{"principal": "engine"}],
    ) as handle:
        etl = client_token(handle, "etl")
        assert call(handle, "POST", "/namespaces", etl, {"namespace": ["sales"]}).status_code == 200
        prefixes = {}
        s3 = handle.s3_emulator.client()
        for table, files in (("orders", ("eu", "us")), ("margins", ("all",))):
            r = call(handle, "POST", "/namespaces/sales/tables", etl, {"name": table, "schema": TABLE_SCHEMA})
            assert r.status_code == 200, r.text
            prefixes[table] = r.json()["metadata"]["location"].split(f"s3://{BUCKET}/", 1)[1].rstrip("/")
            for f in files:
                s3.put_object(Bucket=BUCKET, Key=f"{prefixes[table]}/data/{f}.parquet", Body=f"{table} {f}".encode())
        yield Lake(handle, bucket=BUCKET, loc=prefixes)


@pytest.fixture
def lake(catalog: Lake) -> Lake:
    """``sales.v_eu`` as bob made it (through the engine), fresh for each test: one test's replace is not another's."""
    handle = catalog.handle
    call(handle, "DELETE", "/namespaces/sales/views/v_eu", client_token(handle, "etl"))
    r = call(handle, "POST", "/namespaces/sales/views", via_engine(handle, "bob"), view_body("v_eu", EU_SQL, "bob"))
    assert r.status_code == 200, r.text
    return catalog


def assert_refused(lake: Lake, r: httpx.Response, caller: str = "alice") -> None:
    assert r.status_code == 403, r.text
    err = r.json()["error"]
    assert err["type"] == "ForbiddenException" and "metadata" not in r.json(), r.text
    text = err["message"]
    assert "sales.v_eu" in text and RULE in text and "would run as 'bob'" in text and repr(caller) in text, text
    assert "\n" not in text
    assert view_sql(lake) == EU_SQL and view_metadata(lake)["properties"][OWNER] == "bob"  # nothing changed


# ---------------------------------------------------------------- the attack
@pytest.mark.parametrize("through", ["her own token", "the engine"])
def test_alice_cannot_make_bobs_definer_view_read_all_orders(lake: Lake, through: str) -> None:
    alice = client_token(lake.handle, "alice") if through == "her own token" else via_engine(lake.handle, "alice")
    rid, since = f"definer-replace-{secrets.token_hex(6)}", time.time() - 0.001
    r = commit(lake, alice, replacement(ALL_ORDERS), **{"X-Request-Id": rid})
    # the harm, had the replace gone through: the engine (for alice) runs the view's SQL as bob, with read keys
    # for all of sales.orders, and the view's SQL now selects every region
    engine_alice = via_engine(lake.handle, "alice")
    loaded = load_through_view(lake, engine_alice, "orders")
    assert loaded.status_code == 200, loaded.text  # the EU view itself stays readable through the engine
    if view_sql(lake) == ALL_ORDERS:
        [cred] = loaded.json()["storage-credentials"]
        s3 = vended_s3_client(lake.handle.s3_emulator.endpoint, cred["config"])
        us = s3.get_object(Bucket=BUCKET, Key=f"{lake.loc['orders']}/data/us.parquet")["Body"].read()
        pytest.fail(f"alice replaced bob's DEFINER view ({r.status_code}) and reads the non-EU rows: {us!r}")
    assert_refused(lake, r)
    # the refusal is audited (alice reads her own records over HTTP), naming the engine when it acted
    audit = httpx.get(
        f"{lake.handle.uri}/management/v1/audit",
        params={"principal": "alice", "since": str(since)},
        headers={"Authorization": f"Bearer {client_token(lake.handle, 'alice')}"},
        timeout=30,
    )
    assert audit.status_code == 200, audit.text
    [denied] = [x for x in audit.json() if x["request_id"] == rid and x["decision"] == "deny"]
    assert denied["action"] == "replace_view" and denied["securable"] == "view sales.v_eu", denied
    assert denied["detail"]["owner"] == "bob" and denied["detail"].get("actor") == (
        None if through == "her own token" else "engine"
    )


@pytest.mark.parametrize("through", ["her own token", "the engine"])
def test_alice_cannot_point_bobs_definer_view_at_another_table(lake: Lake, through: str) -> None:
    alice = client_token(lake.handle, "alice") if through == "her own token" else via_engine(lake.handle, "alice")
    engine_alice = via_engine(lake.handle, "alice")
    before = load_through_view(lake, engine_alice, "margins")
    assert before.status_code == 403 and "not read by the SQL of view sales.v_eu" in message(before), before.text
    r = commit(lake, alice, replacement(MARGINS))
    after = load_through_view(lake, engine_alice, "margins")
    if after.status_code == 200:
        [cred] = after.json()["storage-credentials"]
        s3 = vended_s3_client(lake.handle.s3_emulator.endpoint, cred["config"])
        data = s3.get_object(Bucket=BUCKET, Key=f"{lake.loc['margins']}/data/all.parquet")["Body"].read()
        pytest.fail(f"alice pointed bob's DEFINER view at sales.margins ({r.status_code}) and reads it: {data!r}")
    assert after.status_code == 403, after.text
    assert_refused(lake, r)


def test_alice_cannot_roll_bobs_view_back_to_an_older_version(lake: Lake) -> None:
    """bob once had the view read everything; he narrowed it. Making the old version current is a change of SQL."""
    bob = client_token(lake.handle, "bob")
    assert commit(lake, bob, replacement(ALL_ORDERS)).status_code == 200
    narrowed = [
        {"action": "add-view-version", "view-version": version(EU_SQL, 3)},
        {"action": "set-current-view-version", "view-version-id": -1},
    ]
    r = commit(lake, bob, narrowed)
    assert r.status_code == 200 and view_sql(lake) == EU_SQL, r.text
    old = next(v["version-id"] for v in view_metadata(lake)["versions"] if v["representations"][0]["sql"] == ALL_ORDERS)
    for token in (client_token(lake.handle, "alice"), via_engine(lake.handle, "alice")):
        assert_refused(lake, commit(lake, token, [{"action": "set-current-view-version", "view-version-id": old}]))
        # a version added without being made current is refused too: bob never chose it
        r = commit(lake, token, [{"action": "add-view-version", "view-version": version(MARGINS, 9)}])
        assert_refused(lake, r)
        assert all(v["representations"][0]["sql"] != MARGINS for v in view_metadata(lake)["versions"])


def test_the_engine_acting_for_alice_may_not_keep_or_name_bob_as_owner(lake: Lake) -> None:
    engine_alice = via_engine(lake.handle, "alice")
    r = commit(lake, engine_alice, replacement(ALL_ORDERS, set_owner("bob")))
    assert r.status_code == 403 and r.json()["error"]["type"] == "ProtectedPropertyModification", r.text
    assert view_sql(lake) == EU_SQL


def test_the_engine_calling_as_itself_may_not_replace_bobs_sql_either(lake: Lake) -> None:
    """The engine's own token names no user: the replacement would still run as bob, whom nobody asked."""
    engine = client_token(lake.handle, "engine")
    assert_refused(lake, commit(lake, engine, replacement(ALL_ORDERS)), caller="engine")
    assert_refused(lake, commit(lake, engine, replacement(ALL_ORDERS, set_owner("bob"))), caller="engine")


# ---------------------------------------------------------------- what stays allowed
@pytest.mark.parametrize("through", ["his own token", "the engine"])
def test_bob_may_replace_his_own_definer_views_sql(lake: Lake, through: str) -> None:
    bob = client_token(lake.handle, "bob") if through == "his own token" else via_engine(lake.handle, "bob")
    r = commit(lake, bob, replacement(ALL_ORDERS))
    assert r.status_code == 200, r.text
    assert view_sql(lake) == ALL_ORDERS and view_metadata(lake)["properties"][OWNER] == "bob"


def test_alice_may_replace_the_sql_when_she_becomes_the_owner(lake: Lake) -> None:
    """Trino's rule (the replacer of a SECURITY DEFINER view owns it), asked for explicitly through the engine."""
    r = commit(lake, via_engine(lake.handle, "alice"), replacement(ALL_ORDERS, set_owner("alice")))
    assert r.status_code == 200, r.text
    assert view_sql(lake) == ALL_ORDERS and view_metadata(lake)["properties"][OWNER] == "alice"
    # the view now runs as alice, who may not read sales.orders: she gained nothing
    denied = load_through_view(lake, via_engine(lake.handle, "alice"), "orders")
    assert denied.status_code == 403 and "'alice' lacks TABLE_READ" in message(denied), denied.text
    # with her own token she cannot name herself owner: only a trusted engine writes the owner property
    r = commit(lake, client_token(lake.handle, "alice"), replacement(MARGINS, set_owner("alice")))
    assert r.status_code == 403 and r.json()["error"]["type"] == "ProtectedPropertyModification", r.text


def test_alice_may_replace_the_sql_of_the_view_made_invoker(lake: Lake) -> None:
    """Removing the owner property (through the engine, as before) makes the view INVOKER: it runs as its reader."""
    remove = {"action": "remove-properties", "removals": [OWNER]}
    r = commit(lake, via_engine(lake.handle, "alice"), replacement(ALL_ORDERS, remove))
    assert r.status_code == 200 and OWNER not in r.json()["metadata"]["properties"], r.text
    denied = load_through_view(lake, via_engine(lake.handle, "alice"), "orders")
    assert denied.status_code == 403 and "'alice' lacks TABLE_READ" in message(denied), denied.text


def test_property_only_changes_keep_todays_rules(lake: Lake) -> None:
    r = commit(lake, client_token(lake.handle, "alice"), [{"action": "set-properties", "updates": {"comment": "EU"}}])
    assert r.status_code == 200 and r.json()["metadata"]["properties"]["comment"] == "EU", r.text
    assert view_sql(lake) == EU_SQL and view_metadata(lake)["properties"][OWNER] == "bob"
    # re-adding the current version unchanged is no change of SQL
    same = [{"action": "add-view-version", "view-version": version(EU_SQL, 1)}]
    assert commit(lake, client_token(lake.handle, "alice"), same).status_code == 200


# ---------------------------------------------------------------- without trusted engines: no DEFINER, no rule
def test_without_trusted_engines_the_owner_property_has_no_effect_nor_rule(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with make_catalog(POLICY, data_dir=tmp_path_factory.mktemp("definer-open"), trusted_engines=[]) as handle:
        etl = client_token(handle, "etl")
        assert call(handle, "POST", "/namespaces", etl, {"namespace": ["sales"]}).status_code == 200
        r = call(handle, "POST", "/namespaces/sales/views", etl, view_body("v_eu", EU_SQL, "bob"))
        assert r.status_code == 200, r.text
        alice = client_token(handle, "alice")
        body = {"updates": replacement(ALL_ORDERS)}
        r = call(handle, "POST", "/namespaces/sales/views/v_eu", alice, body)
        assert r.status_code == 200, r.text
