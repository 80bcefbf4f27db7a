"""The embedded issuer's authorization code flow with PKCE, attacked over real HTTP on loopback.

The suite's shared reference catalog (with two registered web clients added by
bootstrap, each with one redirect URI; its user ``alice`` and service ``etl``) is
driven the way a browser and a web client would: GET the sign-in page, POST the
form, read the redirect, redeem the code at ``/token``.
"""

from __future__ import annotations

import base64
import hashlib
import html
import logging
import re
import secrets
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import KeySet

from lakesession.reference import ReferenceCatalog
from lakesession.reference import bootstrap as bootstrap_mod
from lakesession.reference.bootstrap import BootstrapError
from tests.conftest import SECRETS

HUB = "authcode-hub"
HUB_SECRET = "hub-secret-" + secrets.token_hex(8)
OTHER_SECRET = "other-secret-" + secrets.token_hex(8)
ALICE_PW = SECRETS["alice"]
ETL_SECRET = SECRETS["etl"]
REDIRECT = "http://127.0.0.1:9/hub/oauth_callback"
OTHER_REDIRECT = "http://127.0.0.1:9/other/callback"
CLIENTS = f"""
principals:
  - {{name: {HUB}, type: service, client_secret: {HUB_SECRET}, redirect_uris: [{REDIRECT}]}}
  - {{name: authcode-other, type: service, client_secret: {OTHER_SECRET}, redirect_uris: [{OTHER_REDIRECT}]}}
"""


@pytest.fixture(scope="module")
def cat(catalog: ReferenceCatalog) -> ReferenceCatalog:
    """The shared catalog, with this module's web clients registered."""
    catalog.admin.apply_bootstrap(bootstrap_mod.parse(CLIENTS))
    return catalog


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


def params(challenge: str, **over: str | None) -> dict[str, str]:
    p: dict[str, str | None] = {
        "response_type": "code",
        "client_id": HUB,
        "redirect_uri": REDIRECT,
        "scope": "openid catalog",
        "state": "st-" + secrets.token_hex(8),
        "nonce": "n-" + secrets.token_hex(8),
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    p.update(over)
    return {k: v for k, v in p.items() if v is not None}


def form_fields(page: str) -> dict[str, str]:
    """The sign-in form's hidden fields, as a browser would submit them."""
    return {
        html.unescape(n): html.unescape(v)
        for n, v in re.findall(r'<input type="hidden" name="([^"]*)" value="([^"]*)">', page)
    }


def sign_in(
    cat: ReferenceCatalog, query: dict[str, str], user: str = "alice", password: str = ALICE_PW
) -> httpx.Response:
    """Browser: GET /authorize, then POST the form with credentials (no redirect following)."""
    with httpx.Client(timeout=30) as browser:
        page = browser.get(f"{cat.issuer_uri}/authorize", params=query)
        assert page.status_code == 200, page.text
        return browser.post(
            f"{cat.issuer_uri}/authorize",
            data={**form_fields(page.text), "username": user, "password": password, "action": "login"},
        )


def redirect_params(resp: httpx.Response, base: str = REDIRECT) -> dict[str, str]:
    assert resp.status_code == 302, (resp.status_code, resp.text[:300])
    location = resp.headers["location"]
    assert location.split("?")[0] == base
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


def get_code(cat: ReferenceCatalog, query: dict[str, str]) -> str:
    got = redirect_params(sign_in(cat, query))
    assert got["state"] == query["state"]
    return got["code"]


def redeem(
    cat: ReferenceCatalog,
    code: str,
    verifier: str | None,
    *,
    client: tuple[str, str] = (HUB, HUB_SECRET),
    redirect_uri: str = REDIRECT,
) -> httpx.Response:
    data = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri}
    if verifier is not None:
        data["code_verifier"] = verifier
    return httpx.post(f"{cat.issuer_uri}/token", data=data, auth=client, timeout=30)


def refresh(cat: ReferenceCatalog, refresh_token: str) -> httpx.Response:
    data = {"grant_type": "refresh_token", "refresh_token": refresh_token}
    return httpx.post(f"{cat.issuer_uri}/token", data=data, auth=(HUB, HUB_SECRET), timeout=30)


def catalog_status(cat: ReferenceCatalog, access_token: str) -> int:
    """What a stolen token buys: listing the catalog's namespaces."""
    r = httpx.get(
        f"{cat.uri}/v1/config",
        params={"warehouse": cat.warehouse},
        headers={"Authorization": f"Bearer {access_token}"},
        timeout=30,
    )
    return r.status_code


def userinfo_status(cat: ReferenceCatalog, access_token: str) -> int:
    r = httpx.get(f"{cat.issuer_uri}/userinfo", headers={"Authorization": f"Bearer {access_token}"}, timeout=30)
    return r.status_code


def test_discovery_advertises_the_code_flow(cat: ReferenceCatalog) -> None:
    meta = httpx.get(f"{cat.issuer_uri}/.well-known/openid-configuration", timeout=30).json()
    assert meta["authorization_endpoint"] == f"{cat.issuer_uri}/authorize"
    assert meta["userinfo_endpoint"] == f"{cat.issuer_uri}/userinfo"
    assert meta["code_challenge_methods_supported"] == ["S256"]
    assert meta["response_types_supported"] == ["code"]
    assert "authorization_code" in meta["grant_types_supported"]


def test_code_flow_end_to_end(cat: ReferenceCatalog) -> None:
    verifier, challenge = pkce()
    query = params(challenge)
    tokens = redeem(cat, get_code(cat, query), verifier).json()
    assert tokens["token_type"].lower() == "bearer" and tokens["refresh_token"] and tokens["id_token"]
    keys = KeySet.import_key_set(httpx.get(f"{cat.issuer_uri}/jwks", timeout=30).json())
    assert jwt.decode(tokens["access_token"], keys).claims["sub"] == "alice"
    assert catalog_status(cat, tokens["access_token"]) == 200
    # the ID token: signed by the issuer's key, for this client, with the request's nonce
    claims = jwt.decode(tokens["id_token"], keys).claims
    assert claims["iss"] == cat.issuer_uri and claims["aud"] == [HUB] and claims["sub"] == "alice"
    assert claims["nonce"] == query["nonce"] and claims["preferred_username"] == "alice"
    info = httpx.get(
        f"{cat.issuer_uri}/userinfo", headers={"Authorization": f"Bearer {tokens['access_token']}"}, timeout=30
    )
    assert info.status_code == 200 and info.json()["sub"] == "alice"
    assert httpx.get(f"{cat.issuer_uri}/userinfo", headers={"Authorization": "Bearer x.y.z"}).status_code == 401
    # refresh rotates as for the other grants; the spent refresh token is refused afterwards
    rotated = refresh(cat, tokens["refresh_token"])
    assert rotated.status_code == 200 and rotated.json()["refresh_token"] != tokens["refresh_token"]
    assert jwt.decode(rotated.json()["access_token"], keys).claims["sub"] == "alice"
    assert refresh(cat, tokens["refresh_token"]).json()["error"] == "invalid_grant"


def test_without_openid_no_id_token(cat: ReferenceCatalog) -> None:
    verifier, challenge = pkce()
    tokens = redeem(cat, get_code(cat, params(challenge, scope="catalog", nonce=None)), verifier).json()
    assert tokens["access_token"] and "id_token" not in tokens


def test_stolen_code_without_or_with_wrong_verifier_is_invalid_grant(cat: ReferenceCatalog) -> None:
    verifier, challenge = pkce()
    code = get_code(cat, params(challenge))
    # the attacker intercepted the code (and even holds the client secret), but not the verifier
    no_verifier = redeem(cat, code, None)
    assert no_verifier.status_code == 400 and no_verifier.json()["error"] == "invalid_grant"
    wrong = redeem(cat, code, pkce()[0])
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant"
    assert "access_token" not in wrong.json()
    assert redeem(cat, code, verifier).status_code == 200  # the real client still can


@pytest.mark.parametrize(
    "over",
    [
        {"code_challenge": None, "code_challenge_method": None},
        {"code_challenge_method": "plain"},
        {"code_challenge_method": None},
    ],
    ids=["no-pkce", "plain", "no-method"],
)
def test_authorize_requires_s256(cat: ReferenceCatalog, over: dict[str, str | None]) -> None:
    query = params(pkce()[1], **over)
    resp = httpx.get(f"{cat.issuer_uri}/authorize", params=query, timeout=30)
    got = redirect_params(resp)  # registered client and URI: the error goes back to the client
    assert got["error"] == "invalid_request" and got["state"] == query["state"] and "code" not in got


def test_code_reuse_is_refused_and_revokes_its_tokens(cat: ReferenceCatalog) -> None:
    verifier, challenge = pkce()
    code = get_code(cat, params(challenge))
    first = redeem(cat, code, verifier)
    assert first.status_code == 200
    # replay of the same code (e.g. leaked from a log or browser history, with the verifier)
    replay = redeem(cat, code, verifier)
    assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"
    # RFC 6749 §4.1.2: the tokens issued from that code are revoked: the refresh token ...
    again = refresh(cat, first.json()["refresh_token"])
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"
    # ... and the access token (its sign-in session is gone), at the issuer and at the catalog
    assert userinfo_status(cat, first.json()["access_token"]) == 401
    assert catalog_status(cat, first.json()["access_token"]) == 401


def test_refresh_token_reuse_revokes_the_sessions_access_tokens(cat: ReferenceCatalog) -> None:
    verifier, challenge = pkce()
    tokens = redeem(cat, get_code(cat, params(challenge)), verifier).json()
    rotated = refresh(cat, tokens["refresh_token"]).json()
    assert userinfo_status(cat, rotated["access_token"]) == 200
    # a thief replays the spent refresh token: reuse detection ends the whole sign-in session
    assert refresh(cat, tokens["refresh_token"]).json()["error"] == "invalid_grant"
    assert userinfo_status(cat, rotated["access_token"]) == 401
    assert userinfo_status(cat, tokens["access_token"]) == 401
    assert refresh(cat, rotated["refresh_token"]).json()["error"] == "invalid_grant"


def test_code_is_bound_to_client_and_redirect_uri(cat: ReferenceCatalog) -> None:
    verifier, challenge = pkce()
    code = get_code(cat, params(challenge))
    other = redeem(cat, code, verifier, client=("authcode-other", OTHER_SECRET), redirect_uri=REDIRECT)
    assert other.json()["error"] == "invalid_grant"
    moved = redeem(cat, code, verifier, redirect_uri=REDIRECT + "x")
    assert moved.json()["error"] == "invalid_grant"
    bad_secret = redeem(cat, code, verifier, client=(HUB, "guess"))
    assert bad_secret.status_code == 401 and bad_secret.json()["error"] == "invalid_client"
    assert redeem(cat, code, verifier).status_code == 200


@pytest.mark.parametrize(
    "over",
    [
        {"redirect_uri": "http://127.0.0.1:9/evil"},
        {"redirect_uri": REDIRECT + "/../../evil"},
        {"redirect_uri": REDIRECT + "?next=http://evil.example"},
        {"redirect_uri": REDIRECT.replace(":9/", ":10/")},
        {"redirect_uri": OTHER_REDIRECT},  # another client's URI
        {"redirect_uri": None},
        {"client_id": "nobody"},
        {"client_id": "alice", "redirect_uri": REDIRECT},  # a principal without registered URIs
    ],
)
def test_unregistered_redirect_uri_or_client_shows_an_error_page(
    cat: ReferenceCatalog, over: dict[str, str | None]
) -> None:
    query = params(pkce()[1], **over)
    with httpx.Client(timeout=30) as browser:
        page = browser.get(f"{cat.issuer_uri}/authorize", params=query)
        assert page.status_code == 400 and "location" not in page.headers
        assert "Cannot sign in" in page.text and "evil.example" not in page.text.replace(html.escape("evil"), "")
        # the POST (with valid credentials and the form token from a good page) is refused the same way
        good = browser.get(f"{cat.issuer_uri}/authorize", params=params(pkce()[1]))
        token = form_fields(good.text)["csrf_token"]
        post = browser.post(
            f"{cat.issuer_uri}/authorize",
            data={**query, "csrf_token": token, "username": "alice", "password": ALICE_PW},
        )
        assert post.status_code == 400 and "location" not in post.headers


@pytest.mark.parametrize(
    "who", [("alice", "wrong-" + ALICE_PW), ("nobody", ALICE_PW), ("etl", ETL_SECRET), ("alice", "")]
)
def test_wrong_password_or_non_user_gets_no_code(cat: ReferenceCatalog, who: tuple[str, str]) -> None:
    resp = sign_in(cat, params(pkce()[1]), *who)
    assert resp.status_code == 401 and "location" not in resp.headers
    assert "Invalid user name or password" in resp.text and "code=" not in resp.text


def test_sign_in_post_without_the_forms_token_is_refused(cat: ReferenceCatalog) -> None:
    query = params(pkce()[1])
    creds = {"username": "alice", "password": ALICE_PW, "action": "login"}
    # a cross-site form auto-submitted in the victim's browser: no cookie (SameSite=Strict), no token
    bare = httpx.post(f"{cat.issuer_uri}/authorize", data={**query, **creds}, timeout=30)
    assert bare.status_code == 403 and "location" not in bare.headers
    with httpx.Client(timeout=30) as browser:
        page = browser.get(f"{cat.issuer_uri}/authorize", params=query)
        cookie = page.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/oidc/authorize" in cookie
        fields = form_fields(page.text)
        # the form's token without the cookie (another browser replaying the form) is refused
        replay = httpx.post(f"{cat.issuer_uri}/authorize", data={**fields, **creds}, timeout=30)
        assert replay.status_code == 403 and "location" not in replay.headers
        without = browser.post(f"{cat.issuer_uri}/authorize", data={**query, **creds})  # cookie, no field
        assert without.status_code == 403 and "location" not in without.headers
        forged = browser.post(f"{cat.issuer_uri}/authorize", data={**query, **creds, "csrf_token": "x" * 43})
        assert forged.status_code == 403
        ok = browser.post(f"{cat.issuer_uri}/authorize", data={**fields, **creds})
        assert redirect_params(ok)["code"]


def test_cancel_returns_access_denied_with_state(cat: ReferenceCatalog) -> None:
    query = params(pkce()[1])
    with httpx.Client(timeout=30) as browser:
        page = browser.get(f"{cat.issuer_uri}/authorize", params=query)
        resp = browser.post(f"{cat.issuer_uri}/authorize", data={**form_fields(page.text), "action": "deny"})
    got = redirect_params(resp)
    assert got["error"] == "access_denied" and got["state"] == query["state"] and "code" not in got


def test_sign_in_page_escapes_and_frames_nothing(cat: ReferenceCatalog) -> None:
    query = params(pkce()[1], state='"><script>alert(1)</script>')
    page = httpx.get(f"{cat.issuer_uri}/authorize", params=query, timeout=30)
    assert page.status_code == 200 and "<script>" not in page.text
    assert form_fields(page.text)["state"] == query["state"]
    csp = page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp and "form-action 'self' http://127.0.0.1:9" in csp
    assert page.headers["cache-control"] == "no-store"


def test_no_secret_reaches_the_logs(cat: ReferenceCatalog, caplog: pytest.LogCaptureFixture) -> None:
    verifier, challenge = pkce()
    with caplog.at_level(logging.DEBUG):
        code = get_code(cat, params(challenge))
        tokens = redeem(cat, code, verifier).json()
        redeem(cat, code, verifier)  # the replay is logged (as a warning), without the code
    # the server's records (the test's own HTTP client logs the redirect it receives, code included)
    text = "\n".join(r.getMessage() for r in caplog.records if not r.name.startswith(("httpx", "httpcore")))
    assert "reuse of an authorization code" in text
    for value in (code, verifier, tokens["access_token"], tokens["refresh_token"], tokens["id_token"]):
        assert value not in text
    for value in (ALICE_PW, HUB_SECRET):
        assert value not in text


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("{name: h, redirect_uris: [https://h.example/cb]}", "need a client_secret"),
        ("{name: h, client_secret: s, redirect_uris: [http://h.example/cb]}", "invalid redirect URI"),
        ("{name: h, client_secret: s, redirect_uris: ['https://h.example/cb#x']}", "invalid redirect URI"),
        ("{name: h, client_secret: s, redirect_uris: https://h.example/cb}", "redirect_uris must be a list"),
    ],
)
def test_bootstrap_checks_redirect_uris(entry: str, message: str) -> None:
    with pytest.raises(BootstrapError, match=message):
        bootstrap_mod.parse(f"principals:\n  - {entry}\n")


def test_bootstrap_reapplied_replaces_redirect_uris(cat: ReferenceCatalog) -> None:
    def policy(uri: str) -> bootstrap_mod.Bootstrap:
        return bootstrap_mod.parse(
            f"principals:\n  - {{name: authcode-reapply, client_secret: {HUB_SECRET}, redirect_uris: [{uri}]}}\n"
        )

    def page(uri: str) -> int:
        query = params(pkce()[1], client_id="authcode-reapply", redirect_uri=uri)
        return httpx.get(f"{cat.issuer_uri}/authorize", params=query, timeout=30).status_code

    cat.admin.apply_bootstrap(policy("https://one.example/cb"))
    assert page("https://one.example/cb") == 200
    cat.admin.apply_bootstrap(policy("https://two.example/cb"))
    assert page("https://one.example/cb") == 400  # the previous URI is no longer registered
    assert page("https://two.example/cb") == 200
