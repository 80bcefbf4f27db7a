"""Attacks on a trusted engine acting for users: the catalog side of ``lakesession engine``.

The engine is a platform-run service with its own identity (``engine``: ``TOKEN_EXCHANGE`` on the
catalog and nothing else), declared by name in ``trusted_engines``. For a user's call it exchanges the
user's access token at the issuer's token endpoint (RFC 8693, its own client credentials): the new
token names the user (``sub``) and the engine as the current actor (``act.sub``). The catalog then
honours ``referenced-by`` (DEFINER views) because the *actor* is a trusted engine, while every check
stays the user's.

Catalog ``lake`` (S3 emulator): ``etl`` manages content; bob reads ``sales.orders`` and, through the
engine, owns the DEFINER view ``sales.v_eu`` over it; alice may only read that view (and create and
alter views in ``scratch``). Catalog ``open`` trusts no engine; catalog ``rules`` trusts by issuer rules
(audience, subject). Every attack is the real HTTP request (the issuer's token endpoint, the catalog),
then, where something was handed out, the store call it enables.
"""

from __future__ import annotations

import json
import secrets
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError
from joserfc import jws, jwt

from lakesession.reference import ReferenceCatalog
from tests._lake import Lake
from tests.factories import free_port, make_catalog, vended_s3_client
from tests.support import OWNER, engine_policy, exchange_response, issuer_token, struct, view_body

P = "/v1/lakesession"
BUCKET = "lake-engine-trust"
VENDED = {"X-Iceberg-Access-Delegation": "vended-credentials"}
CHAIN = "sales%1Fv_eu"
EU_SQL = "SELECT id, amount FROM sales.orders WHERE region = 'EU'"
IGNORED = "referenced-by was ignored"
NOT_TRUSTED = "is not a trusted engine of this catalog"
SECRETS = {who: f"{who}-secret-{secrets.token_hex(4)}" for who in ("etl", "engine", "alice", "bob")}
POLICY = (
    engine_policy(SECRETS)
    .grant("r_bob", "TABLE_READ_DATA", "table sales.orders")
    .grant_all("r_bob", ["VIEW_CREATE", "VIEW_WRITE_PROPERTIES"], "namespace sales")
    .grant("r_alice", "VIEW_READ", "view sales.v_eu")
    .grant_all("r_alice", ["VIEW_CREATE", "VIEW_WRITE_PROPERTIES"], "namespace scratch")
)
TABLE_SCHEMA = struct(("id", "long"), ("amount", "double"), ("region", "string"))


# ---------------------------------------------------------------- real HTTP: issuer and catalog
def client_token(handle: ReferenceCatalog, who: str, secret: str | None = None) -> str:
    """``who``'s own access token: client credentials at the issuer's token endpoint."""
    return issuer_token(handle, who, secret or SECRETS[who])


def exchanged(handle: ReferenceCatalog, subject_token: str, client: str = "engine") -> str:
    r = exchange_response(handle, client, SECRETS[client], subject_token)
    assert r.status_code == 200, r.text
    return str(r.json()["access_token"])


def via_engine(handle: ReferenceCatalog, who: str) -> str:
    """What ``lakesession engine`` presents to the catalog for ``who``: ``who``'s token exchanged by the engine."""
    return exchanged(handle, client_token(handle, who))


def call(
    handle: ReferenceCatalog, method: str, path: str, token: str, body: Any = None, **headers: str
) -> httpx.Response:
    h = {"Authorization": f"Bearer {token}", **headers}
    return httpx.request(method, f"{handle.uri}{P}{path}", headers=h, json=body, timeout=30)


def load_orders(handle: ReferenceCatalog, token: str, chain: str | None = CHAIN, **headers: str) -> httpx.Response:
    q = f"?referenced-by={chain}" if chain is not None else ""
    return call(handle, "GET", f"/namespaces/sales/tables/orders{q}", token, **headers)


def claims_of(token: str) -> dict[str, Any]:
    """The (unverified) claims of a token this test just received from the issuer (the catalog verifies it)."""
    return dict(json.loads(jws.extract_compact(token.encode()).payload))


def message(r: httpx.Response) -> str:
    return str(r.json()["error"]["message"])


def assert_chain_ignored(r: httpx.Response, who: str = "alice") -> None:
    assert r.status_code == 403, r.text
    text = message(r)
    assert text.startswith(f"Principal {who!r} is not authorized for load_table"), text
    assert IGNORED in text and NOT_TRUSTED in text and "lakesession engine" in text, text
    assert "\n" not in text and "metadata" not in r.json()


def seed(handle: ReferenceCatalog, owner_token: str) -> str:
    """``sales.orders`` (created by etl, one data object) and the DEFINER view ``sales.v_eu`` (owner bob),
    created with ``owner_token``; returns the table's key prefix in the bucket."""
    etl = client_token(handle, "etl")
    for ns in ("sales", "scratch"):
        assert call(handle, "POST", "/namespaces", etl, {"namespace": [ns]}).status_code == 200
    r = call(handle, "POST", "/namespaces/sales/tables", etl, {"name": "orders", "schema": TABLE_SCHEMA})
    assert r.status_code == 200, r.text
    location = str(r.json()["metadata"]["location"])
    r = call(handle, "POST", "/namespaces/sales/views", owner_token, view_body("v_eu", EU_SQL, owner="bob"))
    assert r.status_code == 200, r.text
    return location.split("://", 1)[1].split("/", 1)[1].rstrip("/")


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    with make_catalog(
        POLICY,
        bucket=BUCKET,
        data_dir=tmp_path_factory.mktemp("engine-trust"),
        trusted_engines=[{"principal": "engine"}],
    ) as handle:
        # with trusted engines configured, the engine acting for bob is the only way to make bob's DEFINER view
        prefix = seed(handle, via_engine(handle, "bob"))
        handle.s3_emulator.client().put_object(Bucket=BUCKET, Key=f"{prefix}/data/eu.parquet", Body=b"orders")
        yield Lake(handle, bucket=BUCKET, loc={"orders": prefix})


# ---------------------------------------------------------------- the user's own Spark is not the engine
def test_users_own_token_with_referenced_by_is_ignored_and_the_denial_says_why(lake: Lake) -> None:
    alice = client_token(lake.handle, "alice")
    r = load_orders(lake.handle, alice, **VENDED)
    assert "storage-credentials" not in r.text
    assert_chain_ignored(r)
    assert "'alice'" in message(r).split(IGNORED, 1)[1]  # names the caller that is not trusted
    # the chain is ignored on the other chain-aware routes too, with the same explanation
    creds = call(lake.handle, "GET", f"/namespaces/sales/tables/orders/credentials?referenced-by={CHAIN}", alice)
    assert creds.status_code == 403 and IGNORED in message(creds), creds.text
    uri = f"{lake.handle.s3_emulator.endpoint}/{BUCKET}/{lake.loc['orders']}/data/eu.parquet"
    sign = call(
        lake.handle,
        "POST",
        f"/namespaces/sales/tables/orders/sign?referenced-by={CHAIN}",
        alice,
        {"region": "us-east-1", "uri": uri, "method": "GET"},
    )
    assert sign.status_code == 403 and IGNORED in message(sign), sign.text


def test_engine_acting_for_alice_reads_through_bobs_definer_view_read_only(lake: Lake) -> None:
    token = via_engine(lake.handle, "alice")
    claims = claims_of(token)
    assert claims["sub"] == "alice" and claims["act"] == {"sub": "engine"}
    rid = f"engine-trust-{uuid.uuid4().hex[:12]}"
    since = time.time() - 0.001
    r = load_orders(lake.handle, token, **VENDED, **{"X-Request-Id": rid})
    assert r.status_code == 200, r.text
    [cred] = r.json()["storage-credentials"]
    assert cred["prefix"].rstrip("/").endswith("/sales/orders")
    # the audit (alice may read her own records over HTTP): alice is the principal, the engine the actor
    audit = httpx.get(
        f"{lake.handle.uri}/management/v1/audit",
        params={"principal": "alice", "since": str(since)},
        headers={"Authorization": f"Bearer {client_token(lake.handle, 'alice')}"},
        timeout=30,
    )
    assert audit.status_code == 200, audit.text
    mine = [x for x in audit.json() if x["request_id"] == rid]
    target = next(x for x in mine if x["securable"] == "table sales.orders" and x["decision"] == "allow")
    assert target["principal"] == "alice" and target["detail"]["actor"] == "engine"
    assert target["detail"]["chain"] == ["sales.v_eu"] and target["detail"]["user_in_effect"] == "bob"
    assert target["detail"]["delegated"] is True
    step = next(x for x in mine if x["securable"] == "view sales.v_eu")
    assert step["detail"]["user_in_effect"] == "alice" and step["detail"]["actor"] == "engine"
    vended = next(x for x in mine if x["action"] == "vend_credentials")
    assert vended["detail"]["mode"] == "read" and vended["detail"]["actor"] == "engine"
    # read-only, proved on the store: the vended keys read the table's data but cannot write into its prefix
    s3 = vended_s3_client(lake.handle.s3_emulator.endpoint, cred["config"])
    assert s3.get_object(Bucket=BUCKET, Key=f"{lake.loc['orders']}/data/eu.parquet")["Body"].read() == b"orders"
    planted = f"{lake.loc['orders']}/data/planted.parquet"
    with pytest.raises(ClientError, match="AccessDenied"):
        s3.put_object(Bucket=BUCKET, Key=planted, Body=b"x")
    with pytest.raises(ClientError):
        lake.handle.s3_emulator.client().head_object(Bucket=BUCKET, Key=planted)


def test_the_exchanged_token_without_referenced_by_is_alice_alone(lake: Lake) -> None:
    r = load_orders(lake.handle, via_engine(lake.handle, "alice"), chain=None, **VENDED)
    assert r.status_code == 403 and "storage-credentials" not in r.text
    assert message(r).startswith("Principal 'alice' is not authorized for load_table on table sales.orders")
    assert "referenced-by" not in message(r)  # nothing was ignored: the message is unchanged


# ---------------------------------------------------------------- tokens that are not the engine's
def test_alice_exchanging_her_own_token_is_not_the_engine(lake: Lake) -> None:
    """A user with a client secret may exchange her own token (act.sub = alice): she is no engine."""
    token = exchanged(lake.handle, client_token(lake.handle, "alice"), client="alice")
    assert claims_of(token)["act"] == {"sub": "alice"}
    assert_chain_ignored(load_orders(lake.handle, token, **VENDED))


def test_exchanging_as_the_engine_needs_the_engines_secret(lake: Lake) -> None:
    alice = client_token(lake.handle, "alice")
    for secret in ("wrong-secret", SECRETS["alice"]):
        r = exchange_response(lake.handle, "engine", secret, alice)
        assert r.status_code == 401 and r.json()["error"] == "invalid_client", r.text
        assert "access_token" not in r.json()
    # alice's client cannot exchange another principal's token either (no TOKEN_EXCHANGE)
    r = exchange_response(lake.handle, "alice", SECRETS["alice"], client_token(lake.handle, "bob"))
    assert r.status_code in (400, 401) and "access_token" not in r.json(), r.text


def test_nested_act_only_the_outermost_actor_counts(lake: Lake) -> None:
    """alice re-exchanges a token the engine minted for her: the engine is history, alice the actor."""
    through_engine = via_engine(lake.handle, "alice")
    token = exchanged(lake.handle, through_engine, client="alice")
    assert claims_of(token)["act"] == {"sub": "alice", "act": {"sub": "engine"}}
    assert_chain_ignored(load_orders(lake.handle, token, **VENDED))


# ---------------------------------------------------------------- the owner property under delegation
def _create(handle: ReferenceCatalog, token: str, name: str, owner: str | None, ns: str = "scratch") -> httpx.Response:
    return call(
        handle,
        "POST",
        f"/namespaces/{ns}/views",
        token,
        view_body(name, "SELECT * FROM sales.orders", owner, namespace=ns),
    )


def test_through_the_engine_alice_cannot_make_a_view_owned_by_bob(lake: Lake) -> None:
    token = via_engine(lake.handle, "alice")
    r = _create(lake.handle, token, "all_orders", "bob")
    # the harm, if it was created: alice reads all of sales.orders as bob through her own view
    read = load_orders(lake.handle, via_engine(lake.handle, "alice"), chain="scratch%1Fall_orders", **VENDED)
    assert read.status_code == 403 and "storage-credentials" not in read.text, read.text
    assert r.status_code == 403 and r.json()["error"]["type"] == "ProtectedPropertyModification", r.text
    assert OWNER in message(r) and "'alice'" in message(r) and "own principal" in message(r)
    # her own name is fine: the view runs with her privileges (so it reads nothing she cannot)
    ok = _create(lake.handle, token, "mine", "alice")
    assert ok.status_code == 200 and ok.json()["metadata"]["properties"][OWNER] == "alice", ok.text
    # altering it: bob is refused, alice stays allowed, removing stays allowed
    for owner, status in (("bob", 403), ("alice", 200)):
        upd = {"updates": [{"action": "set-properties", "updates": {OWNER: owner}}]}
        r = call(lake.handle, "POST", "/namespaces/scratch/views/mine", via_engine(lake.handle, "alice"), upd)
        assert r.status_code == status, (owner, r.text)
        if status == 403:
            assert r.json()["error"]["type"] == "ProtectedPropertyModification"
    props = call(lake.handle, "GET", "/namespaces/scratch/views/mine", token).json()["metadata"]["properties"]
    assert props[OWNER] == "alice"
    # removing it (the view turns INVOKER: nobody gains) stays allowed through the engine
    rm = {"updates": [{"action": "remove-properties", "removals": [OWNER]}]}
    r = call(lake.handle, "POST", "/namespaces/scratch/views/mine", via_engine(lake.handle, "alice"), rm)
    assert r.status_code == 200 and OWNER not in r.json()["metadata"]["properties"], r.text


def test_bob_through_the_engine_may_own_his_view(lake: Lake) -> None:
    r = _create(lake.handle, via_engine(lake.handle, "bob"), "v_all", "bob", ns="sales")
    assert r.status_code == 200 and r.json()["metadata"]["properties"][OWNER] == "bob", r.text


def test_alices_own_token_may_not_touch_the_owner_property(lake: Lake) -> None:
    r = _create(lake.handle, client_token(lake.handle, "alice"), "direct", "alice")
    assert r.status_code == 403 and r.json()["error"]["type"] == "ProtectedPropertyModification", r.text


# ---------------------------------------------------------------- a catalog without trusted engines
def test_without_trusted_engines_the_engines_chain_is_ignored(tmp_path_factory: pytest.TempPathFactory) -> None:
    with make_catalog(POLICY, data_dir=tmp_path_factory.mktemp("engine-open"), trusted_engines=[]) as handle:
        seed(handle, client_token(handle, "etl"))  # the owner property has no effect (nor protection) here
        token = via_engine(handle, "alice")
        r = load_orders(handle, token)
        assert_chain_ignored(r)
        assert "'engine'" in message(r).split(IGNORED, 1)[1] and "'alice'" in message(r).split(IGNORED, 1)[1]


# ---------------------------------------------------------------- issuer rules: audience and subject
ENGINE_AUDIENCE = "lakesession-engine"


@pytest.fixture(scope="module")
def rules(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    """Trusts an engine by issuer rules only: an audience only the engine's tokens are meant to carry, and
    the engine's subject. Tokens with that audience are signed with the issuer's own key below: what an
    external IdP mints when a client asks for the audience (RFC 8693 lets the requester name it)."""
    port = free_port()
    iss = f"http://127.0.0.1:{port}/oidc"
    with make_catalog(
        POLICY,
        port=port,
        data_dir=tmp_path_factory.mktemp("engine-rules"),
        trusted_engines=[{"issuer": iss, "audience": ENGINE_AUDIENCE}, {"issuer": iss, "subject": "engine"}],
    ) as handle:
        assert handle.issuer_uri == iss
        seed(handle, via_engine(handle, "bob"))  # the subject rule names the engine: acting for bob, it is trusted
        yield handle


def minted(handle: ReferenceCatalog, sub: str, **claims: Any) -> str:
    """A token signed by ``handle``'s issuer key with the claims an IdP would put in it."""
    issuer = handle.app.state.issuer
    now = int(time.time())
    body = {
        "iss": handle.issuer_uri,
        "sub": sub,
        "aud": [handle.settings.audience, ENGINE_AUDIENCE],
        "iat": now,
        "exp": now + 300,
        "jti": secrets.token_hex(8),
        "scope": "catalog",
        **claims,
    }
    return jwt.encode({"alg": issuer.alg, "typ": "at+jwt", "kid": issuer.kid}, body, issuer.key)


def test_an_audience_rule_does_not_trust_an_exchanged_token(rules: ReferenceCatalog) -> None:
    """alice exchanges her own token asking for the engine's audience: the audience says for whom the token was
    minted (the requester chose it), not who acts; only a rule naming the actor can trust a delegated token."""
    for act in ({"sub": "alice"}, {"sub": "alice", "act": {"sub": "engine"}}, {"sub": "mallory"}):
        assert_chain_ignored(load_orders(rules, minted(rules, "alice", act=act)))
    # the rule's own case is unchanged: a token minted for the engine's audience, no delegation
    assert load_orders(rules, minted(rules, "alice")).status_code == 200


def test_a_subject_rule_trusts_the_engine_as_the_actor(rules: ReferenceCatalog) -> None:
    through_engine = via_engine(rules, "alice")
    assert load_orders(rules, through_engine).status_code == 200
    own = exchanged(rules, client_token(rules, "alice"), client="alice")
    assert_chain_ignored(load_orders(rules, own))
    assert_chain_ignored(load_orders(rules, exchanged(rules, through_engine, client="alice")))  # nested: alice acts


# ---------------------------------------------------------------- the rules themselves (no server)
def test_trust_rules_follow_the_current_actor() -> None:
    from lakesession.reference.settings import ServerSettings
    from lakesession.reference.viewsecurity import is_trusted

    iss = "https://idp.example"
    s = ServerSettings(
        warehouse="file:///x",
        db_url="sqlite://",
        trusted_engines=[
            {"principal": "engine"},
            {"issuer": iss, "audience": ENGINE_AUDIENCE},
            {"issuer": iss, "subject": "svc-engine"},
        ],
    )
    user = {"iss": iss, "aud": "lakesession", "sub": "alice"}
    assert not is_trusted(user, "alice", s)
    assert is_trusted({**user, "act": {"sub": "engine"}}, "alice", s)  # principal rule: the actor
    assert is_trusted({**user, "sub": "engine"}, "engine", s)  # ...or the principal, as before
    assert not is_trusted({**user, "act": {"sub": "alice", "act": {"sub": "engine"}}}, "alice", s)  # history
    assert is_trusted({**user, "act": {"sub": "engine", "act": {"sub": "alice"}}}, "alice", s)
    assert not is_trusted({**user, "act": "engine"}, "alice", s)  # not an actor object: nobody acts
    # subject rule: the actor's sub, under the rule's issuer (the token's, or the act's own)
    assert is_trusted({**user, "act": {"sub": "svc-engine"}}, "alice", s)
    assert not is_trusted({**user, "act": {"sub": "svc-engine", "iss": "https://evil.example"}}, "alice", s)
    assert not is_trusted({**user, "iss": "https://evil.example", "act": {"sub": "svc-engine"}}, "alice", s)
    # audience rule: only an undelegated token
    assert is_trusted({**user, "aud": [ENGINE_AUDIENCE]}, "alice", s)
    for act in ({"sub": "alice"}, {"sub": "mallory"}, {"sub": "alice", "act": {"sub": "svc-engine"}}, {}):
        assert not is_trusted({**user, "aud": [ENGINE_AUDIENCE], "act": act}, "alice", s), act
    # with another principal claim, the actor's principal name is that claim of the act
    named = ServerSettings(
        warehouse="file:///x", db_url="sqlite://", principal_claim="name", trusted_engines=[{"principal": "engine"}]
    )
    assert is_trusted({**user, "name": "alice", "act": {"sub": "u-1", "name": "engine"}}, "alice", named)
    assert not is_trusted({**user, "name": "alice", "act": {"sub": "engine"}}, "alice", named)
