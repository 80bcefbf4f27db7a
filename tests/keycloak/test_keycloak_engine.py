"""The trusted engine, logout and key rotation with a real Keycloak 26.7.3 (issue 41, items 4 and 5).

A realm of the module's own (on the session's Keycloak), one catalog (``lakesession serve --issuer-url <realm>``)
and one ``lakesession engine`` for the module. The catalog trusts the engine by Keycloak's exchange (``{issuer: <realm>, authorized_party: engine}``:
its exchanged token has ``azp`` = engine and no ``act``) and accepts back-channel logout tokens of client
``lakesession-cli`` (whose ``backchannel.logout.url`` the module points at the catalog). carol (a user this
module adds) owns the DEFINER view ``sales.v_eu`` over etl's ``sales.orders``; alice may read only the view,
through her group ``analysts``; bob nothing.

* the engine client cannot hand a user a token with ``azp`` = engine (no user-facing flow, secret required);
* the engine serves alice the DEFINER view; bob is refused; the audit names alice and the engine;
* Keycloak's refused exchange (no audience mapper) reaches alice as one line naming the fix;
* an admin logout of alice reaches the catalog (and the engine through it) within a measured bound;
* a key rotation mid-session: old and new tokens both work, at the catalog and at the engine.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, LongType, NestedField, StringType

import lakesession
from lakesession.errors import LoginRequiredError
from tests._engine import ENGINE_TESTS, EU, VIEW_SQL, RunningEngine, start_engine
from tests._keycloak import Keycloak, claims_of
from tests._serve import Served

pytestmark = [*ENGINE_TESTS, pytest.mark.keycloak]

EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS = "urn:ietf:params:oauth:token-type:access_token"
POLICY = """\
principals:
  - {name: carol, type: user}
roles:
  - {name: analysts, members: []}
  - {name: etl, members: []}
  - {name: owners, members: [carol]}
grants:
  - {role: etl, privilege: CATALOG_MANAGE_CONTENT, on: catalog}
  - {role: owners, privilege: TABLE_READ_DATA, on: table sales.orders}
  - {role: owners, privilege: VIEW_CREATE, on: namespace sales}
  - {role: owners, privilege: VIEW_LIST, on: namespace sales}
  - {role: analysts, privilege: VIEW_READ, on: view sales.v_eu}
"""
ROWS = pa.table(
    {
        "id": pa.array([1, 2, 3, 4, 5], pa.int64()),
        "region": ["EU", "US", "EU", "APAC", "EU"],
        "amount": pa.array([10.0, 20.0, 30.0, 40.0, 50.0]),
    }
)


def _client(kc: Keycloak, client_id: str) -> dict[str, Any]:
    r = kc.admin("GET", "/clients", params={"clientId": client_id}, timeout=30)
    assert r.status_code == 200, r.text
    [found] = r.json()
    return dict(found)


def _set_attributes(kc: Keycloak, client_id: str, **attributes: str) -> None:
    rep = _client(kc, client_id)
    rep["attributes"] = {**rep.get("attributes", {}), **attributes}
    r = kc.admin("PUT", f"/clients/{rep['id']}", json=rep, timeout=30)
    assert r.status_code == 204, r.text


@pytest.fixture(scope="module")
def served(kc: Keycloak, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("kc-engine")
    (tmp / "policy.yaml").write_text(POLICY)
    (tmp / "serve.yaml").write_text(
        json.dumps(
            {
                "trusted_engines": [{"issuer": kc.issuer, "authorized_party": "engine"}],
                "backchannel_logout_clients": ["lakesession-cli"],
            }
        )
    )
    r = kc.admin(
        "POST", "/users", timeout=30,
        json={"username": "carol", "enabled": True, "email": "carol@example.org", "emailVerified": True,
              "firstName": "Carol", "lastName": "Owner",
              "credentials": [{"type": "password", "value": "carol-pw-1", "temporary": False}]},
    )  # fmt: skip
    assert r.status_code == 201, r.text
    kc.passwords["carol"] = "carol-pw-1"
    args = [
        "--port", "0", "--data-dir", str(tmp / "d"), "--bootstrap", str(tmp / "policy.yaml"),
        "--config", str(tmp / "serve.yaml"), "--warehouse", "s3://kc-engine-lake/wh", "--s3-emulator",
        "--issuer-url", kc.issuer, "--principal-claim", "preferred_username", "--roles-claim", "groups",
    ]  # fmt: skip
    with Served(args) as srv:
        srv.data_dir = tmp / "d"  # type: ignore[attr-defined]
        base = srv.uri.split("/v1", 1)[0].rstrip("/")
        _set_attributes(kc, "lakesession-cli", **{"backchannel.logout.url": f"{base}/oidc-backchannel-logout"})
        etl = RestCatalog(
            "kc-etl", uri=srv.uri, warehouse=srv.lines["warehouse"], token=kc.client_token("etl"),
            **{"header.X-Iceberg-Access-Delegation": "vended-credentials"},
        )  # fmt: skip
        etl.create_namespace("sales")
        schema = Schema(
            NestedField(1, "id", LongType()),
            NestedField(2, "region", StringType()),
            NestedField(3, "amount", DoubleType()),
        )
        etl.create_table(("sales", "orders"), schema).append(ROWS)
        yield srv


@pytest.fixture(scope="module")
def engine(kc: Keycloak, served: Served, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEngine]:
    handle = SimpleNamespace(uri=served.uri, issuer_uri=kc.issuer)
    env = {"LAKESESSION_ENGINE_CLIENT_SECRET": kc.client_secrets["engine"]}
    with start_engine(handle, tmp_path_factory.mktemp("kc-engine-proc"), env=env) as running:
        yield running


def session(served: Served, kc: Keycloak, engine: RunningEngine, token: str) -> lakesession.Session:
    return lakesession.connect(uri=served.uri, warehouse=served.lines["warehouse"], token=token, engine=engine.address)


@pytest.fixture(scope="module")
def view(kc: Keycloak, served: Served, engine: RunningEngine) -> str:
    carol = session(served, kc, engine, kc.user_token("carol"))
    try:
        carol.engine().sql(
            f"CREATE VIEW lake.sales.v_eu TBLPROPERTIES ('trino.run-as-owner' = 'carol') AS {VIEW_SQL}"
        ).collect()
    finally:
        carol.close()
    return "sales.v_eu"


def audit(data_dir: Path, principal: str) -> list[tuple[str, str, str, dict[str, Any]]]:
    with sqlite3.connect(data_dir / "catalog.db") as db:
        rows = db.execute(
            "SELECT action, securable, decision, detail FROM ls_audit WHERE principal = ? ORDER BY id", (principal,)
        )
        return [(a, s, d, json.loads(x) if x else {}) for a, s, d, x in rows]


def exchange(kc: Keycloak, subject: str) -> httpx.Response:
    return httpx.post(
        kc.token_endpoint,
        data={"grant_type": EXCHANGE, "subject_token": subject, "subject_token_type": ACCESS},
        auth=("engine", kc.client_secrets["engine"]),
        timeout=30,
    )


# ---------------------------------------------------------------- nobody but the engine gets azp = engine
def test_the_engine_client_hands_no_user_a_token(kc: Keycloak) -> None:
    """azp = engine is what the catalog trusts: only the engine, with its secret, by exchange, may obtain it."""
    pw = {"grant_type": "password", "username": "alice", "password": kc.passwords["alice"], "scope": "openid"}
    no_secret = httpx.post(kc.token_endpoint, data={**pw, "client_id": "engine"}, timeout=30)
    assert no_secret.status_code == 401 and no_secret.json()["error"] == "unauthorized_client", no_secret.text
    with_secret = httpx.post(kc.token_endpoint, data=pw, auth=("engine", kc.client_secrets["engine"]), timeout=30)
    assert with_secret.status_code in (400, 401) and "access_token" not in with_secret.json(), with_secret.text
    device = httpx.post(
        f"{kc.issuer}/protocol/openid-connect/auth/device", data={"client_id": "engine", "scope": "openid"}, timeout=30
    )
    assert device.status_code in (400, 401) and "device_code" not in device.json(), device.text
    rep = _client(kc, "engine")
    assert rep["publicClient"] is False and rep["standardFlowEnabled"] is False
    assert rep["implicitFlowEnabled"] is False and rep["directAccessGrantsEnabled"] is False


def test_keycloaks_exchange_names_the_engine_only_in_azp(kc: Keycloak) -> None:
    alice = kc.user_token("alice")
    r = exchange(kc, alice)
    assert r.status_code == 200, r.text
    got = claims_of(r.json()["access_token"])
    mine = claims_of(alice)
    assert got["sub"] == mine["sub"] and got["preferred_username"] == "alice" and got["azp"] == "engine"
    assert "act" not in got and got["sid"] == mine["sid"] and "lakesession" in got["aud"]
    assert "client_id" not in got
    own = claims_of(kc.client_token("engine"))  # the engine client's own service account
    assert own["preferred_username"] == "service-account-engine" and own["azp"] == "engine"


# ---------------------------------------------------------------- the engine serves alice a DEFINER view
def test_the_engine_serves_alice_the_definer_view_and_refuses_bob(
    kc: Keycloak, served: Served, engine: RunningEngine, view: str
) -> None:
    alice = session(served, kc, engine, kc.user_token("alice"))
    try:
        rows = sorted((r["id"], r["amount"]) for r in alice.sql(f"SELECT * FROM lake.{view}").collect())
    finally:
        alice.close()
    assert rows == EU
    loads = [r for r in audit(served.data_dir, "alice") if r[1] == "table sales.orders"]  # type: ignore[attr-defined]
    assert any(
        d == "allow" and x.get("actor") == "engine" and x.get("user_in_effect") == "carol" for _, _, d, x in loads
    )
    bob = session(served, kc, engine, kc.user_token("bob"))
    try:
        with pytest.raises(Exception, match="bob") as refused:
            bob.engine().sql(f"SELECT * FROM lake.{view}").collect()
    finally:
        bob.close()
    assert kc.client_secrets["engine"] not in str(refused.value)
    denied = [r for r in audit(served.data_dir, "bob") if r[2] == "deny"]  # type: ignore[attr-defined]
    assert denied and all(x.get("actor") == "engine" for *_, x in denied)


def test_a_refused_exchange_reaches_the_user_as_one_line_naming_the_fix(
    kc: Keycloak, served: Served, engine: RunningEngine, view: str
) -> None:
    """Without the audience mapper alice's token does not name the engine: Keycloak answers 403
    'Client is not within the token audience'; she reads one line saying which mapper to add."""
    cli = _client(kc, "lakesession-cli")
    mappers = kc.admin("GET", f"/clients/{cli['id']}/protocol-mappers/models", timeout=30).json()
    [mapper] = [m for m in mappers if m["name"] == "audience-engine"]
    assert (
        kc.admin("DELETE", f"/clients/{cli['id']}/protocol-mappers/models/{mapper['id']}", timeout=30).status_code
        == 204
    )
    try:
        token = kc.user_token("alice")
        assert "engine" not in claims_of(token)["aud"]
        assert exchange(kc, token).json()["error_description"] == "Client is not within the token audience"
        alice = session(served, kc, engine, token)
        try:
            with pytest.raises(Exception) as refused:
                alice.engine().sql(f"SELECT * FROM lake.{view}").collect()
        finally:
            alice.close()
    finally:
        mapper.pop("id")
        r = kc.admin("POST", f"/clients/{cli['id']}/protocol-mappers/models", json=mapper, timeout=30)
        assert r.status_code == 201, r.text
    text = str(refused.value).strip()
    first = text.splitlines()[0]
    assert "audience mapper" in first and "included.client.audience=engine" in first, text
    assert "Client is not within the token audience" in first


# ---------------------------------------------------------------- logout reaches the catalog and the engine
def _status(served: Served, token: str) -> int:
    base = served.uri.split("/v1", 1)[0].rstrip("/")
    return httpx.get(f"{base}/v1/config", headers={"Authorization": f"Bearer {token}"}, timeout=30).status_code


def test_an_admin_logout_reaches_the_catalog_and_the_engine(
    kc: Keycloak, served: Served, engine: RunningEngine, view: str
) -> None:
    token = kc.user_token("alice")
    other = kc.user_token("bob")
    assert _status(served, token) == 200 and _status(served, other) == 200
    alice = session(served, kc, engine, token)
    try:
        assert len(alice.sql(f"SELECT * FROM lake.{view}").collect()) == len(EU)
        url = f"{kc.base}/admin/realms/{kc.realm}/users/{kc.user_id('alice')}/logout"
        headers = {"Authorization": f"Bearer {kc.admin_token()}"}
        started = time.monotonic()
        r = httpx.post(url, headers=headers, timeout=30)  # Keycloak posts the logout token to the catalog
        assert r.status_code == 204, r.text
        answered = time.monotonic() - started
        while _status(served, token) != 401:
            assert time.monotonic() - started < 10, "the logout did not reach the catalog within 10 s"
            time.sleep(0.05)
        bound = time.monotonic() - started
        print(f"\nlogout -> catalog refuses: {bound:.3f} s (Keycloak's admin call returned after {answered:.3f} s)")
        assert claims_of(token)["exp"] > time.time()  # still unexpired: only the logout ended it
        body = httpx.get(f"{served.uri.split('/v1', 1)[0]}/v1/config", headers={"Authorization": f"Bearer {token}"})
        assert "logged out" in body.json()["error"]["message"]
        with pytest.raises(Exception) as refused:  # the engine's exchanged token carried her sid: refused too
            alice.engine().sql(f"SELECT * FROM lake.{view}").collect()
        assert "log in again" in str(refused.value).splitlines()[0], str(refused.value)
        # Keycloak's own answer to the engine's exchange of her ended session (tests/client/test_exchange_ended_session.py)
        ended = exchange(kc, token)
        assert (ended.status_code, ended.json()) == (
            400,
            {"error": "invalid_request", "error_description": "Invalid token"},
        )
    finally:
        alice.close()
    assert _status(served, other) == 200  # bob's session is not hers
    assert _status(served, kc.user_token("alice")) == 200  # a new login is a new session
    logouts = [r for r in audit(served.data_dir, claims_of(token)["sub"]) if r[0] == "backchannel_logout"]  # type: ignore[attr-defined]
    assert f"session {claims_of(token)['sid']}" in [securable for _, securable, _, _ in logouts]  # one per session


# ---------------------------------------------------------------- a key rotation mid-session
def test_a_key_rotation_mid_session_breaks_nothing(
    kc: Keycloak, served: Served, engine: RunningEngine, view: str
) -> None:
    old = kc.user_token("alice")
    assert _status(served, old) == 200
    realm = kc.admin("GET", "", timeout=30).json()
    component = {
        "name": "rotated-rsa", "providerId": "rsa-generated", "providerType": "org.keycloak.keys.KeyProvider",
        "parentId": realm["id"],
        "config": {"priority": ["500"], "enabled": ["true"], "active": ["true"], "keySize": ["2048"], "algorithm": ["RS256"]},
    }  # fmt: skip
    r = kc.admin("POST", "/components", json=component, timeout=30)
    assert r.status_code == 201, r.text
    new = kc.user_token("alice")
    old_kid, new_kid = (json.loads(_b64(t.split(".")[0]))["kid"] for t in (old, new))
    assert old_kid != new_kid
    started = time.monotonic()
    while _status(served, new) != 200:  # the catalog refetches the JWKS on the unknown kid (rate-bounded)
        assert time.monotonic() - started < 45, "the catalog never accepted the rotated key"
        time.sleep(0.5)
    print(f"\nrotated key accepted by the catalog after {time.monotonic() - started:.3f} s")
    assert _status(served, old) == 200  # the old key still verifies (Keycloak keeps publishing it)
    # the engine verifies her token with its own JWKS cache, refetched at most once per 30 s (an earlier test's
    # fetch may be recent): the documented bound for a new key, so the first query may be refused until then
    started = time.monotonic()
    while True:
        alice = session(served, kc, engine, new)
        try:
            rows = sorted((r["id"], r["amount"]) for r in alice.sql(f"SELECT * FROM lake.{view}").collect())
            break
        except LoginRequiredError as e:
            assert "unknown key" in str(e) and time.monotonic() - started < 35, str(e)
            time.sleep(1)
        finally:
            alice.close()
    print(f"rotated key accepted by the engine after {time.monotonic() - started:.3f} s")
    assert rows == EU


def _b64(part: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
