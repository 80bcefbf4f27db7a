"""``DeviceCodeAuthenticator``: log in to JupyterHub at an OIDC issuer with the device grant (RFC 8628).

For issuers without the authorization-code flow — such as the reference
catalog's embedded issuer — but useful with any issuer that has a
``device_authorization_endpoint``:

1. ``/hub/device_login`` asks the issuer for a device code and shows the user
   the code and the issuer's verification link (a signed cookie ties the
   pending login to this browser);
2. the user approves at the issuer (signs in there);
3. ``/hub/device_callback`` redeems the device code (the page re-polls by
   itself while approval is pending), verifies the access token against the
   issuer's JWKS (or asks its userinfo endpoint) and logs the user in with the
   tokens in ``auth_state`` (``access_token``, ``refresh_token``, ``expires_at``).

``refresh_user`` refreshes the access token with the refresh token once less than
``refresh_margin`` seconds of it are left — one refresh per user at a time, since
refresh tokens rotate and a reused one revokes the login.

Tokens never reach a log line, a page or an exception message.
"""

from __future__ import annotations

import asyncio
import html
import secrets
import time
from typing import Any
from urllib.parse import urlencode

import httpx
from authlib.integrations.base_client.errors import OAuthError
from authlib.integrations.httpx_client import AsyncOAuth2Client
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet
from jupyterhub.auth import Authenticator
from jupyterhub.handlers import BaseHandler
from jupyterhub.utils import url_path_join
from tornado import web
from traitlets import Float, Unicode, default

from ..errors import ConfigError

DEVICE_CODE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
STATE_COOKIE = "lakesession-device-login"
PENDING_LIMIT = 1000


class _Rejected(Exception):
    """The issuer refused (``error`` is the OAuth error code, safe to show)."""

    def __init__(self, error: str):
        super().__init__(error)
        self.error = error


class DeviceLoginHandler(BaseHandler):
    """Start a device login: get a code from the issuer and show where to approve it."""

    async def get(self) -> None:
        auth: DeviceCodeAuthenticator = self.authenticator
        try:
            state, pending = await auth.start_device_login()
        except (_Rejected, httpx.HTTPError) as exc:
            reason = exc.error if isinstance(exc, _Rejected) else type(exc).__name__
            raise web.HTTPError(502, f"The identity provider refused to start a login ({reason})") from None
        self.set_signed_cookie(
            STATE_COOKIE,
            state,
            expires_days=None,
            httponly=True,
            path=self.hub.base_url,
            secure=self.request.protocol == "https",
            samesite="Lax",
        )
        next_url = self.get_argument("next", "")
        callback = url_path_join(self.hub.base_url, "device_callback") + (
            "?" + urlencode({"next": next_url}) if next_url else ""
        )
        link = pending.get("verification_uri_complete") or pending["verification_uri"]
        e = html.escape
        self.finish(
            _page(
                "Sign in",
                f"""<p>Open <a id="verification" href="{e(link)}" target="_blank" rel="noopener">{e(link)}</a>
and approve code <b id="user-code" data-user-code="{e(pending["user_code"])}">{e(pending["user_code"])}</b>
at {e(auth.login_service)}.</p>
<p><a id="continue" href="{e(callback)}">Continue</a> once you have approved it.</p>""",
            )
        )


class DeviceCallbackHandler(BaseHandler):
    """Redeem the pending device code and log the user in (or show that approval is still pending)."""

    async def get(self) -> None:
        auth: DeviceCodeAuthenticator = self.authenticator
        raw = self.get_signed_cookie(STATE_COOKIE, max_age_days=1)
        state = raw.decode() if raw else None
        try:
            tokens = await auth.redeem(state)
        except _Rejected as exc:
            if exc.error in ("authorization_pending", "slow_down"):
                interval = auth.poll_interval(state)
                self.finish(
                    _page(
                        "Waiting for approval",
                        f"<p>Waiting for you to approve the login at {html.escape(auth.login_service)}…</p>",
                        refresh=interval,
                    )
                )
                return
            self.clear_cookie(STATE_COOKIE, path=self.hub.base_url)
            raise web.HTTPError(403, f"Login failed ({exc.error}). Start again from the login page.") from None
        except httpx.HTTPError as exc:
            raise web.HTTPError(502, f"Cannot reach the identity provider ({type(exc).__name__})") from None
        self.clear_cookie(STATE_COOKIE, path=self.hub.base_url)
        user = await self.login_user(tokens)
        if user is None:
            raise web.HTTPError(403, "You are not allowed to use this hub.")
        self.redirect(self.get_next_url(user))


def _page(title: str, body: str, *, refresh: float | None = None) -> str:
    meta = f'<meta http-equiv="refresh" content="{int(max(1, refresh))}">' if refresh else ""
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">{meta}<title>{html.escape(title)}</title>'
        f'</head><body style="font-family:sans-serif;max-width:36em;margin:3em auto">'
        f"<h1>{html.escape(title)}</h1>{body}</body></html>"
    )


class DeviceCodeAuthenticator(Authenticator):
    """JupyterHub login through an OIDC issuer's device authorization grant; tokens kept and refreshed in auth_state."""

    issuer = Unicode(
        config=True,
        help="""The OIDC issuer URL; its discovery document is read from
        ``{issuer}/.well-known/openid-configuration`` (token, device authorization and JWKS endpoints).""",
    )
    client_id = Unicode("jupyterhub", config=True, help="OAuth client id of the hub at the issuer.")
    client_secret = Unicode(
        "",
        config=True,
        help="""OAuth client secret; empty for a public client.
        Can be set with the ``LAKESESSION_HUB_CLIENT_SECRET`` environment variable.""",
    )
    scope = Unicode("catalog", config=True, help="Scope to request.")
    audience = Unicode("", config=True, help="Required ``aud`` of access tokens; empty: not checked.")
    username_claim = Unicode("sub", config=True, help="Claim naming the hub user.")
    refresh_margin = Float(
        0.0,
        config=True,
        help="""Refresh a user's access token in ``refresh_user``
        once less than this many seconds of it are left. 0 (default): ``auth_refresh_age + 60``, at most
        half the token's lifetime — so that the hub holds a fresh token by the time a single-user
        server re-reads it (lakesession re-reads when ``min(60 s, 10 %)`` of the lifetime is left).""",
    )
    http_timeout = Float(30.0, config=True, help="Timeout (seconds) of requests to the issuer.")

    @default("client_secret")
    def _client_secret_default(self) -> str:
        import os

        return os.environ.get("LAKESESSION_HUB_CLIENT_SECRET", "")

    @default("login_service")
    def _login_service_default(self) -> str:
        return "the identity provider"

    @default("enable_auth_state")
    def _enable_auth_state_default(self) -> bool:
        return True

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self._metadata: dict[str, Any] | None = None
        self._pending: dict[str, dict[str, Any]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    # -- JupyterHub hooks ---------------------------------------------------------------------
    def login_url(self, base_url: str) -> str:
        return url_path_join(base_url, "device_login")

    def get_handlers(self, app: Any) -> list[tuple[str, type]]:
        return [("/device_login", DeviceLoginHandler), ("/device_callback", DeviceCallbackHandler)]

    async def authenticate(self, handler: Any, data: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """``data`` is the token response of a redeemed device code (never a username/password form)."""
        if not isinstance(data, dict) or not isinstance(data.get("access_token"), str):
            return None
        claims = await self._identify(data["access_token"])
        name = claims.get(self.username_claim)
        if not isinstance(name, str) or not name:
            self.log.warning("the issuer's token has no %r claim; cannot name the hub user", self.username_claim)
            return None
        return {"name": name, "auth_state": self._auth_state(data)}

    async def refresh_user(self, user: Any, handler: Any = None) -> bool | dict[str, Any]:
        """Refresh the access token ahead of expiry; ``False`` (log in again) when the issuer refuses."""
        lock = self._locks.setdefault(user.name, asyncio.Lock())
        async with lock:  # one refresh per user at a time: refresh tokens rotate
            state = await user.get_auth_state()
            if not isinstance(state, dict) or not state.get("access_token"):
                return False
            expires_at = state.get("expires_at")
            if not isinstance(expires_at, (int, float)):
                return True  # no known expiry: nothing to schedule
            left = expires_at - time.time()
            if left > self._margin(state):
                return True
            refresh = state.get("refresh_token")
            if not refresh:
                return left > 0
            try:
                response = await self._token_request(grant_type="refresh_token", refresh_token=refresh)
            except _Rejected as exc:
                self.log.warning(
                    "the issuer refused to refresh the tokens of %s (%s); they must log in again", user.name, exc.error
                )
                return False
            except httpx.HTTPError as exc:
                self.log.warning(
                    "cannot refresh the tokens of %s now (%s); keeping the current ones", user.name, type(exc).__name__
                )
                return left > 0
            new_state = self._auth_state(response, previous=state)
            await user.save_auth_state(new_state)  # inside the lock: no one may read the spent refresh token
            self.log.info(
                "refreshed the access token of %s (expires in %.0f s)",
                user.name,
                new_state["expires_at"] - time.time() if new_state.get("expires_at") else float("nan"),
            )
            return {"name": user.name, "auth_state": new_state}

    # -- the device flow ----------------------------------------------------------------------
    async def start_device_login(self) -> tuple[str, dict[str, Any]]:
        """Ask the issuer for a device code; returns (state, pending) with the user code and links."""
        meta = await self.metadata()
        body = {"client_id": self.client_id, "scope": self.scope}
        auth = (self.client_id, self.client_secret) if self.client_secret else None
        async with httpx.AsyncClient(timeout=self.http_timeout) as client:
            resp = await client.post(meta["device_authorization_endpoint"], data=body, auth=auth)  # type: ignore[arg-type]
        payload = _json(resp)
        if resp.status_code != 200 or "device_code" not in payload:
            raise _Rejected(str(payload.get("error") or f"HTTP {resp.status_code}"))
        now = time.time()
        pending: dict[str, Any] = {
            k: payload[k]
            for k in ("device_code", "user_code", "verification_uri", "verification_uri_complete")
            if k in payload
        }
        pending["expires_at"] = now + float(payload.get("expires_in") or 600)
        pending["interval"] = float(payload.get("interval") or 5)
        for key in [k for k, p in self._pending.items() if p["expires_at"] < now][:PENDING_LIMIT]:
            self._pending.pop(key, None)
        if len(self._pending) >= PENDING_LIMIT:
            raise _Rejected("too_many_pending_logins")
        state = secrets.token_urlsafe(24)
        self._pending[state] = pending
        return state, pending

    def poll_interval(self, state: str | None) -> float:
        pending = self._pending.get(state or "")
        return pending["interval"] if pending else 5.0

    async def redeem(self, state: str | None) -> dict[str, Any]:
        """Exchange the pending device code for tokens (``_Rejected('authorization_pending')`` while waiting)."""
        pending = self._pending.get(state or "")
        if pending is None or pending["expires_at"] < time.time():
            self._pending.pop(state or "", None)
            raise _Rejected("expired_token")
        try:
            response = await self._token_request(grant_type=DEVICE_CODE_GRANT, device_code=pending["device_code"])
        except _Rejected as exc:
            if exc.error == "slow_down":
                pending["interval"] += 5
            if exc.error not in ("authorization_pending", "slow_down"):
                self._pending.pop(state or "", None)
            raise
        self._pending.pop(state or "", None)
        return response

    # -- issuer plumbing ----------------------------------------------------------------------
    async def metadata(self) -> dict[str, Any]:
        if self._metadata is None:
            if not self.issuer:
                raise ConfigError("DeviceCodeAuthenticator.issuer is not set: set c.DeviceCodeAuthenticator.issuer")
            url = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
            async with httpx.AsyncClient(timeout=self.http_timeout) as client:
                resp = await client.get(url)
            resp.raise_for_status()
            meta = _json(resp)
            missing = [k for k in ("token_endpoint", "device_authorization_endpoint", "jwks_uri") if k not in meta]
            if missing:
                raise ConfigError(f"{url} lacks {', '.join(missing)}: the issuer must support the device grant")
            self._metadata = meta
        return self._metadata

    async def _token_request(self, **params: str) -> dict[str, Any]:
        meta = await self.metadata()
        method = "client_secret_basic" if self.client_secret else "none"
        async with AsyncOAuth2Client(
            client_id=self.client_id,
            client_secret=self.client_secret or None,
            token_endpoint_auth_method=method,
            timeout=self.http_timeout,
        ) as client:
            try:
                token = await client.fetch_token(meta["token_endpoint"], **params)
            except OAuthError as exc:
                raise _Rejected(str(exc.error or "oauth_error")) from None
        return dict(token)

    async def _identify(self, access_token: str) -> dict[str, Any]:
        """Claims naming the user: from the verified JWT access token, else from the userinfo endpoint."""
        meta = await self.metadata()
        try:
            return await self._verified_claims(access_token, meta)
        except (JoseError, ValueError) as exc:
            if not meta.get("userinfo_endpoint"):
                self.log.warning("rejected the issuer's access token (%s)", type(exc).__name__)
                return {}
        async with httpx.AsyncClient(timeout=self.http_timeout) as client:
            resp = await client.get(meta["userinfo_endpoint"], headers={"Authorization": f"Bearer {access_token}"})
        return _json(resp) if resp.status_code == 200 else {}

    async def _verified_claims(self, token: str, meta: dict[str, Any]) -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=self.http_timeout) as client:
            resp = await client.get(meta["jwks_uri"])
        resp.raise_for_status()
        keys = KeySet.import_key_set(resp.json())
        claims = jwt.decode(token, keys).claims
        checks: dict[str, Any] = {
            "iss": {"essential": True, "value": meta.get("issuer") or self.issuer},
            "exp": {"essential": True},
        }
        if self.audience:
            checks["aud"] = {"essential": True, "value": self.audience}
        jwt.JWTClaimsRegistry(leeway=30, **checks).validate(claims)
        return dict(claims)

    def _auth_state(self, response: dict[str, Any], previous: dict[str, Any] | None = None) -> dict[str, Any]:
        now = time.time()
        state: dict[str, Any] = {
            "access_token": response["access_token"],
            "token_type": response.get("token_type", "Bearer"),
            "scope": response.get("scope") or (previous or {}).get("scope"),
            "refresh_token": response.get("refresh_token") or (previous or {}).get("refresh_token"),
        }
        expires_in = response.get("expires_in")
        if isinstance(expires_in, (int, float)) and not isinstance(expires_in, bool):
            state["issued_at"], state["expires_at"] = now, now + float(expires_in)
        return state

    def _margin(self, state: dict[str, Any]) -> float:
        if self.refresh_margin > 0:
            return self.refresh_margin
        issued, expires = state.get("issued_at"), state.get("expires_at")
        lifetime = expires - issued if isinstance(issued, (int, float)) and isinstance(expires, (int, float)) else None
        margin = float(self.auth_refresh_age or 0) + 60.0
        return min(margin, lifetime / 2) if lifetime else margin


def _json(resp: httpx.Response) -> dict[str, Any]:
    try:
        body = resp.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
