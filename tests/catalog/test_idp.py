"""The embedded OIDC issuer and token verification, over real HTTP on loopback.

One uvicorn server (background thread, ephemeral port) serves the issuer's
router at ``/oidc``; flows are driven with authlib's httpx OAuth2 client.
"""

from __future__ import annotations

import base64
import json
import logging
import secrets
import socket
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from authlib.integrations.base_client import OAuthError
from authlib.oauth2.rfc8414 import AuthorizationServerMetadata
from fastapi import FastAPI
from joserfc import jwt
from joserfc.jwk import ECKey, KeySet, OctKey, RSAKey

from lakesession.identity._oauth import OAuth2Client  # authlib's httpx client, imported without its httpx2 nag
from lakesession.reference import store
from lakesession.reference.directory import Directory
from lakesession.reference.errors import BadRequest, NotAuthorized
from lakesession.reference.idp import APPROVAL_ENDPOINT_KEY, EmbeddedIssuer, RemoteVerifier
from lakesession.reference.settings import ServerSettings
from tests._stub import serve_asgi

DEVICE = "urn:ietf:params:oauth:grant-type:device_code"
EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS = "urn:ietf:params:oauth:token-type:access_token"
CLI = "lakesession-cli"
SECRETS = {name: secrets.token_urlsafe(24) for name in ("alice", "etl", "hub")}


# -- serving -------------------------------------------------------------
@contextmanager
def serve(app: Any, sock: socket.socket) -> Iterator[None]:
    """Run ``app`` on an already-bound socket in a background thread until the block ends (access log on)."""
    with serve_asgi(app, sock, access_log=True):
        yield


def bound_socket() -> tuple[socket.socket, str]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock, f"http://127.0.0.1:{sock.getsockname()[1]}"


def app_for(issuer: EmbeddedIssuer) -> FastAPI:
    app = FastAPI()
    app.include_router(issuer.router, prefix="/oidc")
    return app


@dataclass
class Env:
    issuer: EmbeddedIssuer
    settings: ServerSettings
    directory: Directory
    key_path: Path
    url: str  # the issuer URL

    @property
    def token_url(self) -> str:
        return self.url + "/token"

    def client(self, client_id: str, secret: str | None = None, method: str = "client_secret_basic") -> OAuth2Client:
        return OAuth2Client(client_id, secret, token_endpoint_auth_method=method if secret else "none", timeout=10)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("idp")
    sock, base = bound_socket()
    settings = ServerSettings(
        warehouse=f"file://{tmp}/wh",
        db_url=store.sqlite_url(tmp / "cat.db"),
        base_url=base,
        device_code_ttl=60,
        device_poll_interval=5,
        access_token_ttl=300,
    )
    engine = store.make_engine(settings.db_url)
    directory = Directory(engine)
    directory.create_principal("alice", "user", "alice-client", SECRETS["alice"])
    directory.create_principal("etl", "service", "etl-client", SECRETS["etl"])
    directory.create_principal("hub", "service", "hub-client", SECRETS["hub"])
    directory.create_role("exchangers", ["hub", "etl"])  # they act for other principals through token exchange
    directory.grant("exchangers", "TOKEN_EXCHANGE", "catalog")
    key_path = tmp / "keys" / "issuer.jwk"
    issuer = EmbeddedIssuer(settings, directory, engine, key_path=key_path)
    with serve(app_for(issuer), sock):
        yield Env(issuer, settings, directory, key_path, settings.embedded_issuer_url)


def header_of(token: str) -> dict[str, Any]:
    seg = token.split(".")[0]
    return json.loads(base64.urlsafe_b64decode(seg + "=" * (-len(seg) % 4)))


def forge(key: Any, claims: dict[str, Any], **header: Any) -> str:
    hdr = {"alg": "ES256", "typ": "at+jwt", "kid": key.kid, **header}
    return jwt.encode(hdr, claims, key)


def good_claims(env: Env, **over: Any) -> dict[str, Any]:
    now = int(time.time())
    return {
        "iss": env.url,
        "sub": "alice",
        "aud": env.settings.audience,
        "iat": now,
        "exp": now + 300,
        "jti": secrets.token_hex(8),
        "client_id": CLI,
        "scope": "catalog",
        **over,
    }


def start_device(env: Env, client_id: str = CLI, scope: str = "catalog") -> dict[str, Any]:
    resp = httpx.post(env.url + "/device_authorization", data={"client_id": client_id, "scope": scope})
    assert resp.status_code == 200, resp.text
    return resp.json()


def poll(client: OAuth2Client, env: Env, device_code: str) -> dict[str, Any]:
    return dict(client.fetch_token(env.token_url, grant_type=DEVICE, device_code=device_code))


def poll_error(client: OAuth2Client, env: Env, device_code: str) -> str:
    with pytest.raises(OAuthError) as exc:
        poll(client, env, device_code)
    return exc.value.error


def submit(env: Env, user_code: str, username: str, password: str, action: str = "approve") -> httpx.Response:
    return httpx.post(
        env.url + "/device", data={"user_code": user_code, "username": username, "password": password, "action": action}
    )


def device_tokens(env: Env) -> dict[str, Any]:
    """A full device flow for alice, approved through the HTML form."""
    start = start_device(env)
    assert submit(env, start["user_code"], "alice-client", SECRETS["alice"]).status_code == 200
    with env.client(CLI) as cli:
        return poll(cli, env, start["device_code"])


# -- discovery and keys ----------------------------------------------------
def test_discovery_and_jwks_are_consistent(env: Env) -> None:
    doc = httpx.get(env.url + "/.well-known/openid-configuration").json()
    AuthorizationServerMetadata(doc).validate()
    assert doc["issuer"] == env.settings.embedded_issuer_url
    assert doc["token_endpoint"] == env.token_url
    assert doc["device_authorization_endpoint"] == env.url + "/device_authorization"
    assert doc[APPROVAL_ENDPOINT_KEY] == env.url + "/device"
    assert {"client_credentials", "refresh_token", DEVICE, EXCHANGE} <= set(doc["grant_types_supported"])
    assert {"client_secret_basic", "client_secret_post"} <= set(doc["token_endpoint_auth_methods_supported"])
    jwks = httpx.get(doc["jwks_uri"]).json()
    (jwk,) = jwks["keys"]
    assert "d" not in jwk and jwk["kid"] and jwk["alg"] == "ES256" and jwk["use"] == "sig"
    token = env.issuer.issue_token("alice")["access_token"]
    assert header_of(token) == {"alg": "ES256", "typ": "at+jwt", "kid": jwk["kid"]}
    claims = jwt.decode(token, KeySet.import_key_set(jwks), algorithms=["ES256"]).claims
    assert claims["iss"] == env.url and claims["aud"] == env.settings.audience


def test_key_is_persisted_privately_and_survives_restart(env: Env) -> None:
    assert stat.S_IMODE(env.key_path.stat().st_mode) == 0o600
    token = env.issuer.issue_token("alice")["access_token"]
    again = EmbeddedIssuer(env.settings, env.directory, env.issuer.engine, key_path=env.key_path)
    assert again.kid == env.issuer.kid
    assert again.verify(token)["sub"] == "alice"


# -- client credentials ----------------------------------------------------
@pytest.mark.parametrize("method", ["client_secret_basic", "client_secret_post"])
def test_client_credentials(env: Env, method: str) -> None:
    with env.client("etl-client", SECRETS["etl"], method) as c:
        tok = dict(c.fetch_token(env.token_url, grant_type="client_credentials", scope="PRINCIPAL_ROLE:ALL"))
    assert tok["token_type"] == "Bearer" and tok["expires_in"] == 300 and "refresh_token" not in tok
    claims = env.issuer.verify(tok["access_token"])
    assert claims["sub"] == "etl" and claims["client_id"] == "etl-client" and claims["scope"] == "PRINCIPAL_ROLE:ALL"
    assert claims["exp"] - claims["iat"] == 300 and claims["jti"]


def test_client_credentials_default_scope_and_errors(env: Env) -> None:
    with env.client("etl-client", SECRETS["etl"], "client_secret_post") as c:
        assert (
            env.issuer.verify(c.fetch_token(env.token_url, grant_type="client_credentials")["access_token"])["scope"]
            == "catalog"
        )
    bad = httpx.post(env.token_url, data={"grant_type": "client_credentials"}, auth=("etl-client", "wrong"))
    assert bad.status_code == 401 and bad.json()["error"] == "invalid_client"
    assert bad.headers["www-authenticate"].startswith("Basic")
    assert bad.headers["cache-control"] == "no-store"
    public = httpx.post(env.token_url, data={"grant_type": "client_credentials", "client_id": CLI})
    assert public.status_code == 401 and public.json()["error"] == "invalid_client"
    unknown = httpx.post(env.token_url, data={"grant_type": "password"}, auth=("etl-client", SECRETS["etl"]))
    assert unknown.status_code == 400 and unknown.json()["error"] == "unsupported_grant_type"
    as_json = httpx.post(env.token_url, json={"grant_type": "client_credentials"}, auth=("etl-client", SECRETS["etl"]))
    assert as_json.status_code == 400 and as_json.json()["error"] == "invalid_request"
    twice = httpx.post(
        env.token_url,
        content="grant_type=client_credentials&scope=a&scope=b",
        headers={"content-type": "application/x-www-form-urlencoded"},
        auth=("etl-client", SECRETS["etl"]),
    )
    assert twice.status_code == 400 and twice.json()["error"] == "invalid_request"


# -- device flow -------------------------------------------------------------
def test_device_flow_end_to_end(env: Env) -> None:
    start = start_device(env)
    user_code = start["user_code"]
    assert (
        len(user_code) == 9 and user_code[4] == "-" and set(user_code.replace("-", "")) <= set("BCDFGHJKLMNPQRSTVWXZ")
    )
    assert start["verification_uri"] == env.url + "/device"
    assert start["verification_uri_complete"] == f"{env.url}/device?user_code={user_code}"
    assert start["expires_in"] == 60 and start["interval"] == 5
    page = httpx.get(start["verification_uri_complete"])
    assert page.status_code == 200 and user_code in page.text and CLI in page.text
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    with env.client(CLI) as cli:
        assert poll_error(cli, env, start["device_code"]) == "authorization_pending"
        assert poll_error(cli, env, start["device_code"]) == "slow_down"  # polled faster than the interval
        wrong = submit(env, user_code, "alice-client", "not-the-secret")
        assert wrong.status_code == 401 and "Invalid username or password" in wrong.text
        ok = submit(env, user_code.lower().replace("-", ""), "alice-client", SECRETS["alice"])
        assert ok.status_code == 200 and "Approved" in ok.text and "alice" in ok.text
        tok = poll(cli, env, start["device_code"])
        assert poll_error(cli, env, start["device_code"]) in ("invalid_request", "invalid_grant")  # single use
    assert tok["token_type"] == "Bearer" and tok["refresh_token"] and tok["expires_in"] == 300
    claims = env.issuer.verify(tok["access_token"])
    assert claims["sub"] == "alice" and claims["client_id"] == CLI and claims["scope"] == "catalog"
    with pytest.raises(BadRequest):
        env.issuer.approve_device(user_code, "alice")  # already used


def test_device_flow_denied(env: Env) -> None:
    start = start_device(env)
    denied = submit(env, start["user_code"], "alice-client", SECRETS["alice"], action="deny")
    assert denied.status_code == 200 and "denied" in denied.text
    other = start_device(env)
    env.issuer.deny_device(other["user_code"])
    with env.client(CLI) as cli:
        assert poll_error(cli, env, start["device_code"]) == "access_denied"
        assert poll_error(cli, env, other["device_code"]) == "access_denied"


def test_device_code_expires(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(env.settings, "device_code_ttl", 1)
    start = start_device(env)
    assert start["expires_in"] == 1
    time.sleep(1.1)
    with env.client(CLI) as cli:
        assert poll_error(cli, env, start["device_code"]) == "expired_token"
    with pytest.raises(BadRequest):
        env.issuer.approve_device(start["user_code"], "alice")
    late = submit(env, start["user_code"], "alice-client", SECRETS["alice"])
    assert late.status_code == 400 and "Unknown or expired" in late.text


def test_device_flow_client_binding_and_api_approval(env: Env) -> None:
    with pytest.raises(BadRequest):
        env.issuer.approve_device("BCDF-GHJK", "alice")
    confidential = httpx.post(env.url + "/device_authorization", data={"client_id": "alice-client"})
    assert confidential.json()["error"] == "invalid_client"  # a confidential client must authenticate
    start = start_device(env, client_id="other-cli")
    with pytest.raises(BadRequest):
        env.issuer.approve_device(start["user_code"], "nobody")
    env.issuer.approve_device(start["user_code"], "etl")
    with env.client(CLI) as cli:  # the device code belongs to another client
        assert poll_error(cli, env, start["device_code"]) == "unauthorized_client"
    with env.client("other-cli") as cli:
        assert env.issuer.verify(poll(cli, env, start["device_code"])["access_token"])["sub"] == "etl"


def test_device_page_escapes_input(env: Env) -> None:
    page = httpx.get(env.url + "/device", params={"user_code": "<script>x</script>"})
    assert "<script>" not in page.text
    resp = httpx.post(env.url + "/device", data={"user_code": "<b>\"'", "username": "<i>", "password": "x"})
    assert resp.status_code == 401 and "<b>" not in resp.text and "<i>" not in resp.text


# -- refresh -----------------------------------------------------------------
def test_refresh_rotates_and_detects_reuse(env: Env) -> None:
    first = device_tokens(env)
    with env.client(CLI) as cli:
        second = dict(cli.refresh_token(env.token_url, refresh_token=first["refresh_token"]))
        assert second["refresh_token"] != first["refresh_token"]
        assert env.issuer.verify(second["access_token"])["sub"] == "alice"
        third = dict(cli.refresh_token(env.token_url, refresh_token=second["refresh_token"], scope="catalog"))
        with pytest.raises(OAuthError) as reuse:
            cli.refresh_token(env.token_url, refresh_token=first["refresh_token"])
        assert reuse.value.error == "invalid_grant"
        with pytest.raises(OAuthError) as revoked:  # reuse revoked the whole family
            cli.refresh_token(env.token_url, refresh_token=third["refresh_token"])
        assert revoked.value.error == "invalid_grant"


def test_refresh_is_bound_to_client_and_scope(env: Env) -> None:
    tok = env.issuer.issue_token("alice", client_id="alice-client", with_refresh=True)
    with env.client(CLI) as cli, pytest.raises(OAuthError) as other:
        cli.refresh_token(env.token_url, refresh_token=tok["refresh_token"])
    assert other.value.error == "invalid_grant"  # issued to another client
    with env.client("alice-client") as no_secret, pytest.raises(OAuthError) as public:
        no_secret.refresh_token(env.token_url, refresh_token=tok["refresh_token"])
    assert public.value.error == "invalid_client"  # alice-client is confidential: it must authenticate
    with env.client("etl-client", SECRETS["etl"]) as etl, pytest.raises(OAuthError) as stolen:
        etl.refresh_token(env.token_url, refresh_token=tok["refresh_token"])
    assert stolen.value.error == "invalid_grant"
    with env.client("alice-client", SECRETS["alice"]) as alice:
        with pytest.raises(OAuthError) as wider:
            alice.refresh_token(env.token_url, refresh_token=tok["refresh_token"], scope="catalog admin")
        assert wider.value.error == "invalid_scope"
        new = dict(alice.refresh_token(env.token_url, refresh_token=tok["refresh_token"]))
    assert env.issuer.verify(new["access_token"])["client_id"] == "alice-client"


# -- token exchange ------------------------------------------------------------
def exchange(env: Env, who: str, subject_token: str, **extra: str) -> dict[str, Any]:
    with env.client(f"{who}-client", SECRETS[who]) as c:
        return dict(
            c.fetch_token(
                env.token_url, grant_type=EXCHANGE, subject_token=subject_token, subject_token_type=ACCESS, **extra
            )
        )


def test_token_exchange_adds_actor(env: Env) -> None:
    alice = env.issuer.issue_token("alice", scope="catalog extra")["access_token"]
    tok = exchange(env, "hub", alice, audience=env.settings.audience, scope="catalog")
    assert tok["issued_token_type"] == ACCESS and tok["token_type"] == "Bearer" and "refresh_token" not in tok
    claims = env.issuer.verify(tok["access_token"])
    assert claims["sub"] == "alice" and claims["act"] == {"sub": "hub"}
    assert claims["client_id"] == "hub-client" and claims["scope"] == "catalog"
    nested = env.issuer.verify(exchange(env, "etl", tok["access_token"])["access_token"])
    assert nested["sub"] == "alice" and nested["act"] == {"sub": "etl", "act": {"sub": "hub"}}


def test_token_exchange_rejections(env: Env) -> None:
    alice = env.issuer.issue_token("alice")["access_token"]
    cases = [
        ({"subject_token": alice[:-4] + ("AAAA" if not alice.endswith("AAAA") else "BBBB")}, "invalid_grant"),
        ({"subject_token": env.issuer.issue_token("alice", ttl=-120)["access_token"]}, "invalid_grant"),
        ({"subject_token": alice, "audience": "another-service"}, "invalid_target"),
        ({"subject_token": alice, "scope": "catalog admin"}, "invalid_scope"),
        ({"subject_token": alice, "subject_token_type": "urn:ietf:params:oauth:token-type:saml2"}, "invalid_request"),
        ({"subject_token": alice, "actor_token": alice, "actor_token_type": ACCESS}, "invalid_request"),
    ]
    for params, error in cases:
        data = {"grant_type": EXCHANGE, "subject_token_type": ACCESS, **params}
        resp = httpx.post(env.token_url, data=data, auth=("hub-client", SECRETS["hub"]))
        assert (resp.status_code, resp.json()["error"]) == (400, error), params.keys()
    anonymous = httpx.post(
        env.token_url,
        data={"grant_type": EXCHANGE, "subject_token": alice, "subject_token_type": ACCESS, "client_id": CLI},
    )
    assert anonymous.status_code == 401 and anonymous.json()["error"] == "invalid_client"


# -- verification ----------------------------------------------------------------
def rejection(verifier: Any, token: str) -> str:
    with pytest.raises(NotAuthorized) as exc:
        verifier.verify(token)
    assert token not in exc.value.message and exc.value.status == 401
    return exc.value.message


def test_verify_accepts_good_and_rejects_bad_tokens(env: Env) -> None:
    iss = env.issuer
    good = iss.issue_token("alice")["access_token"]
    assert iss.verify(good)["sub"] == "alice"
    assert iss.verify(iss.issue_token("alice", ttl=-10)["access_token"])  # within the 30 s leeway
    assert iss.verify(forge(iss.key, good_claims(env, aud=["x", env.settings.audience])))
    assert "expired" in rejection(iss, iss.issue_token("alice", ttl=-60)["access_token"])
    assert "audience" in rejection(iss, forge(iss.key, good_claims(env, aud="another-service")))
    assert "issuer" in rejection(iss, forge(iss.key, good_claims(env, iss="http://evil.example/oidc")))
    assert "not yet valid" in rejection(iss, forge(iss.key, good_claims(env, nbf=int(time.time()) + 120)))
    assert "type" in rejection(iss, forge(iss.key, good_claims(env), typ="JWT"))
    head, payload, sig = good.split(".")
    body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    evil = base64.urlsafe_b64encode(json.dumps({**body, "sub": "admin"}).encode()).rstrip(b"=").decode()
    assert "signature" in rejection(iss, f"{head}.{evil}.{sig}")
    other_key = ECKey.generate_key("P-256", {"alg": "ES256"}, auto_kid=True)
    assert "unknown key" in rejection(iss, forge(other_key, good_claims(env)))
    assert "signature" in rejection(iss, forge(other_key, good_claims(env), kid=iss.kid))
    other = EmbeddedIssuer(env.settings, env.directory, iss.engine)  # same URL, its own in-memory key
    assert "unknown key" in rejection(iss, other.issue_token("alice")["access_token"])
    rsa = RSAKey.generate_key(2048, auto_kid=True)
    assert "algorithm" in rejection(
        iss, jwt.encode({"alg": "RS256", "typ": "at+jwt", "kid": iss.kid}, good_claims(env), rsa)
    )
    none_head = base64.urlsafe_b64encode(b'{"alg":"none","typ":"at+jwt"}').rstrip(b"=").decode()
    assert "algorithm" in rejection(iss, f"{none_head}.{payload}.")
    assert "Malformed" in rejection(iss, "not-a-token")


# -- remote verification -------------------------------------------------------------
def test_remote_verifier_against_served_issuer(env: Env) -> None:
    rv = RemoteVerifier(env.url, env.settings.audience)
    tok = env.issuer.issue_token("alice")["access_token"]
    assert rv.verify(tok)["sub"] == "alice"
    assert rv.verify(forge(env.issuer.key, good_claims(env), typ="JWT"))["sub"] == "alice"
    assert rv.verify(env.issuer.issue_token("etl")["access_token"])["sub"] == "etl"
    assert rv.fetch_count == 1  # keys cached
    assert "audience" in rejection(RemoteVerifier(env.url, "another-service"), tok)
    assert "expired" in rejection(rv, env.issuer.issue_token("alice", ttl=-60)["access_token"])
    hmac_key = OctKey.import_key(json.dumps(env.issuer.jwks()["keys"][0]).encode())  # key-confusion attempt
    assert "algorithm" in rejection(rv, jwt.encode({"alg": "HS256", "kid": env.issuer.kid}, good_claims(env), hmac_key))
    forged = forge(ECKey.generate_key("P-256", auto_kid=True), good_claims(env))
    for _ in range(5):  # unknown kids: refetch is rate-limited (the last fetch was just now)
        assert "unknown key" in rejection(rv, forged)
    assert rv.fetch_count == 1


def test_remote_verifier_refetches_on_key_rotation(env: Env) -> None:
    """Two issuers with different keys take turns serving the same URL (a restart with a new key)."""
    sock, base = bound_socket()
    settings = ServerSettings(warehouse="file:///unused", db_url=env.settings.db_url, base_url=base)
    before = EmbeddedIssuer(settings, env.directory, env.issuer.engine)
    after = EmbeddedIssuer(settings, env.directory, env.issuer.engine)
    apps = {"current": app_for(before)}

    async def switch(scope: Any, receive: Any, send: Any) -> None:
        await apps["current"](scope, receive, send)

    with serve(switch, sock):
        rv = RemoteVerifier(settings.embedded_issuer_url, settings.audience, refetch_interval=60)
        assert rv.verify(before.issue_token("alice")["access_token"])["sub"] == "alice"
        apps["current"] = app_for(after)
        rotated = after.issue_token("alice")["access_token"]
        assert "unknown key" in rejection(rv, rotated)  # rate-limited: no refetch yet
        assert rv.fetch_count == 1
        rv.refetch_interval = 0
        assert rv.verify(rotated)["sub"] == "alice"
        assert rv.fetch_count == 2
        assert "unknown key" in rejection(rv, before.issue_token("alice")["access_token"])  # old key retired


# -- no secrets in logs ---------------------------------------------------------------
def test_no_secret_reaches_the_logs(
    env: Env, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.DEBUG)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "lakesession", "authlib", "httpx", "httpcore"):
        # other servers in the session may have configured these (uvicorn's access log does not propagate)
        caplog.set_level(logging.DEBUG, logger=name)
        monkeypatch.setattr(logging.getLogger(name), "propagate", True)
        monkeypatch.setattr(logging.getLogger(name), "disabled", False)
    seen: list[str] = list(SECRETS.values())
    with env.client("etl-client", SECRETS["etl"]) as c:
        seen.append(c.fetch_token(env.token_url, grant_type="client_credentials")["access_token"])
    httpx.post(
        env.token_url,
        data={"grant_type": "client_credentials", "client_id": "etl-client", "client_secret": SECRETS["etl"] + "x"},
    )
    start = start_device(env)
    seen.append(start["device_code"])
    with env.client(CLI) as cli:
        poll_error(cli, env, start["device_code"])
        submit(env, start["user_code"], "alice-client", SECRETS["alice"] + "x")
        submit(env, start["user_code"], "alice-client", SECRETS["alice"])
        tok = poll(cli, env, start["device_code"])
        seen += [tok["access_token"], tok["refresh_token"]]
        new = dict(cli.refresh_token(env.token_url, refresh_token=tok["refresh_token"]))
        seen += [new["access_token"], new["refresh_token"]]
        with pytest.raises(OAuthError):
            cli.refresh_token(env.token_url, refresh_token=tok["refresh_token"])  # reuse: family revoked, logged
    denied = start_device(env)
    seen.append(denied["device_code"])
    env.issuer.deny_device(denied["user_code"])
    with env.client(CLI) as cli:
        poll_error(cli, env, denied["device_code"])
    live = env.issuer.issue_token("alice")["access_token"]  # new's session was revoked by the reuse above
    seen.append(live)
    exchanged = exchange(env, "hub", live)["access_token"]
    seen.append(exchanged)
    for bad in (exchanged[:-3] + "abc", exchanged + "x"):
        with pytest.raises(NotAuthorized):
            env.issuer.verify(bad)
    rv = RemoteVerifier(env.url, env.settings.audience)
    rv.verify(exchanged)
    with pytest.raises(NotAuthorized):
        rv.verify(forge(ECKey.generate_key("P-256", auto_kid=True), good_claims(env)))
    time.sleep(0.2)  # let the server thread flush its access log records
    text = "\n".join(f"{r.name} {r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    assert "POST /oidc/token" in text and "device authorization approved" in text  # logging was captured
    signatures = [s.split(".")[2] for s in seen if s.count(".") == 2]
    leaked = [s[:6] + "…" for s in seen + signatures if s in text]
    assert not leaked, f"secrets found in logs: {leaked}"


# -- structure ------------------------------------------------------------------------------------
def test_idp_modules_import_one_way() -> None:
    """No import cycle inside the identity package (``TYPE_CHECKING`` imports count too)."""
    import ast

    import lakesession.reference.idp as pkg

    root = Path(pkg.__file__).parent
    graph: dict[str, set[str]] = {}
    for path in root.glob("*.py"):
        deps = graph.setdefault(path.stem, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    deps.add(node.module.split(".")[0])
                else:
                    deps.update(a.name for a in node.names)
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(mod: str, path: list[str]) -> None:
        if state.get(mod) == 1:
            raise AssertionError("import cycle: " + " -> ".join([*path, mod]))
        if state.get(mod) == 2 or mod not in graph:
            return
        state[mod] = 1
        for dep in sorted(graph[mod]):
            visit(dep, [*path, mod])
        state[mod] = 2

    for mod in sorted(graph):
        visit(mod, [])
    assert "_issuer" not in graph["_grants"] and "_core" in graph["_grants"]
