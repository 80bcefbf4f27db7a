"""Faults at the gateway, request by request (issue 17, items 3 and 6): the catalog or the issuer goes
away and comes back while the session stays up.

The shared reference catalog is reached through :class:`~tests._outlet.Outlet` forwarders the test
switches off (connection refused). What the gateway must answer for its own failures: 503 +
Retry-After with a message saying what is down and that nothing was sent — never 500, which Iceberg
Java turns into ``CommitStateUnknownException`` on a commit — and 200 again once the outage is over.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from lakesession.gateway import Gateway
from lakesession.identity import ClientCredentials
from tests._outlet import Outlet
from tests.conftest import SECRETS

P = "/v1/lakesession"
SCHEMA = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "x", "type": "long", "required": False}]}
COMMIT: dict[str, Any] = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"k": "v"}}]}


@pytest.fixture()
def setup(catalog: Any) -> Iterator[tuple[httpx.Client, Outlet, Outlet, ClientCredentials, Gateway]]:
    cat_url, idp_url = httpx.URL(catalog.uri), httpx.URL(catalog.issuer_uri)
    to_catalog = Outlet((cat_url.host, cat_url.port or 80))
    to_issuer = Outlet((idp_url.host, idp_url.port or 80))
    source = ClientCredentials(f"{to_issuer.url}{idp_url.path}/token", "etl", SECRETS["etl"], scope="catalog")
    with (
        Gateway(to_catalog.url, source.token, invalidate=source.invalidate, timeout=10) as gw,
        httpx.Client(base_url=gw.uri, headers={"Authorization": f"Bearer {gw.secret}"}, timeout=60) as client,
    ):
        client.post(f"{P}/namespaces", json={"namespace": ["faults"]})
        yield client, to_catalog, to_issuer, source, gw
    to_catalog.down()
    to_issuer.down()


def _version(catalog: Any, table: str) -> str:
    """The table's current metadata location, read around the gateway."""
    token = catalog.admin.token_for("etl")
    r = httpx.get(f"{catalog.uri}{P}/namespaces/faults/tables/{table}", headers={"Authorization": f"Bearer {token}"})
    return str(r.json()["metadata-location"])


def _unavailable(r: httpx.Response, says: str) -> None:
    assert r.status_code == 503, r.text
    assert int(r.headers["retry-after"]) >= 1
    err = r.json()["error"]
    assert err["type"] == "ServiceUnavailableException" and err["code"] == 503
    assert says in err["message"], err["message"]


def test_catalog_down_is_503_for_loads_and_commits_then_back(setup: Any, catalog: Any) -> None:
    client, to_catalog, _, _, gw = setup
    assert client.post(f"{P}/namespaces/faults/tables", json={"name": "c1", "schema": SCHEMA}).status_code == 200
    before = _version(catalog, "c1")
    to_catalog.down()
    _unavailable(client.get(f"{P}/namespaces/faults/tables/c1"), "unreachable")
    _unavailable(client.post(f"{P}/namespaces/faults/tables/c1", json=COMMIT), "unreachable")  # nothing was sent
    assert _version(catalog, "c1") == before
    to_catalog.up()
    assert client.get(f"{P}/namespaces/faults/tables/c1").status_code == 200
    committed = client.post(f"{P}/namespaces/faults/tables/c1", json=COMMIT)
    assert committed.status_code == 200 and committed.json()["metadata"]["properties"]["k"] == "v"
    statuses = [(r.action, r.status) for r in gw.access_log.records() if r.object == "table faults.c1"]
    assert statuses[-4:] == [("load_table", 503), ("commit_table", 503), ("load_table", 200), ("commit_table", 200)]


def test_issuer_down_with_an_expired_token_is_503_for_a_commit_and_nothing_reaches_the_catalog(
    setup: Any, catalog: Any
) -> None:
    client, to_catalog, to_issuer, source, _ = setup
    assert client.post(f"{P}/namespaces/faults/tables", json={"name": "i1", "schema": SCHEMA}).status_code == 200
    before = _version(catalog, "i1")
    to_issuer.down()
    source.invalidate()  # the token must be renewed now (as after a 401): the issuer is needed and down
    reached = to_catalog.accepted
    r = client.post(f"{P}/namespaces/faults/tables/i1", json=COMMIT)
    _unavailable(r, "could not get the user's access token")
    assert "nothing was sent to the catalog" in r.json()["error"]["message"]
    assert to_catalog.accepted == reached and _version(catalog, "i1") == before
    to_issuer.up()
    committed = client.post(f"{P}/namespaces/faults/tables/i1", json=COMMIT)
    assert committed.status_code == 200, committed.text
    assert _version(catalog, "i1") != before
