"""Keycloak's real error answers reach the user as one lakesession line naming the fix (issue 41).

Keycloak does not run here: a loopback double (FastAPI on uvicorn, real HTTP) replays what Keycloak 26.7.3
answered on these machines (``tests/fixtures/recordings/keycloak-26.7.3.json``, which the ``keycloak`` test
group re-asks of a real Keycloak on every run) at Keycloak's paths, and checks PKCE the way Keycloak does: a
client that requires S256 gets the recorded ``Missing parameter: code_challenge_method`` without a challenge,
and a poll whose ``code_verifier`` does not hash to the challenge gets the recorded mismatch.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from lakesession.identity import (
    ClientCredentials,
    DeviceCode,
    DeviceFlowError,
    IdentityError,
    LoginRequiredError,
    StaticToken,
    TokenExchange,
    from_issuer,
)
from tests.client.test_identity import serve
from tests.keycloak._answers import recorded

ANSWERS = recorded()
CLI, ETL, ENGINE = "lakesession-cli", "etl", "engine"
ETL_SECRET = "etl-secret-double-1"
DEVICE_CODE = "device-code-double-0123456789abcdef"


def replay(name: str) -> JSONResponse:
    """Keycloak's recorded answer ``name``: its status, the headers that matter, its body, byte for byte."""
    one = ANSWERS[name]
    return JSONResponse(one["body"], status_code=one["status"], headers=one["headers"])


def jwt(claims: dict[str, Any]) -> str:
    """An (unsigned) JWT with Keycloak's claim shapes: the client reads claims for display only."""

    def part(doc: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.c2lnbmF0dXJl"


@dataclass
class Realm:
    """The double's state: the challenge it was sent, what each refresh answers, what it saw."""

    base: str = ""
    methods: list[str] = field(default_factory=lambda: ["plain", "S256"])
    challenge: str | None = None
    polls: int = 0  # device polls so far: the first one is "still pending", as when the user has not approved yet
    swap_challenge: bool = False  # keep another challenge than the one sent (as a rewriting proxy would cause)
    refresh_answer: str | None = None  # a recorded answer's name, or None: a fresh token
    forms: list[dict[str, str]] = field(default_factory=list)

    @property
    def issuer(self) -> str:
        return f"{self.base}/realms/lake"


def keycloak_like(realm: Realm) -> FastAPI:
    app = FastAPI()
    oidc = "/realms/lake/protocol/openid-connect"

    @app.get("/realms/lake/.well-known/openid-configuration")
    async def discovery() -> JSONResponse:
        iss = realm.issuer
        return JSONResponse(
            {
                "issuer": iss,
                "token_endpoint": f"{iss}/protocol/openid-connect/token",
                "device_authorization_endpoint": f"{iss}/protocol/openid-connect/auth/device",
                "code_challenge_methods_supported": realm.methods,
            }
        )

    @app.post(f"{oidc}/auth/device")
    async def device(request: Request) -> JSONResponse:
        form = dict(parse_qsl((await request.body()).decode()))
        realm.forms.append(form)
        if "S256" in realm.methods and not form.get("code_challenge_method"):  # pkce.code.challenge.method=S256
            return replay("device_authorization_without_pkce")
        realm.challenge = s256("another verifier") if realm.swap_challenge else form.get("code_challenge")
        realm.polls = 0
        uri = f"{realm.issuer}/device"
        return JSONResponse(
            {
                "device_code": DEVICE_CODE,
                "user_code": "ABCD-EFGH",
                "verification_uri": uri,
                "verification_uri_complete": f"{uri}?user_code=ABCD-EFGH",
                "expires_in": 600,
                "interval": 5,
            }
        )

    @app.post(f"{oidc}/token")
    async def token(request: Request) -> JSONResponse:
        form = dict(parse_qsl((await request.body()).decode()))
        realm.forms.append(form)
        grant = form.get("grant_type", "")
        if grant == "client_credentials":
            if request.headers.get("authorization") != basic(ETL, ETL_SECRET):
                return replay("client_credentials_bad_secret")
            return issue("service-account-etl", ETL, refresh=False)
        if grant.endswith(":token-exchange"):
            return replay("token_exchange_not_in_audience")
        if grant.endswith(":device_code"):
            realm.polls += 1
            if realm.polls == 1:
                return replay("device_poll_pending")
            if realm.challenge is not None and s256(form.get("code_verifier", "")) != realm.challenge:
                return replay("device_poll_wrong_verifier")
            return issue("alice", CLI)
        if grant == "refresh_token":
            return replay(realm.refresh_answer) if realm.refresh_answer else issue("alice", CLI)
        return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)

    def issue(user: str, azp: str, *, refresh: bool = True) -> JSONResponse:
        claims = {"iss": realm.issuer, "sub": "5b3c…-uuid", "preferred_username": user, "azp": azp, "aud": "account"}
        body: dict[str, Any] = {"access_token": jwt(claims), "expires_in": 300, "token_type": "Bearer"}
        if refresh:
            body["refresh_token"] = jwt({"typ": "Refresh", "n": len(realm.forms)})
        return JSONResponse(body, headers={"Cache-Control": "no-store"})

    return app


def s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


def basic(user: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode()


@pytest.fixture
def realm(monkeypatch: pytest.MonkeyPatch) -> Iterator[Realm]:
    from lakesession.identity import _device

    monkeypatch.setattr(_device, "_sleep", lambda seconds: None)  # Keycloak's 5 s interval, not waited out here
    state = Realm()
    with serve(keycloak_like(state)) as base:
        state.base = base
        yield state


def one_line(err: BaseException, *secrets: str) -> str:
    message = str(err)
    assert "\n" not in message and "Traceback" not in message, message
    assert err._render_traceback_() == [f"\x1b[31mlakesession: {message}\x1b[0m"]  # type: ignore[attr-defined]
    for secret in secrets:
        assert secret not in message
    return message


def device(realm: Realm, **kw: Any) -> DeviceCode:
    src = from_issuer(realm.issuer, client_id=CLI, flow="device", on_prompt=lambda prompt: None, **kw)
    assert isinstance(src, DeviceCode)
    return src


# -- PKCE ----------------------------------------------------------------------------------------------
def test_the_device_login_sends_pkce_and_keycloak_accepts_it(realm: Realm) -> None:
    """Before: no code_challenge, so Keycloak answered 400 "Missing parameter: code_challenge_method"."""
    src = device(realm)
    src.login()
    assert src.logged_in and src.token()
    authorization, pending, poll = realm.forms  # Keycloak's recorded "authorization_pending", then the token
    assert authorization["code_challenge_method"] == "S256" and len(authorization["code_challenge"]) == 43
    assert pending["code_verifier"] == poll["code_verifier"]
    assert 43 <= len(poll["code_verifier"]) <= 128 and s256(poll["code_verifier"]) == authorization["code_challenge"]
    src.login()  # a new login, a new verifier (RFC 7636 §4.1: one per authorization request)
    assert realm.forms[3]["code_challenge"] != authorization["code_challenge"]


def test_without_pkce_keycloaks_refusal_is_one_line_naming_the_fix(realm: Realm) -> None:
    with pytest.raises(DeviceFlowError) as caught:
        device(realm, pkce=False).login()
    message = one_line(caught.value)
    assert message == (
        f"The issuer at {realm.issuer} refused the device authorization (invalid_request: Missing parameter: "
        f"code_challenge_method). The client '{CLI}' requires PKCE: leave pkce on (DeviceCode(..., pkce=True), "
        "the default) and call login() again."
    )


def test_a_verifier_keycloak_cannot_match_is_one_line(realm: Realm) -> None:
    realm.swap_challenge = True
    with pytest.raises(DeviceFlowError) as caught:
        device(realm).login()
    assert realm.forms[-1]["code_verifier"]  # it was sent; Keycloak said it does not match
    message = one_line(caught.value)
    assert "(invalid_grant: PKCE verification failed: Code mismatch). Call login() again" in message


def test_an_issuer_without_s256_gets_no_challenge(realm: Realm) -> None:
    realm.methods = ["plain"]  # discovery says S256 cannot be checked there: RFC 8414 §2
    src = device(realm)
    src.login()
    assert "code_challenge" not in realm.forms[0] and all("code_verifier" not in f for f in realm.forms[1:])


# -- the other flows' refusals ---------------------------------------------------------------------------
def test_a_bad_client_secret_is_one_line_naming_the_client(realm: Realm) -> None:
    good = ClientCredentials(f"{realm.issuer}/protocol/openid-connect/token", ETL, ETL_SECRET, issuer=realm.issuer)
    assert good.token()
    bad = ClientCredentials(
        f"{realm.issuer}/protocol/openid-connect/token", ETL, "wrong-secret-123456", issuer=realm.issuer
    )
    with pytest.raises(IdentityError) as caught:
        bad.token()
    message = one_line(caught.value, "wrong-secret-123456", ETL_SECRET)
    assert message == (
        f"The issuer at {realm.issuer} refused the token request (unauthorized_client: Invalid client or Invalid "
        "client credentials). Check the client id ('etl') and client secret, and that the client may use this grant."
    )


def test_a_refused_token_exchange_names_the_audience_fix(realm: Realm) -> None:
    subject = StaticToken(jwt({"preferred_username": "alice", "aud": "account", "exp": 4102444800}))
    engine = TokenExchange(
        f"{realm.issuer}/protocol/openid-connect/token", subject, ENGINE, "engine-secret-123456", issuer=realm.issuer
    )
    with pytest.raises(IdentityError) as caught:
        engine.token()
    message = one_line(caught.value, "engine-secret-123456", subject.token())
    assert message == (
        f"The issuer at {realm.issuer} refused to let client 'engine' exchange the subject's token (access_denied: "
        "Client is not within the token audience). Make the users' tokens name 'engine' in their audience "
        "(Keycloak: an audience mapper with included.client.audience=engine on the client they log in with), "
        "then try again."
    )


@pytest.mark.parametrize("answer", ["refresh_session_not_active", "refresh_token_not_active", "refresh_garbage"])
def test_a_dead_keycloak_session_asks_for_a_new_login_in_one_line(realm: Realm, answer: str) -> None:
    src = device(realm)
    src.login()
    refresh = src._current.refresh_token  # type: ignore[union-attr]
    assert refresh
    realm.refresh_answer = answer
    src.invalidate()  # as after the catalog's 401
    with pytest.raises(LoginRequiredError) as caught:
        src.token()
    message = one_line(caught.value, refresh)
    said = ANSWERS[answer]["body"]
    assert message == (
        f"The login at {realm.issuer} has ended: the refresh token was rejected ({said['error']}: "
        f"{said['error_description']}). To log in again, run `%lakesession login` in a notebook, or call "
        "lakesession.connect(...) again (a new device login)."
    )
    posts = len(realm.forms)
    with pytest.raises(LoginRequiredError, match="lakesession login"):
        src.token()
    assert len(realm.forms) == posts  # the dead refresh token was dropped: no second refusal to fetch


def test_the_recording_says_where_it_came_from_and_every_answer_is_replayed() -> None:
    source = Path(__file__).resolve().parents[1] / "fixtures" / "recordings" / "keycloak-26.7.3.json"
    doc = json.loads(source.read_text())
    assert "Keycloak 26.7.3" in doc["source"] and "tests/keycloak/_answers.py" in doc["source"]
    text = Path(__file__).read_text()
    for name, one in ANSWERS.items():
        assert f'"{name}"' in text, f"{name} is recorded but no double replays it"
        assert set(one["body"]) == {"error", "error_description"} and one["request"].startswith(
            "POST http://<keycloak>/"
        )
        assert one["headers"]["content-type"] == "application/json" and 400 <= one["status"] < 500
