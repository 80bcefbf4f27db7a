"""The notebook/script client's logins against a real Keycloak 26.7.3 (issue 41): one realm of the module's own.

* device login (RFC 8628) with PKCE S256, approved by alice on **Keycloak's own HTML pages over HTTP**
  (``_form.approve``: the login form's action URL, hidden fields and cookies), never a shortcut grant;
  the token then works at a reference catalog that trusts the realm;
* client credentials of the ``etl`` service principal, and Keycloak's refusal of a wrong secret;
* refresh ahead of expiry (the client's access tokens made to live 10 s through the admin API);
* an admin logout of alice's sessions: the next refresh is refused and the user reads one line (from the
  token source, and from a ``lakesession.connect`` session's next catalog call);
* Keycloak's error answers are still the recorded ones the fast doubles replay (``_answers``).
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest

import lakesession
from lakesession.identity import (
    ClientCredentials,
    DeviceCode,
    DeviceFlowError,
    DevicePrompt,
    IdentityError,
    LoginRequiredError,
    from_issuer,
)
from lakesession.reference import ReferenceCatalog, start
from tests._keycloak import Keycloak, claims_of
from tests.factories import Policy
from tests.keycloak._answers import provoke, recorded
from tests.keycloak._form import approve

pytestmark = [pytest.mark.slow, pytest.mark.keycloak]

CLI = "lakesession-cli"


class Wire(httpx.HTTPTransport):
    """A real transport that keeps each request's form (what the client sent) and each answer's body."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, dict[str, list[str]], str]] = []
        self.answers: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(
            (request.url.path, parse_qs(request.read().decode()), request.headers.get("authorization", ""))
        )
        resp = super().handle_request(request)
        body = resp.read()
        resp.close()
        self.answers.append(body.decode(errors="replace"))
        return httpx.Response(resp.status_code, headers=resp.headers, content=body, extensions=resp.extensions)

    def forms(self, path_suffix: str, **match: str) -> list[dict[str, list[str]]]:
        return [
            form
            for path, form, _ in self.sent
            if path.endswith(path_suffix) and all(form.get(k) == [v] for k, v in match.items())
        ]

    def secrets(self) -> set[str]:
        """Every secret that crossed the wire (tokens, codes, verifiers, credentials): none may reach a message."""
        found = {v for _, form, auth in self.sent for k, vs in form.items() for v in vs if k != "grant_type"}
        found |= {auth.split(" ", 1)[1] for _, _, auth in self.sent if auth}
        for body in self.answers:
            found |= {part for part in body.replace('"', " ").split() if len(part) > 30}
        return {s for s in found if len(s) >= 16}


def form_approver(kc: Keycloak, user: str, pages: list[str]) -> Callable[[DevicePrompt], None]:
    """An ``on_prompt`` in which ``user`` signs in and approves on Keycloak's pages before the first poll.

    Before the client's first poll, not beside it: once (a loaded machine, the approval's three requests
    taking over 10 s) a poll that landed while the approval was being completed got Keycloak 26.7.3's
    HTTP 500 (``NullPointerException`` in ``DeviceGrantType.process``: "clientSession" is null), and the
    next poll "invalid_grant: Device code not valid" — Keycloak's bug, which the client meets with one
    line asking for a new login().
    """

    def on_prompt(prompt: DevicePrompt) -> None:
        assert prompt.verification_uri_complete, "Keycloak sends verification_uri_complete"
        pages.append(approve(prompt.verification_uri_complete, user, kc.passwords[user]))

    return on_prompt


def device_login(kc: Keycloak, user: str = "alice", **kw: Any) -> tuple[DeviceCode, Wire, list[str]]:
    wire, pages = Wire(), []
    on_prompt = form_approver(kc, user, pages)
    src = from_issuer(
        kc.issuer, client_id=CLI, flow="device", on_prompt=on_prompt, http_options={"transport": wire}, **kw
    )
    assert isinstance(src, DeviceCode)
    src.login()
    return src, wire, pages


@pytest.fixture(scope="module")
def cat(kc: Keycloak, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    """A reference catalog trusting the realm: principal = ``preferred_username``, audience ``lakesession``."""
    policy = (
        Policy()
        .user("alice", role="analysts")
        .service("service-account-etl", role="eng")
        .grant("eng", "CATALOG_MANAGE_CONTENT", "catalog")
        .grant("analysts", "NAMESPACE_LIST", "catalog")
    )
    handle = start(
        data_dir=tmp_path_factory.mktemp("kc-catalog"),
        bootstrap=policy.parse(),
        issuer_url=kc.issuer,
        audience="lakesession",
        principal_claim="preferred_username",
    )
    yield handle
    handle.stop()


def catalog(
    cat: ReferenceCatalog, token: str, method: str = "GET", path: str = "/namespaces", **kw: Any
) -> httpx.Response:
    """One catalog request with ``token`` (under the prefix its /v1/config names)."""
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=f"{cat.uri}/v1", headers=headers, timeout=30) as http:
        config = http.get("/config")
        if config.status_code != 200:
            return config
        prefix = config.json().get("overrides", {}).get("prefix")
        return http.request(method, f"/{prefix}{path}" if prefix else path, **kw)


@contextmanager
def client_attributes(kc: Keycloak, client_id: str, **attributes: str) -> Iterator[None]:
    """Set client attributes (e.g. ``access.token.lifespan``) through the admin API for a block."""
    found = kc.admin("GET", "/clients", params={"clientId": client_id}, timeout=30).json()
    (rep,) = found
    old = dict(rep.get("attributes") or {})
    rep["attributes"] = {**old, **attributes}
    assert kc.admin("PUT", f"/clients/{rep['id']}", json=rep, timeout=30).status_code == 204
    try:
        yield
    finally:
        rep["attributes"] = old
        assert kc.admin("PUT", f"/clients/{rep['id']}", json=rep, timeout=30).status_code == 204


def one_line(err: BaseException, *secrets: str) -> str:
    message = str(err)
    assert "\n" not in message and "Traceback" not in message, message
    assert err._render_traceback_() == [f"\x1b[31mlakesession: {message}\x1b[0m"]  # type: ignore[attr-defined]
    for secret in secrets:
        assert secret not in message
    return message


# -- the tests --------------------------------------------------------------------------------------------
def test_device_login_with_pkce_approved_on_keycloaks_own_pages(kc: Keycloak, cat: ReferenceCatalog) -> None:
    src, wire, pages = device_login(kc)
    assert pages == ["Device Login Successful"]  # Keycloak's page after the form was posted
    (authorization,) = wire.forms("/auth/device")
    assert authorization["code_challenge_method"] == ["S256"] and authorization["client_id"] == [CLI]
    polls = wire.forms("/token", grant_type="urn:ietf:params:oauth:grant-type:device_code")
    assert polls and all("code_verifier" in p for p in polls)
    verifier = polls[-1]["code_verifier"][0]
    digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    assert authorization["code_challenge"] == [digest]  # RFC 7636 §4.2, checked by Keycloak too

    token = src.token()
    claims = claims_of(token)
    assert claims["iss"] == kc.issuer and claims["preferred_username"] == "alice" and claims["azp"] == CLI
    assert "lakesession" in claims["aud"] and src.logged_in
    assert catalog(cat, token).status_code == 200  # the catalog trusts the realm and knows alice
    refused = catalog(cat, token, "POST", "/namespaces", json={"namespace": ["alice_made"]})
    assert refused.status_code == 403 and "Principal 'alice' is not authorized" in refused.text  # known, no grant
    assert catalog(cat, token[:-4] + "AAAA").status_code == 401  # a forged signature is not


def test_without_pkce_keycloak_refuses_and_the_user_reads_one_line(kc: Keycloak) -> None:
    """The answer the old client always got (it never sent PKCE); now only with pkce=False, and it names the fix."""
    src = from_issuer(kc.issuer, client_id=CLI, flow="device", pkce=False, on_prompt=lambda p: None)
    with pytest.raises(DeviceFlowError) as caught:
        src.login()  # type: ignore[attr-defined]
    message = one_line(caught.value)
    assert "invalid_request: Missing parameter: code_challenge_method" in message
    assert f"The client '{CLI}' requires PKCE: leave pkce on (DeviceCode(..., pkce=True)" in message


def test_client_credentials_of_the_etl_service_principal(kc: Keycloak, cat: ReferenceCatalog) -> None:
    src = from_issuer(kc.issuer, client_id="etl", client_secret=kc.client_secrets["etl"])
    assert isinstance(src, ClientCredentials)
    token = src.token()
    claims = claims_of(token)
    assert claims["preferred_username"] == "service-account-etl" and claims["azp"] == "etl"
    made = catalog(cat, token, "POST", "/namespaces", json={"namespace": ["sales"]})
    assert made.status_code == 200, made.text  # etl's grant, found through preferred_username

    wire = Wire()
    bad = ClientCredentials(
        kc.token_endpoint, "etl", "not-the-secret", issuer=kc.issuer, http_options={"transport": wire}
    )
    with pytest.raises(IdentityError) as caught:
        bad.token()
    message = one_line(caught.value, "not-the-secret")
    assert "unauthorized_client: Invalid client or Invalid client credentials" in message
    assert "Check the client id ('etl') and client secret" in message


def test_refresh_ahead_of_expiry(kc: Keycloak, cat: ReferenceCatalog) -> None:
    with client_attributes(kc, CLI, **{"access.token.lifespan": "12"}):
        src, wire, _ = device_login(kc, refresh_margin=4)
        first = src.token()
        assert claims_of(first)["exp"] - claims_of(first)["iat"] == 12  # the admin API's setting reached the token
        assert src.expires_at is not None
        time.sleep(max(0.0, src.expires_at - 4 + 0.5 - time.time()))  # inside the 4 s margin, before expiry
        assert time.time() < claims_of(first)["exp"] - 1
        second = src.token()
        assert src.token() == second  # the new one is served from now on
    refreshes = wire.forms("/token", grant_type="refresh_token")
    assert len(refreshes) == 1 and second != first
    assert claims_of(second)["preferred_username"] == "alice" and claims_of(second)["exp"] > claims_of(first)["exp"]
    assert catalog(cat, second).status_code == 200


def test_an_admin_logout_asks_the_user_to_log_in_again(kc: Keycloak) -> None:
    src, wire, _ = device_login(kc)
    assert src.token()
    r = kc.admin("POST", f"/users/{kc.user_id('alice')}/logout", timeout=30)
    assert r.status_code == 204
    src.invalidate()  # what the gateway does when the catalog answers 401
    with pytest.raises(LoginRequiredError) as caught:
        src.token()
    message = one_line(caught.value, *wire.secrets())
    assert "refresh token was rejected (invalid_grant: Session not active)" in message
    assert "run `%lakesession login` in a notebook" in message
    with pytest.raises(LoginRequiredError) as again:  # the dead refresh token is forgotten: no second request
        src.token()
    assert "lakesession login" in one_line(again.value) and len(wire.forms("/token", grant_type="refresh_token")) == 1


def test_keycloaks_answers_are_still_the_recorded_ones(kc: Keycloak) -> None:
    """The fast doubles replay tests/fixtures/recordings/keycloak-<v>.json: it must be what Keycloak says."""
    live, kept = provoke(kc), recorded()
    assert sorted(live) == sorted(kept)
    for name, answer in live.items():
        assert {k: answer[k] for k in ("status", "headers", "body")} == {
            k: kept[name][k] for k in ("status", "headers", "body")
        }, name


def test_a_session_whose_keycloak_login_ended_says_log_in_again_in_one_line(
    kc: Keycloak, cat: ReferenceCatalog
) -> None:
    """What a notebook user meets: ``lakesession.connect`` with a device login, Keycloak logs them out, and the
    next catalog call after the access token's lifetime is one line asking for a new login (not a traceback)."""
    pages: list[str] = []
    with client_attributes(kc, CLI, **{"access.token.lifespan": "12"}):
        session = lakesession.connect(
            uri=cat.uri, issuer=kc.issuer, client_id=CLI, on_prompt=form_approver(kc, "alice", pages)
        )
        try:
            assert pages == ["Device Login Successful"]
            assert session.catalog.list_namespaces() is not None  # works as alice
            assert kc.admin("POST", f"/users/{kc.user_id('alice')}/logout", timeout=30).status_code == 204
            expires_at = session.identity.expires_at
            assert expires_at is not None
            time.sleep(max(0.0, expires_at - time.time() + 0.2))  # the access token has expired: a refresh is due
            with pytest.raises(LoginRequiredError) as caught:
                session.table("sales.orders")
        finally:
            session.close()
    message = one_line(caught.value)
    assert "(invalid_grant: Session not active)" in message and "run `%lakesession login`" in message
