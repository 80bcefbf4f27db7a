"""The client identity layer against the REAL embedded issuer of a reference catalog (loopback HTTP).

Every flow talks to ``lakesession.reference``'s issuer; only the RFC 8628 error
paths that the issuer cannot be made to produce on demand (``slow_down``,
``expired_token``) use a mock transport. JupyterHub is a tiny FastAPI app that
answers like the hub's REST API.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import httpx
import pytest
from fastapi import FastAPI, Header, HTTPException

from lakesession import identity
from lakesession.identity import (
    ClientCredentials,
    DeviceCode,
    DeviceFlowError,
    DevicePrompt,
    IdentityError,
    JupyterHubToken,
    LakesessionError,
    LoginRequiredError,
    StaticToken,
    TokenCache,
    TokenExchange,
    TokenRefreshError,
    TokenSource,
    discover,
    from_issuer,
)
from lakesession.reference import ReferenceCatalog, start
from lakesession.reference import bootstrap as bootstrap_mod
from tests._stub import serve_asgi

CLI = "lakesession-cli"
ETL_SECRET = "etl-identity-secret-0123456789"
EXCHANGER_SECRET = "exchanger-identity-secret-0123456789"
HUB_API_TOKEN = "hub-api-token-0123456789abcdef"
BOOTSTRAP = f"""
principals:
  - {{name: alice, type: user}}
  - {{name: bob, type: user}}
  - {{name: carol, type: user}}
  - {{name: etl, type: service, client_id: etl, client_secret: {ETL_SECRET}}}
  - {{name: exchanger, type: service, client_id: exchanger, client_secret: {EXCHANGER_SECRET}}}
roles:
  - {{name: exchangers, members: [exchanger]}}
grants:
  - {{role: exchangers, privilege: TOKEN_EXCHANGE, on: catalog}}
"""
FAST = {"device_poll_interval": 1, "bootstrap": bootstrap_mod.parse(BOOTSTRAP)}


# -- helpers -------------------------------------------------------------------------------------
class Recorder(httpx.HTTPTransport):
    """A real transport that records each request (method, path, form body) and response body."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str, bytes, dict[str, str]]] = []
        self.responses: list[bytes] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.requests.append((request.method, request.url.path, request.read(), dict(request.headers)))
        resp = super().handle_request(request)
        body = resp.read()
        resp.close()
        with self.lock:
            self.responses.append(body)
        return httpx.Response(resp.status_code, headers=resp.headers, content=body, extensions=resp.extensions)

    def posts(self, path_suffix: str) -> int:
        with self.lock:
            return sum(1 for m, p, _, _ in self.requests if m == "POST" and p.endswith(path_suffix))

    def secrets(self) -> set[str]:
        """Every secret that crossed the wire: tokens, refresh tokens, device codes, client secrets."""
        found: set[str] = set()
        with self.lock:
            for _, _, body, headers in self.requests:
                for k, v in parse_qsl(body.decode(), keep_blank_values=True):
                    if k in ("client_secret", "refresh_token", "device_code", "subject_token") and v:
                        found.add(v)
                auth = headers.get("authorization", "")
                if auth.lower().startswith("basic "):
                    found.add(base64.b64decode(auth[6:]).decode().split(":", 1)[1])
                elif auth:
                    found.add(auth.split(" ", 1)[1])
            for body in self.responses:
                try:
                    doc = json.loads(body)
                except ValueError:
                    continue
                if isinstance(doc, dict):
                    found |= {str(doc[k]) for k in ("access_token", "refresh_token", "device_code") if doc.get(k)}
        return found


def approver(
    cat: ReferenceCatalog, principal: str, prompts: list[DevicePrompt] | None = None, deny: bool = False
) -> Callable[[DevicePrompt], None]:
    """An ``on_prompt`` that approves (or denies) the user code from another thread, like a user would."""
    issuer = cat.app.state.issuer

    def on_prompt(prompt: DevicePrompt) -> None:
        if prompts is not None:
            prompts.append(prompt)
        act = (
            (lambda: issuer.deny_device(prompt.user_code))
            if deny
            else (lambda: cat.admin.approve_device(prompt.user_code, principal))
        )
        threading.Timer(0.2, act).start()

    return on_prompt


def device(cat: ReferenceCatalog, principal: str, **kw: Any) -> DeviceCode:
    """A logged-in ``DeviceCode`` source for ``principal``."""
    src = from_issuer(cat.issuer_uri, client_id=CLI, flow="device", on_prompt=approver(cat, principal), **kw)
    assert isinstance(src, DeviceCode)
    src.login()
    return src


def verify(cat: ReferenceCatalog, token: str) -> dict[str, Any]:
    return cat.app.state.issuer.verify(token)


@contextmanager
def serve(app: Any) -> Iterator[str]:
    """``app`` on a fresh loopback port until the block ends; its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    with sock, serve_asgi(app, sock) as base:
        yield base


def wait_until_due(src: TokenSource, lifetime: float, margin: float = 1.0) -> None:
    """Sleep until ``src``'s current token is inside its refresh margin (but not expired)."""
    assert src.expires_at is not None
    due = src.expires_at - margin + 0.15
    time.sleep(max(0.0, due - time.time()))


@pytest.fixture(scope="module")
def cat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    handle = start(data_dir=tmp_path_factory.mktemp("identity"), access_token_ttl=300, **FAST)
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def short(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    """A catalog whose access tokens live 3 s (refresh margin: 1 s)."""
    handle = start(data_dir=tmp_path_factory.mktemp("identity-short"), access_token_ttl=3, **FAST)
    yield handle
    handle.stop()


# -- API shape ----------------------------------------------------------------------------------
def test_public_api_and_layering() -> None:
    assert identity.__all__ == sorted(identity.__all__)
    for name in (
        "TokenSource",
        "StaticToken",
        "ClientCredentials",
        "DeviceCode",
        "TokenExchange",
        "JupyterHubToken",
        "discover",
        "from_issuer",
        "DevicePrompt",
        "TokenCache",
    ):
        assert name in identity.__all__
    assert issubclass(LoginRequiredError, IdentityError) and issubclass(TokenRefreshError, IdentityError)
    assert issubclass(DeviceFlowError, IdentityError) and issubclass(IdentityError, LakesessionError)
    code = (
        "import sys, lakesession.identity; "
        "bad = [m for m in sys.modules if m.startswith('lakesession.reference')]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])
    pkg = Path(identity.__file__).parent
    for f in pkg.glob("*.py"):
        text = f.read_text()
        assert "lakesession.reference" not in text and "from ..reference" not in text, f
        assert len(text.splitlines()) < 400, f


def test_discovery_is_cached_and_checked(cat: ReferenceCatalog) -> None:
    rec = Recorder()
    with httpx.Client(transport=rec) as http:
        issuer = cat.issuer_uri + "/"  # a trailing slash is the same issuer
        meta = discover(issuer, http)
        assert meta["token_endpoint"] == f"{cat.issuer_uri}/token"
        assert meta["device_authorization_endpoint"] == f"{cat.issuer_uri}/device_authorization"
        discover(cat.issuer_uri, http)
        assert len(rec.requests) <= 1  # the module-level cache may already hold it
        with pytest.raises(IdentityError, match="No OpenID configuration.*issuer URL"):
            discover(cat.uri + "/not-an-issuer", http)
    with pytest.raises(ValueError, match="flow must be"):
        from_issuer(cat.issuer_uri, client_id="x", flow="password")  # type: ignore[arg-type]
    with pytest.raises(IdentityError, match="needs client_secret"):
        from_issuer(cat.issuer_uri, client_id="etl", flow="client_credentials")


# -- flows --------------------------------------------------------------------------------------
def test_static_token(cat: ReferenceCatalog) -> None:
    src = StaticToken(cat.admin.token_for("alice", ttl=300))
    assert src.principal == "alice" and src.issuer == cat.issuer_uri
    assert src.expires_at is not None and 250 < src.expires_at - time.time() <= 301
    assert src.token() == src.token()
    assert src.describe()["kind"] == "static"
    expired = StaticToken(cat.admin.token_for("alice", ttl=-10))
    with pytest.raises(LoginRequiredError, match="expired.*fresh token"):
        expired.token()
    opaque = StaticToken("not-a-jwt")
    assert opaque.principal is None and opaque.expires_at is None and opaque.token() == "not-a-jwt"
    opaque.invalidate()
    with pytest.raises(LoginRequiredError, match="rejected"):
        opaque.token()


def test_client_credentials(cat: ReferenceCatalog) -> None:
    rec = Recorder()
    src = from_issuer(
        cat.issuer_uri, client_id="etl", client_secret=ETL_SECRET, scope="catalog", http_options={"transport": rec}
    )
    assert isinstance(src, ClientCredentials)
    token = src.token()
    assert verify(cat, token)["sub"] == "etl" and src.principal == "etl"
    assert src.token() == token and rec.posts("/token") == 1  # cached until due
    resp = httpx.get(
        f"{cat.uri}/v1/config", params={"warehouse": cat.warehouse}, headers={"Authorization": f"Bearer {token}"}
    )
    assert resp.status_code == 200
    src.invalidate()  # e.g. after a 401: the next call fetches a new token
    assert src.token() != token and rec.posts("/token") == 2
    d = src.describe()
    assert d["kind"] == "client_credentials" and d["principal"] == "etl" and d["issuer"] == cat.issuer_uri
    wrong = ClientCredentials(f"{cat.issuer_uri}/token", "etl", "wrong-secret")
    with pytest.raises(IdentityError, match="invalid_client.*client id") as err:
        wrong.token()
    assert not isinstance(err.value, (LoginRequiredError, TokenRefreshError))


def test_device_flow_end_to_end(cat: ReferenceCatalog) -> None:
    prompts: list[DevicePrompt] = []
    rec = Recorder()
    src = from_issuer(
        cat.issuer_uri, client_id=CLI, on_prompt=approver(cat, "alice", prompts), http_options={"transport": rec}
    )
    assert isinstance(src, DeviceCode) and not src.logged_in
    with pytest.raises(LoginRequiredError, match="lakesession login"):
        src.token()
    src.login()
    (prompt,) = prompts
    assert prompt.verification_uri == f"{cat.issuer_uri}/device"
    assert prompt.user_code in (prompt.verification_uri_complete or "") and prompt.expires_in > 0
    assert src.logged_in and src.principal == "alice"
    first = src.token()
    assert verify(cat, first)["sub"] == "alice"
    refresh_before = src._current.refresh_token  # type: ignore[union-attr]
    src.invalidate()
    second = src.token()
    assert second != first and verify(cat, second)["sub"] == "alice"
    assert src._current.refresh_token not in (None, refresh_before)  # type: ignore[union-attr]  # rotated
    src.invalidate()
    assert src.token() not in (first, second)  # the rotated refresh token works (the old one is spent)
    assert rec.posts("/device_authorization") == 1


def test_device_flow_denied(cat: ReferenceCatalog) -> None:
    src = from_issuer(cat.issuer_uri, client_id=CLI, on_prompt=approver(cat, "alice", deny=True))
    with pytest.raises(DeviceFlowError, match="denied.*login\\(\\) again"):
        src.login()  # type: ignore[attr-defined]


def test_device_flow_slow_down_and_expiry(monkeypatch: pytest.MonkeyPatch) -> None:
    from lakesession.identity import _device

    sleeps: list[float] = []
    monkeypatch.setattr(_device, "_sleep", sleeps.append)
    answers = iter(["authorization_pending", "slow_down", "authorization_pending", "expired_token"])

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/device"):
            return httpx.Response(
                200,
                json={
                    "device_code": "dc-mock-secret",
                    "user_code": "ABCD-EFGH",
                    "verification_uri": "https://idp.test/device",
                    "expires_in": 600,
                    "interval": 2,
                },
            )
        form = dict(parse_qsl(request.read().decode()))
        assert form["grant_type"] == "urn:ietf:params:oauth:grant-type:device_code"
        assert form["device_code"] == "dc-mock-secret" and form["client_id"] == "cli"
        return httpx.Response(400, json={"error": next(answers)})

    src = DeviceCode(
        "https://idp.test/device",
        "https://idp.test/token",
        "cli",
        on_prompt=lambda p: None,
        http_options={"transport": httpx.MockTransport(handler)},
    )
    with pytest.raises(DeviceFlowError, match="expired.*login\\(\\) again"):
        src.login()
    assert [round(s) for s in sleeps] == [2, 2, 7, 7]  # the server's interval, +5 s after slow_down


def test_transient_failures_are_retried_with_full_jitter(monkeypatch: pytest.MonkeyPatch) -> None:
    from lakesession.identity import _base

    bounds: list[tuple[float, float]] = []
    monkeypatch.setattr(_base.random, "uniform", lambda a, b: bounds.append((a, b)) or 0.0)
    statuses = iter([503, 502, 200, 500, 500, 500, 200])
    seen: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        status = next(statuses)
        seen.append(status)
        if status != 200:
            return httpx.Response(status, text="upstream unavailable")
        return httpx.Response(
            200, json={"access_token": f"opaque-{len(seen)}", "token_type": "Bearer", "expires_in": 300}
        )

    src = ClientCredentials(
        "https://idp.test/token", "svc", "svc-secret", http_options={"transport": httpx.MockTransport(handler)}
    )
    assert src.token() == "opaque-3" and seen == [503, 502, 200]  # two retries inside the call
    assert bounds == [(0, 0.5), (0, 1.0)]  # full jitter: uniform(0, base * 2**n)
    src.invalidate()
    with pytest.raises(TokenRefreshError, match="https://idp.test/token.*HTTP 500.*recovers"):
        src.token()  # the rejected token cannot be served while the issuer fails
    assert src.token() == "opaque-7"  # a later call tries again and recovers


def test_token_exchange_carries_act(cat: ReferenceCatalog) -> None:
    subject = StaticToken(cat.admin.token_for("alice", ttl=300))
    src = TokenExchange(f"{cat.issuer_uri}/token", subject, "exchanger", EXCHANGER_SECRET, audience="lakesession")
    token = src.token()
    claims = verify(cat, token)
    assert claims["sub"] == "alice" and claims["act"] == {"sub": "exchanger"}
    assert src.principal == "alice" and src.describe()["actor"] == "exchanger"
    assert src.describe()["kind"] == "token_exchange"
    bad = TokenExchange(f"{cat.issuer_uri}/token", StaticToken("forged.not.jwt"), "exchanger", EXCHANGER_SECRET)
    with pytest.raises(LoginRequiredError, match="static access token was rejected"):
        bad.token()  # refused: the subject is invalidated and asked for a fresh token, which it cannot give


@pytest.mark.slow  # waits for a short token's refresh window (~6 s)
def test_refresh_ahead_of_expiry_single_flight(short: ReferenceCatalog) -> None:
    rec = Recorder()
    src = device(short, "alice", http_options={"transport": rec})
    first = src.token()
    old_expiry = src.expires_at
    assert old_expiry is not None and 2 < old_expiry - time.time() <= 3.1
    wait_until_due(src, 3)
    second = src.token()
    assert time.time() < old_expiry  # refreshed before the old token expired
    assert second != first and verify(short, second)["sub"] == "alice"

    wait_until_due(src, 3)
    before = rec.posts("/token")
    barrier = threading.Barrier(32)
    results: list[str] = []
    errors: list[Exception] = []

    def call() -> None:
        barrier.wait()
        try:
            results.append(src.token())
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not errors and len(results) == 32
    assert rec.posts("/token") - before == 1  # exactly one refresh for 32 callers
    assert len(set(results)) == 1 and results[0] not in (first, second)
    assert verify(short, results[0])["sub"] == "alice"


@pytest.mark.slow  # waits out an issuer outage (~6 s)
def test_issuer_down_then_back(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data_dir = tmp_path / "catalog"
    cat = start(data_dir=data_dir, access_token_ttl=3, **FAST)
    port = int(cat.uri.rsplit(":", 1)[1])
    rec = Recorder()
    try:
        src = device(cat, "alice", http_options={"transport": rec})
        token = src.token()
    finally:
        cat.stop()
    expires_at = src.expires_at
    assert expires_at is not None
    wait_until_due(src, 3)
    caplog.set_level(logging.WARNING, logger="lakesession.identity")
    assert src.token() == token  # issuer down, token still valid: keep serving it
    assert any("could not refresh" in r.getMessage() for r in caplog.records) and token not in caplog.text
    time.sleep(max(0.0, expires_at - time.time() + 0.1))
    with pytest.raises(TokenRefreshError) as err:
        src.token()
    msg = str(err.value)
    assert cat.issuer_uri in msg and "recovers" in msg
    attempts = len(rec.requests)
    with pytest.raises(TokenRefreshError):
        src.token()
    assert len(rec.requests) > attempts  # later calls try again
    back = start(port=port, data_dir=data_dir, access_token_ttl=3, **FAST)  # same key, same refresh tokens
    try:
        fresh = src.token()
        assert fresh != token and verify(back, fresh)["sub"] == "alice" and src.principal == "alice"
    finally:
        back.stop()


def test_dead_refresh_token_requires_login(cat: ReferenceCatalog, tmp_path: Path) -> None:
    cache = TokenCache(tmp_path / "tokens.json")
    src = device(cat, "bob", cache=cache)
    src.token()
    cat.app.state.issuer.refresh_store.revoke_principal("bob")
    src.invalidate()
    with pytest.raises(LoginRequiredError) as err:
        src.token()
    msg = str(err.value)
    assert "%lakesession login" in msg and "lakesession.connect(" in msg and cat.issuer_uri in msg
    assert not cache.keys()  # the dead refresh token is dropped from the cache
    with pytest.raises(LoginRequiredError):
        src.token()


def test_token_cache_is_private_and_resumes_the_login(cat: ReferenceCatalog, tmp_path: Path) -> None:
    path = tmp_path / "cache-dir" / "tokens.json"
    cache = TokenCache(path)
    src = device(cat, "carol", cache=cache)
    first = src.token()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    key = f"{cat.issuer_uri}|{CLI}"
    entry = json.loads(path.read_text())[key]
    assert entry["refresh_token"] and entry["access_token"] == first and entry["principal"] == "carol"
    # a new process: no login, the cache brings the session back
    again = from_issuer(cat.issuer_uri, client_id=CLI, cache=TokenCache(path), on_prompt=lambda p: pytest.fail())
    assert again.principal == "carol" and again.token() == first
    again.invalidate()
    refreshed = again.token()
    assert refreshed != first and verify(cat, refreshed)["sub"] == "carol"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # still private after the atomic replace
    assert json.loads(path.read_text())[key]["refresh_token"] != entry["refresh_token"]  # rotated & stored
    assert [p.name for p in path.parent.iterdir()] == ["tokens.json"]  # no temporary files left behind
    os.chmod(path, 0o644)
    TokenCache(path).save("other|x", {"access_token": "a"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


# -- JupyterHub ----------------------------------------------------------------------------------
def hub_app(cat: ReferenceCatalog, calls: list[str]) -> FastAPI:
    app = FastAPI()

    def check(authorization: str | None) -> None:
        if authorization != f"token {HUB_API_TOKEN}":
            raise HTTPException(403, "Action is not authorized with current scopes")

    @app.get("/hub/api/user")
    def whoami(authorization: str | None = Header(None)) -> dict[str, Any]:
        calls.append("/user")
        check(authorization)
        return {"kind": "user", "name": "alice", "auth_state": None}  # the known bug

    @app.get("/hub/api/users/{name}")
    def user(name: str, authorization: str | None = Header(None)) -> dict[str, Any]:
        calls.append(f"/users/{name}")
        check(authorization)
        if name == "alice":
            state = {"access_token": cat.admin.token_for("alice", ttl=3), "refresh_token": "hub-rt-secret-1234567"}
        elif name == "dave":
            state = {"token": "opaque-hub-token-1234567", "expiry": 4102444800}
        elif name == "erin":
            return {"kind": "user", "name": name, "auth_state": None}
        else:
            raise HTTPException(404, "Not found")
        return {"kind": "user", "name": name, "admin": False, "auth_state": state}

    return app


def test_jupyterhub_token(short: ReferenceCatalog, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    with serve(hub_app(short, calls)) as base:
        monkeypatch.setenv("JUPYTERHUB_API_URL", f"{base}/hub/api")
        monkeypatch.setenv("JUPYTERHUB_USER", "alice")
        monkeypatch.setenv("JUPYTERHUB_API_TOKEN", HUB_API_TOKEN)
        src = JupyterHubToken()
        first = src.token()
        assert verify(short, first)["sub"] == "alice" and src.principal == "alice"
        assert src.describe()["kind"] == "jupyterhub" and src.describe()["hub_user"] == "alice"
        assert src.token() == first and calls == ["/users/alice"]
        wait_until_due(src, 3)
        second = src.token()  # re-read before expiry
        assert second != first and calls == ["/users/alice", "/users/alice"]
        assert "/user" not in calls

        dave = JupyterHubToken(user="dave", access_token_key="token", expires_at_key="expiry")
        assert dave.token() == "opaque-hub-token-1234567"
        assert dave.principal is None and dave.expires_at == 4102444800
        with pytest.raises(IdentityError, match="admin:auth_state!user.*enable_auth_state"):
            JupyterHubToken(user="erin").token()
        with pytest.raises(IdentityError, match="admin:auth_state!user"):
            JupyterHubToken(api_token="wrong-token").token()
        with pytest.raises(IdentityError, match="no 'access_token'.*access_token_key"):
            JupyterHubToken(user="dave").token()
    monkeypatch.delenv("JUPYTERHUB_API_TOKEN")
    with pytest.raises(IdentityError, match="JUPYTERHUB_API_TOKEN"):
        JupyterHubToken()


# -- no secret anywhere ----------------------------------------------------------------------------
@pytest.mark.slow  # walks every flow with DEBUG logs (~5 s): off the fast set (5-min budget)
def test_no_secret_in_repr_logs_or_errors(
    cat: ReferenceCatalog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    for name in ("httpx", "httpcore", "authlib", "lakesession"):
        logging.getLogger(name).setLevel(logging.DEBUG)
    rec = Recorder()
    http = {"transport": rec}
    shown: list[str] = []
    errors: list[BaseException] = []

    def expect(exc_type: type[BaseException], fn: Callable[[], Any]) -> None:
        with pytest.raises(exc_type) as err:
            fn()
        errors.append(err.value)

    cache = TokenCache(tmp_path / "t.json")
    cc = from_issuer(cat.issuer_uri, client_id="etl", client_secret=ETL_SECRET, http_options=http, cache=cache)
    cc.token()
    dev = device(cat, "alice", http_options=http, cache=cache)
    dev.token()
    dev.invalidate()
    dev.token()
    tx = TokenExchange(f"{cat.issuer_uri}/token", dev, "exchanger", EXCHANGER_SECRET, http_options=http)
    tx.token()
    st = StaticToken(cat.admin.token_for("alice"))
    st.token()
    sources: list[TokenSource] = [cc, dev, tx, st]
    expect(
        IdentityError, ClientCredentials(f"{cat.issuer_uri}/token", "etl", ETL_SECRET + "x", http_options=http).token
    )
    expect(
        IdentityError,
        TokenExchange(
            f"{cat.issuer_uri}/token", StaticToken("a.b.c"), "exchanger", EXCHANGER_SECRET, http_options=http
        ).token,
    )
    dead = device(cat, "bob", http_options=http)
    dead.token()
    cat.app.state.issuer.refresh_store.revoke_principal("bob")
    dead.invalidate()
    expect(LoginRequiredError, dead.token)
    sources.append(dead)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    down_url = f"http://127.0.0.1:{closed.getsockname()[1]}/token"
    closed.close()
    expect(TokenRefreshError, ClientCredentials(down_url, "etl", ETL_SECRET, http_options=http).token)
    expect(LoginRequiredError, StaticToken(cat.admin.token_for("alice", ttl=-5)).token)
    expect(
        DeviceFlowError,
        lambda: from_issuer(
            cat.issuer_uri, client_id=CLI, http_options=http, on_prompt=approver(cat, "alice", deny=True)
        ).login(),
    )  # type: ignore[attr-defined]
    calls: list[str] = []
    with serve(hub_app(cat, calls)) as base:
        hub = JupyterHubToken(api_url=f"{base}/hub/api", user="alice", api_token=HUB_API_TOKEN)
        hub.token()
        sources.append(hub)
        expect(IdentityError, JupyterHubToken(api_url=f"{base}/hub/api", user="erin", api_token=HUB_API_TOKEN).token)

    secrets = rec.secrets() | {
        ETL_SECRET,
        EXCHANGER_SECRET,
        HUB_API_TOKEN,
        "hub-rt-secret-1234567",
        hub.token(),
        st.token(),
    }
    assert len(secrets) > 10 and any("." in s for s in secrets)  # tokens, refresh tokens, device codes
    for src in sources:
        shown += [repr(src), str(src), json.dumps(src.describe())]
    shown += [repr(cache), repr(DevicePrompt("u", None, "ABCD", 1))]
    for exc in errors:
        while exc is not None:
            shown += [str(exc), repr(exc)]
            exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    shown += [caplog.text] + [r.getMessage() for r in caplog.records]
    assert len(caplog.records) > 20  # the scan did see DEBUG output (httpx, httpcore, authlib, ours)
    leaks = [
        (s[:6] + "...", text[max(0, text.find(s) - 80) : text.find(s)] + "<SECRET>")
        for text in shown
        for s in secrets
        if s in text
    ]
    assert not leaks, leaks
