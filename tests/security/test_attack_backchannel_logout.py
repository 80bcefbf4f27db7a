"""Attacks on OIDC back-channel logout: how a Keycloak logout or admin session revocation reaches the catalog.

The catalog trusts an external issuer (a stand-in: a second reference catalog's issuer, real discovery and
JWKS on loopback, signing Keycloak-shaped tokens: ``tests/_kcshape.py``) and accepts back-channel logout
tokens for client ``lakesession-cli`` at ``POST /oidc-backchannel-logout`` (form field ``logout_token``).
A verified logout token revokes its ``sid`` (every token of that sign-in session: the user's own and the
engine's exchange of it), or with only a ``sub`` every token of that subject issued before it; each is
refused from its next request on (401). Anyone can reach the endpoint, so everything a logout token must
be is attacked: the key, ``iss``, ``aud``, ``events``, ``nonce``, ``iat``, ``jti`` replay, and its reach.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lakesession.reference import ReferenceCatalog
from tests import _kcshape as kc
from tests._lake import Lake
from tests.factories import Policy, make_catalog
from tests.support import bad_request

# replicas and forged logout tokens, ~10 s: off the fast set (its 5-min budget); runs in CI's slow group
pytestmark = pytest.mark.slow

ENDPOINT = "/oidc-backchannel-logout"


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    with make_catalog(Policy().user("nobody"), data_dir=tmp_path_factory.mktemp("bcl-idp")) as idp:
        with make_catalog(
            Policy().user("alice").user("bob"),
            data_dir=tmp_path_factory.mktemp("bcl-lake"),
            issuer_url=idp.issuer_uri,
            principal_claim="preferred_username",
            backchannel_logout_clients=["lakesession-cli"],
        ) as handle:
            yield Lake(handle, idp=idp)


def config(lake: Lake, token: str) -> httpx.Response:
    """An authenticated catalog request (``GET /v1/config``)."""
    return httpx.get(f"{lake.handle.uri}/v1/config", headers={"Authorization": f"Bearer {token}"}, timeout=30)


def logout(lake: Lake, token: str | None, **form: str) -> httpx.Response:
    data = {"logout_token": token, **form} if token is not None else form
    return httpx.post(f"{lake.handle.uri}{ENDPOINT}", data=data, timeout=30)


def works(lake: Lake, token: str) -> bool:
    r = config(lake, token)
    assert r.status_code in (200, 401), r.text
    return r.status_code == 200


def test_a_logout_refuses_every_token_of_that_session_at_its_next_request(lake: Lake) -> None:
    sid = str(uuid.uuid4())
    alice = kc.user_token(lake.idp, "alice", sid=sid)
    through_engine = kc.engine_exchange(lake.idp, "alice", sid=sid)  # Keycloak's exchange keeps her sid
    other_session = kc.user_token(lake.idp, "alice")
    bob = kc.user_token(lake.idp, "bob")
    assert all(works(lake, t) for t in (alice, through_engine, other_session, bob))  # verified, now cached
    r = logout(lake, kc.logout_token(lake.idp, sid=sid, sub=kc.SUBJECTS["alice"]))
    assert r.status_code == 200, r.text
    assert r.headers["cache-control"] == "no-store"
    for token in (alice, through_engine):
        refused = config(lake, token)
        assert refused.status_code == 401, refused.text
        error = refused.json()["error"]
        assert error["type"] == "NotAuthorizedException" and "logged out" in error["message"], error
        assert token.split(".")[2] not in refused.text
    # the logout reaches nothing beyond its sid: her other session and bob keep working
    assert works(lake, other_session) and works(lake, bob)


def test_a_subject_logout_ends_tokens_issued_before_it_only(lake: Lake) -> None:
    before = kc.user_token(lake.idp, "bob", sid=None)
    assert works(lake, before)
    assert logout(lake, kc.logout_token(lake.idp, sid=None, sub=kc.SUBJECTS["bob"])).status_code == 200
    assert not works(lake, before)
    earlier = kc.user_token(lake.idp, "bob", iat=int(time.time()) - 5)  # another session, issued before the logout
    assert not works(lake, earlier)
    later = kc.user_token(lake.idp, "bob", iat=int(time.time()) + 2)  # a new login after the logout
    assert works(lake, later)


def _fresh(lake: Lake) -> tuple[str, str]:
    sid = str(uuid.uuid4())
    token = kc.user_token(lake.idp, "alice", sid=sid)
    assert works(lake, token)
    return sid, token


def test_forged_logout_tokens_are_refused_and_revoke_nothing(lake: Lake) -> None:
    sid, token = _fresh(lake)
    sub = kc.SUBJECTS["alice"]
    now = int(time.time())
    forged = {
        "a key that is not the issuer's": kc.logout_token(lake.idp, sid=sid, sub=sub, key=kc.attacker_key()),
        "another issuer": kc.logout_token(lake.idp, sid=sid, sub=sub, iss="https://evil.example/realms/lake"),
        "another client's audience": kc.logout_token(lake.idp, sid=sid, sub=sub, aud="etl"),
        "no events": kc.logout_token(lake.idp, sid=sid, sub=sub, events=None),
        "another event": kc.logout_token(lake.idp, sid=sid, sub=sub, events={"urn:other": {}}),
        "events not an object": kc.logout_token(lake.idp, sid=sid, sub=sub, events=[kc.LOGOUT_EVENT]),
        "a nonce (an ID token)": kc.logout_token(lake.idp, sid=sid, sub=sub, nonce="n-1"),
        "no jti": kc.logout_token(lake.idp, sid=sid, sub=sub, jti=None),
        "an old iat": kc.logout_token(lake.idp, sid=sid, sub=sub, iat=now - 3600, exp=None),
        "iat in the future": kc.logout_token(lake.idp, sid=sid, sub=sub, iat=now + 3600),
        "no iat": kc.logout_token(lake.idp, sid=sid, sub=sub, iat=None),
        "expired": kc.logout_token(lake.idp, sid=sid, sub=sub, exp=now - 120),
        "neither sid nor sub": kc.logout_token(lake.idp, sid=None, sub=None),
        "a sid that is not a string": kc.logout_token(lake.idp, sid=["x"], sub=sub),  # type: ignore[arg-type]
        "her access token": token,
        "not a JWT": "garbage",
        "alg none": "eyJhbGciOiJub25lIn0." + token.split(".")[1] + ".",
    }
    for why, bad in forged.items():
        r = logout(lake, bad)
        message = bad_request(r, "logout_token")
        assert all(part not in message for part in bad.split(".") if len(part) > 8), (why, message)  # no echo
        assert works(lake, token), f"{why} revoked her session"
    bad_request(logout(lake, None), "logout_token")  # the field is missing
    bad_request(logout(lake, None, id_token=token), "logout_token")  # another field
    as_json = httpx.post(f"{lake.handle.uri}{ENDPOINT}", json={"logout_token": token}, timeout=30)  # not a form
    bad_request(as_json, "logout_token", "form-encoded")
    assert works(lake, token)


def test_a_replayed_logout_token_is_refused(lake: Lake) -> None:
    sid, _ = _fresh(lake)
    first = kc.logout_token(lake.idp, sid=sid, sub=kc.SUBJECTS["alice"])
    assert logout(lake, first).status_code == 200
    bad_request(logout(lake, first), "logout_token", "jti")


def test_the_endpoint_is_off_without_configured_clients(tmp_path_factory: pytest.TempPathFactory, lake: Lake) -> None:
    """A catalog that names no logout clients accepts no logout tokens (nothing can be revoked through it)."""
    with make_catalog(
        Policy().user("alice"), data_dir=tmp_path_factory.mktemp("bcl-off"), issuer_url=lake.idp.issuer_uri
    ) as off:
        sid = str(uuid.uuid4())
        r = httpx.post(
            f"{off.uri}{ENDPOINT}", data={"logout_token": kc.logout_token(lake.idp, sid=sid, sub="x")}, timeout=30
        )
        assert r.status_code == 404, r.text


def test_random_kids_cannot_make_the_catalog_hammer_the_issuer(lake: Lake) -> None:
    """Tokens and logout tokens naming unknown keys (an attacker's, or made-up kids): the catalog refetches the
    issuer's JWKS at most once per ``refetch_interval`` (30 s), however many arrive."""
    verifier = lake.handle.app.state.services.extras["remote_verifier"]
    assert works(lake, kc.user_token(lake.idp, "alice"))  # keys loaded
    before = verifier.fetch_count
    key = kc.attacker_key()
    for i in range(40):
        kid = f"rotated-{i}-{uuid.uuid4().hex[:6]}"
        forged = kc.sign(lake.idp, {"iss": lake.idp.issuer_uri, "sub": "x", "aud": "lakesession"}, key=key, kid=kid)
        assert config(lake, forged).status_code == 401
        bad_request(logout(lake, kc.logout_token(lake.idp, sid="s", sub="x", key=key)), "logout_token")
    assert verifier.fetch_count - before <= 1, verifier.fetch_count - before


def test_a_logout_posted_to_one_replica_ends_the_session_on_the_other(lake: Lake, tmp_path: Path) -> None:
    """Two replicas sharing one database (a SQLite file in one data dir): Keycloak posts the logout to one of
    them; the other, which verified and cached the token, refuses it within a second (the shared generation)."""
    from lakesession.reference import start

    options = {
        "issuer_url": lake.idp.issuer_uri,
        "principal_claim": "preferred_username",
        "backchannel_logout_clients": ["lakesession-cli"],
        "bootstrap": Policy().user("alice").parse(),
    }
    a = start(data_dir=tmp_path, **options)
    try:
        b = start(data_dir=tmp_path, base_url=a.uri, **options)
        try:
            sid = str(uuid.uuid4())
            token = kc.user_token(lake.idp, "alice", sid=sid)

            def status(replica: ReferenceCatalog) -> int:  # at the replica's own address, not the shared URL
                headers = {"Authorization": f"Bearer {token}"}
                return httpx.get(f"{replica.bind_url}/v1/config", headers=headers, timeout=30).status_code

            assert status(a) == 200 and status(b) == 200  # both verified and cached it
            posted = httpx.post(
                f"{a.bind_url}{ENDPOINT}",
                data={"logout_token": kc.logout_token(lake.idp, sid=sid, sub="s")},
                timeout=30,
            )
            assert posted.status_code == 200, posted.text
            assert status(a) == 401  # the replica that received it: at once
            time.sleep(1.2)  # the other re-reads the shared logout generation at most every second
            assert status(b) == 401
        finally:
            b.stop()
    finally:
        a.stop()
