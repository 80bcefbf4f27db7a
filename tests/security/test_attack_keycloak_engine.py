"""Attacks on the trusted engine recognised by ``azp`` (Keycloak's standard token exchange carries no ``act``).

Keycloak 26.7's exchanged token names the user (``sub``, her ``sid``) and the engine only as the authorized
party (``azp`` = the engine's client). The catalog trusts it through ``{"issuer": ISS, "authorized_party":
"engine"}`` while every check stays the user's. A stand-in issuer (a second reference catalog: real discovery
and JWKS on loopback) signs tokens shaped like Keycloak's (``tests/_kcshape.py``); the catalog trusts that
issuer (``issuer_url``) with ``preferred_username`` as the principal. bob owns the DEFINER view
``sales.v_eu`` over etl's ``sales.orders``; alice may read the view only. Every attack is the real HTTP
request; where something is handed out, the store call it enables follows.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest
from botocore.exceptions import ClientError

from lakesession.reference.trust import TrustConfigurationError
from tests import _kcshape as kc
from tests._lake import Lake
from tests.factories import Policy, make_catalog, vended_s3_client
from tests.support import OWNER, REGION_SCHEMA, view_body

P = "/v1/lakesession"
BUCKET = "lake-kc-engine"
CHAIN = "sales%1Fv_eu"
VENDED = {"X-Iceberg-Access-Delegation": "vended-credentials"}
IGNORED = "referenced-by was ignored"
TABLE_SCHEMA = REGION_SCHEMA
DIRECTORY = (
    Policy()
    .service("etl", role="eng")
    .user("alice", role="r_alice")
    .user("bob", role="r_bob")
    .grant("eng", "CATALOG_MANAGE_CONTENT", "catalog")
    .grant("r_bob", "TABLE_READ_DATA", "table sales.orders")
    .grant_all("r_bob", ["VIEW_CREATE", "VIEW_WRITE_PROPERTIES"], "namespace sales")
    .grant("r_alice", "VIEW_READ", "view sales.v_eu")
    .grant_all("r_alice", ["VIEW_CREATE", "VIEW_WRITE_PROPERTIES"], "namespace scratch")
)


def call(lake: Lake, method: str, path: str, token: str, body: object = None, **headers: str) -> httpx.Response:
    h = {"Authorization": f"Bearer {token}", **headers}
    return httpx.request(method, f"{lake.handle.uri}{P}{path}", headers=h, json=body, timeout=30)


def load_orders(lake: Lake, token: str, chain: str | None = CHAIN) -> httpx.Response:
    q = f"?referenced-by={chain}" if chain else ""
    return call(lake, "GET", f"/namespaces/sales/tables/orders{q}", token, **VENDED)


def assert_ignored(r: httpx.Response, caller: str) -> None:
    assert r.status_code == 403, r.text
    text = r.json()["error"]["message"]
    assert IGNORED in text and repr(caller) in text.split(IGNORED, 1)[1], text
    assert "storage-credentials" not in r.text


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    with make_catalog(Policy().user("nobody"), data_dir=tmp_path_factory.mktemp("kc-idp")) as idp:
        with make_catalog(
            DIRECTORY,
            bucket=BUCKET,
            data_dir=tmp_path_factory.mktemp("kc-engine-lake"),
            issuer_url=idp.issuer_uri,
            principal_claim="preferred_username",
            trusted_engines=[{"issuer": idp.issuer_uri, "authorized_party": "engine"}],
        ) as handle:
            partial = Lake(handle, idp=idp)
            etl = kc.user_token(idp, "alice", azp="etl", preferred_username="etl")
            for ns in ("sales", "scratch"):
                assert call(partial, "POST", "/namespaces", etl, {"namespace": [ns]}).status_code == 200
            r = call(partial, "POST", "/namespaces/sales/tables", etl, {"name": "orders", "schema": TABLE_SCHEMA})
            assert r.status_code == 200, r.text
            prefix = r.json()["metadata"]["location"].split("://", 1)[1].split("/", 1)[1].rstrip("/")
            # bob's DEFINER view, made through the engine acting for bob (trusted engines protect the owner property)
            body = view_body("v_eu", "SELECT id FROM sales.orders WHERE region = 'EU'", owner="bob")
            r = call(partial, "POST", "/namespaces/sales/views", kc.engine_exchange(idp, "bob"), body)
            assert r.status_code == 200, r.text
            handle.s3_emulator.client().put_object(Bucket=BUCKET, Key=f"{prefix}/data/eu.parquet", Body=b"orders")
            yield Lake(handle, idp=idp, bucket=BUCKET, loc={"orders": prefix})


def test_the_engine_exchange_reads_through_the_definer_view_as_alice(lake: Lake) -> None:
    rid = f"kc-engine-{uuid.uuid4().hex[:10]}"
    r = call(
        lake, "GET", f"/namespaces/sales/tables/orders?referenced-by={CHAIN}", kc.engine_exchange(lake.idp, "alice"),
        **VENDED, **{"X-Request-Id": rid},
    )  # fmt: skip
    assert r.status_code == 200, r.text
    [cred] = r.json()["storage-credentials"]
    s3 = vended_s3_client(lake.handle.s3_emulator.endpoint, cred["config"])
    assert s3.get_object(Bucket=BUCKET, Key=f"{lake.loc['orders']}/data/eu.parquet")["Body"].read() == b"orders"
    with pytest.raises(ClientError, match="AccessDenied"):  # DEFINER access is read-only
        s3.put_object(Bucket=BUCKET, Key=f"{lake.loc['orders']}/data/planted.parquet", Body=b"x")
    records = [r for r in lake.handle.admin.audit(principal="alice") if r.request_id == rid]
    load = next(x for x in records if x.securable == "table sales.orders" and x.decision == "allow")
    assert load.principal == "alice" and (load.detail or {}).get("actor") == "engine"
    assert (load.detail or {}).get("user_in_effect") == "bob"
    # without the chain the exchanged token is alice alone (she may not read the table)
    alone = load_orders(lake, kc.engine_exchange(lake.idp, "alice"), chain=None)
    assert alone.status_code == 403 and "'alice'" in alone.json()["error"]["message"]


def test_alices_own_token_is_not_the_engine(lake: Lake) -> None:
    """Her notebook's Spark holds her token from the client she logged in with: azp is that client."""
    for azp in ("lakesession-cli", "jupyterhub", "Engine", "engine ", None):
        assert_ignored(load_orders(lake, kc.user_token(lake.idp, "alice", azp=azp)), "alice")  # type: ignore[arg-type]


def test_azp_engine_from_another_issuer_is_refused(lake: Lake) -> None:
    """An issuer the catalog does not trust (the attacker's own key, even naming the trusted issuer)."""
    forged = kc.sign(lake.idp, {**_claims(lake, "alice"), "azp": "engine"}, key=kc.attacker_key())
    r = load_orders(lake, forged)
    assert r.status_code == 401 and "storage-credentials" not in r.text, r.text


def _claims(lake: Lake, name: str) -> dict[str, object]:
    import json

    from joserfc import jws

    token = kc.user_token(lake.idp, name)
    return dict(json.loads(jws.extract_compact(token.encode()).payload))


def test_an_exchanged_token_with_act_is_judged_by_its_actor(lake: Lake) -> None:
    """azp engine plus an ``act`` naming alice (a re-exchange by her): whoever acts now is alice."""
    token = kc.engine_exchange(lake.idp, "alice", act={"sub": kc.SUBJECTS["alice"]})
    assert_ignored(load_orders(lake, token), "alice")


def test_the_engine_clients_own_service_account_is_not_a_user_acting(lake: Lake) -> None:
    """Client credentials of the engine's client: azp engine, but nobody is acted for."""
    assert_ignored(load_orders(lake, kc.engine_service_account(lake.idp)), "service-account-engine")
    # the same without Keycloak's client_id mark, and renamed by another principal claim: still its own account
    bare = kc.engine_service_account(lake.idp, client_id=None)
    assert_ignored(load_orders(lake, bare), "service-account-engine")
    assert_ignored(load_orders(lake, kc.user_token(lake.idp, "alice", azp="engine", client_id="engine")), "alice")


def test_malformed_azp_values_are_not_the_engine(lake: Lake) -> None:
    for azp in (["engine"], {"engine": True}, 1, ""):
        assert_ignored(load_orders(lake, kc.user_token(lake.idp, "alice", azp=azp)), "alice")  # type: ignore[arg-type]


def test_through_the_engine_alice_cannot_make_a_view_owned_by_bob(lake: Lake) -> None:
    """The engine acting for alice (recognised by azp) may set the owner property only to alice."""
    token = kc.engine_exchange(lake.idp, "alice")
    body = view_body("all_orders", "SELECT * FROM sales.orders", "bob", namespace="scratch")
    r = call(lake, "POST", "/namespaces/scratch/views", token, body)
    read = load_orders(lake, kc.engine_exchange(lake.idp, "alice"), chain="scratch%1Fall_orders")
    assert read.status_code == 403 and "storage-credentials" not in read.text, read.text  # the harm, if created
    assert r.status_code == 403 and r.json()["error"]["type"] == "ProtectedPropertyModification", r.text
    assert OWNER in r.json()["error"]["message"] and "'alice'" in r.json()["error"]["message"]
    mine = call(
        lake, "POST", "/namespaces/scratch/views", token, view_body("mine", "SELECT 1", "alice", namespace="scratch")
    )
    assert mine.status_code == 200, mine.text


def test_an_authorized_party_rule_needs_an_issuer(tmp_path_factory: pytest.TempPathFactory) -> None:
    """azp means something only at one issuer: a rule without one (or naming the catalog's own audience) is
    refused at start, before anything binds."""
    for rule, words in (
        ({"authorized_party": "engine"}, "without an issuer"),
        ({"issuer": "https://kc.example/realms/lake", "authorized_party": "lakesession"}, "own audience"),
    ):
        with pytest.raises(TrustConfigurationError, match=words):
            with make_catalog(
                Policy().user("a").user("b"), data_dir=tmp_path_factory.mktemp("kc-rule"), trusted_engines=[rule]
            ):
                pass


def test_the_realm_files_engine_client_has_no_user_facing_flow() -> None:
    """The rule trusts ``azp`` = engine: a user who could log in *through* the engine's client (a public client,
    a password, device, implicit or code flow) would get that azp without the engine. The realm file the docs
    ship keeps the client confidential with token exchange (and its service account) only."""
    import json

    from tests._keycloak import REALM_FILE

    [engine] = [c for c in json.loads(REALM_FILE.read_text())["clients"] if c["clientId"] == "engine"]
    assert engine["publicClient"] is False and engine["secret"].startswith("CHANGE-ME")
    for flow in ("standardFlowEnabled", "implicitFlowEnabled", "directAccessGrantsEnabled"):
        assert engine[flow] is False, flow
    attrs = engine["attributes"]
    assert attrs["standard.token.exchange.enabled"] == "true"
    assert attrs["oauth2.device.authorization.grant.enabled"] == "false" and attrs["oidc.ciba.grant.enabled"] == "false"
