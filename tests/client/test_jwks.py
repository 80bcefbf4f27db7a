"""``lakesession._wire.jwks``: the token checks a trusted engine applies to its users' tokens (and the catalog to
an external issuer's), against a reference catalog's real issuer: discovery and JWKS over HTTP on loopback."""

from __future__ import annotations

import base64
import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest
from joserfc import jwt
from joserfc.jwk import ECKey, OctKey

from lakesession._wire import jwks
from lakesession.reference import ReferenceCatalog
from lakesession.reference.errors import NotAuthorized, ServiceUnavailable
from lakesession.reference.idp import RemoteVerifier as CatalogVerifier
from tests.factories import Policy, free_port, make_catalog

AUDIENCE = "lakesession"
POLICY = Policy().user("alice").user("bob")


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    with make_catalog(POLICY, data_dir=tmp_path_factory.mktemp("jwks-home")) as handle:
        yield handle


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    """Another issuer, naming itself by a public address it is not reached at (a proxy in front of it)."""
    with make_catalog(
        POLICY, data_dir=tmp_path_factory.mktemp("jwks-foreign"), base_url="http://idp.invalid:8443"
    ) as handle:
        yield handle


def minted(handle: ReferenceCatalog, **claims: Any) -> str:
    """A token signed with ``handle``'s issuer key (its own kid and algorithm), with chosen claims."""
    issuer = handle.app.state.issuer
    now = int(time.time())
    body = {"iss": handle.issuer_uri, "sub": "alice", "aud": AUDIENCE, "iat": now, "exp": now + 300, **claims}
    return jwt.encode({"alg": issuer.alg, "typ": "at+jwt", "kid": issuer.kid}, body, issuer.key)


def rejection(verifier: jwks.RemoteVerifier, token: str) -> str:
    with pytest.raises(jwks.TokenRejected) as exc:
        verifier.verify(token)
    assert token not in str(exc.value)
    assert all(part not in str(exc.value) for part in token.split(".") if len(part) > 8)
    return str(exc.value)


def test_accepts_the_issuers_token_by_discovery_and_jwks(home: ReferenceCatalog) -> None:
    v = jwks.RemoteVerifier(home.issuer_uri, audiences=[AUDIENCE])
    claims = v.verify(home.admin.token_for("alice"))
    assert claims["sub"] == "alice" and claims["iss"] == home.issuer_uri
    assert v.verify(home.admin.token_for("bob"))["sub"] == "bob"
    assert v.fetch_count == 1  # keys cached
    # any one of several audiences will do; one is required
    assert jwks.RemoteVerifier(home.issuer_uri, audiences=["engine", AUDIENCE]).verify(minted(home))["sub"] == "alice"
    assert jwks.RemoteVerifier(home.issuer_uri, "engine").verify(minted(home, aud=["engine", "x"]))
    with pytest.raises(ValueError, match="audience"):
        jwks.RemoteVerifier(home.issuer_uri)


def test_rejects_bad_tokens_with_short_reasons(home: ReferenceCatalog, foreign: ReferenceCatalog) -> None:
    v = jwks.RemoteVerifier(home.issuer_uri, audiences=[AUDIENCE])
    good = home.admin.token_for("alice")
    assert v.verify(home.admin.token_for("alice", ttl=-10))  # within the 30 s leeway
    assert rejection(v, home.admin.token_for("alice", ttl=-120)) == "Token rejected: expired"
    mapper = "in aud: an IdP adds it with an audience mapper)"
    assert rejection(jwks.RemoteVerifier(home.issuer_uri, audiences=["engine"]), good) == (
        f"Token rejected: audience mismatch (expected 'engine' {mapper}"
    )
    assert rejection(v, minted(home, aud="another-service")) == (
        f"Token rejected: audience mismatch (expected {AUDIENCE!r} {mapper}"
    )
    # a foreign issuer's real token: its key is not the home issuer's; its iss under the home key: wrong issuer
    assert rejection(v, foreign.admin.token_for("alice")) == "Token rejected: signed by an unknown key"
    assert rejection(v, minted(home, iss=foreign.issuer_uri)) == "Token rejected: issuer mismatch"
    assert rejection(v, minted(home, sub=None)) == "Token rejected: missing claim sub"
    assert rejection(v, minted(home, nbf=int(time.time()) + 300)) == "Token rejected: not yet valid"
    # tampered: alice's token made bob's
    head, payload, sig = good.split(".")
    body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    evil = base64.urlsafe_b64encode(json.dumps({**body, "sub": "bob"}).encode()).rstrip(b"=").decode()
    assert rejection(v, f"{head}.{evil}.{sig}") == "Token rejected: invalid signature"
    # alg=none, and HMAC keyed with the issuer's public key (key confusion)
    none_head = base64.urlsafe_b64encode(b'{"alg":"none","typ":"at+jwt"}').rstrip(b"=").decode()
    assert rejection(v, f"{none_head}.{payload}.") == "Token rejected: signing algorithm not accepted"
    public = OctKey.import_key(json.dumps(home.app.state.issuer.jwks()["keys"][0]).encode())
    hmac = jwt.encode({"alg": "HS256", "typ": "at+jwt", "kid": home.app.state.issuer.kid}, body, public)
    assert rejection(v, hmac) == "Token rejected: signing algorithm not accepted"
    for bad in ("not-a-token", "a.b.c", "x" * 20_000):
        assert rejection(v, bad) == "Malformed bearer token: not a compact JWT"


def test_an_issuer_reached_at_another_address_needs_its_expected_iss(foreign: ReferenceCatalog) -> None:
    """``foreign`` names itself ``http://idp.invalid:8443/oidc`` (tokens, discovery) but answers on loopback."""
    reached = foreign.bind_url + "/oidc"
    token = foreign.admin.token_for("alice")
    plain = jwks.RemoteVerifier(reached, audiences=[AUDIENCE])
    with pytest.raises(jwks.IssuerUnavailable):  # the discovery document names another issuer
        plain.verify(token)
    v = jwks.RemoteVerifier(reached, audiences=[AUDIENCE], issuer=foreign.issuer_uri)
    assert v.verify(token)["iss"] == "http://idp.invalid:8443/oidc"
    assert rejection(v, minted(foreign, iss=reached)) == "Token rejected: issuer mismatch"
    wrong = jwks.RemoteVerifier(reached, audiences=[AUDIENCE], issuer="http://other.invalid/oidc")
    with pytest.raises(jwks.IssuerUnavailable):
        wrong.verify(token)


def test_an_unreachable_issuer_is_unavailable_not_a_bad_token() -> None:
    url = f"http://127.0.0.1:{free_port()}/oidc"
    token = _es256_token()
    with pytest.raises(jwks.IssuerUnavailable):
        jwks.RemoteVerifier(url, AUDIENCE).verify(token)
    # the catalog's verifier (a thin wrapper) maps the same outcomes onto its errors: 503 and 401
    with pytest.raises(ServiceUnavailable):
        CatalogVerifier(url, AUDIENCE).verify(token)
    with pytest.raises(NotAuthorized, match="Malformed bearer token"):
        CatalogVerifier(url, AUDIENCE).verify("not-a-token")


def _es256_token() -> str:
    key = ECKey.generate_key("P-256", auto_kid=True)
    claims = {"sub": "alice", "aud": AUDIENCE, "exp": int(time.time()) + 60, "jti": secrets.token_hex(4)}
    return jwt.encode({"alg": "ES256", "typ": "at+jwt", "kid": key.kid}, claims, key)
