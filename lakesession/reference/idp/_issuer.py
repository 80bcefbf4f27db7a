"""``EmbeddedIssuer``: the reference catalog's own OIDC issuer (discovery, JWKS, token, device flow)."""

from __future__ import annotations

import html
import logging
import secrets
import time
from pathlib import Path
from typing import Any

from authlib.oauth2.rfc6749.errors import InsecureTransportError
from fastapi import APIRouter
from joserfc import jwt
from joserfc.jwk import KeySet, import_key
from sqlalchemy import Engine
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from ..directory import Directory
from ..errors import BadRequest, NotAuthorized
from ..settings import ServerSettings
from . import _authcode
from ._adapter import FormError, client_address, oauth2_request, oauth_error, read_form, to_response
from ._authpage import AuthorizePages
from ._devices import DeviceCredential, DeviceStore, normalize_user_code
from ._grants import DEVICE_CODE_GRANT, TOKEN_EXCHANGE_GRANT, Client, OAuthServer, User
from ._keys import ACCESS_TOKEN_TYPES, check_access_token, load_or_create_signing_key, public_jwks
from ._state import RefreshTokenStore
from ._throttle import FAILURE_ERRORS, Rule, Throttle

logger = logging.getLogger(__name__)

DEFAULT_CLIENT_ID = "lakesession-cli"
APPROVAL_ENDPOINT_KEY = "lakesession_device_approval_endpoint"
_HTML_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


class EmbeddedIssuer:
    """An OIDC issuer under ``settings.embedded_issuer_url`` whose clients are the Directory's principals.

    Access tokens are RFC 9068 JWTs signed with one key (ES256 unless a persisted
    RSA JWK is supplied), kept at ``key_path`` (mode 0600) when given. Refresh
    tokens are rotated and stored as SHA-256 hashes in ``ls_idp_*`` tables of
    ``engine``; device codes live in memory.
    """

    def __init__(self, settings: ServerSettings, directory: Directory, engine: Engine, key_path: Path | None = None):
        self.settings = settings
        self.directory = directory
        self.engine = engine
        self.key, self.alg = load_or_create_signing_key(Path(key_path) if key_path is not None else None)
        self._verify_keys = KeySet([import_key(self.key.as_dict(private=False))])
        self.refresh_store = RefreshTokenStore(engine)
        abuse = settings.abuse
        self.devices = DeviceStore(
            per_address=abuse.device_pending_per_address,
            per_network=abuse.device_pending_per_network,
            total=abuse.device_pending_total,
            per_principal=abuse.device_approved_per_principal,
            pressure_ttl=settings.device_code_ttl_under_pressure,
        )
        self.throttle = Throttle(abuse)
        self.server = OAuthServer(self)
        self.authcodes = _authcode.AuthCodeStore(engine)
        _authcode.register(self)
        self.router = self._build_router()

    @property
    def issuer_url(self) -> str:
        return self.settings.embedded_issuer_url

    @property
    def kid(self) -> str:
        return str(self.key.kid)

    # -- documents --------------------------------------------------------
    def metadata(self) -> dict[str, Any]:
        """OpenID Provider / RFC 8414 metadata."""
        iss = self.issuer_url
        return {
            "issuer": iss,
            "token_endpoint": f"{iss}/token",
            "jwks_uri": f"{iss}/jwks",
            "device_authorization_endpoint": f"{iss}/device_authorization",
            "authorization_endpoint": f"{iss}/authorize",
            "userinfo_endpoint": f"{iss}/userinfo",
            "grant_types_supported": [
                "authorization_code",
                "client_credentials",
                DEVICE_CODE_GRANT,
                "refresh_token",
                TOKEN_EXCHANGE_GRANT,
            ],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post", "none"],
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "code_challenge_methods_supported": ["S256"],
            "scopes_supported": ["openid", "catalog"],
            "claims_supported": ["sub", "preferred_username", "name", "nonce", "auth_time"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": [self.alg],
            APPROVAL_ENDPOINT_KEY: f"{iss}/device",
        }

    def jwks(self) -> dict[str, Any]:
        return public_jwks(self.key, self.alg)

    # -- TokenVerifier ----------------------------------------------------
    def verify(self, token: str) -> dict[str, Any]:
        """Claims of a valid access token minted by this issuer, else ``NotAuthorized`` (short reason)."""
        claims = check_access_token(
            token,
            self._verify_keys,
            issuer=self.issuer_url,
            audience=self.settings.audience,
            algorithms=[self.alg],
            allowed_types=ACCESS_TOKEN_TYPES,
        )
        sid = claims.get("sid")  # tokens of a sign-in session (refresh family) die with it
        if isinstance(sid, str) and self.refresh_store.family_revoked(sid):
            raise NotAuthorized("Token rejected: its sign-in session was revoked")
        return claims

    def revocation_generation(self) -> object:
        """Moves whenever a sign-in session is revoked (``CachingVerifier`` re-checks cached tokens then)."""
        return self.refresh_store.revocation_generation()

    def session_revoked(self, sid: str) -> bool:
        return self.refresh_store.family_revoked(sid)

    # -- admin / tests ----------------------------------------------------
    def issue_token(
        self,
        principal: str,
        *,
        scope: str = "catalog",
        ttl: int | None = None,
        client_id: str | None = None,
        with_refresh: bool = False,
    ) -> dict[str, Any]:
        """Mint a token response for ``principal`` directly (no client authentication: for admins and tests).

        ``ttl`` overrides the access token lifetime (negative values mint already-expired tokens).
        The refresh token, if requested, is bound to ``client_id`` (default ``lakesession-cli``).
        """
        client = Client(self, client_id or DEFAULT_CLIENT_ID, token_ttl=ttl)
        token = dict(
            self.server.generate_token(
                "urn:lakesession:issue", client, user=User(principal), scope=scope, include_refresh_token=with_refresh
            )
        )
        if with_refresh:
            self.refresh_store.save(
                token["refresh_token"],
                principal=principal,
                client_id=client.client_id,
                scope=token.get("scope"),
                ttl=self.settings.refresh_token_ttl,
            )
        return token

    def workload_token(self, subject: str, audience: str, ttl: int) -> str:
        """A token the catalog signs for itself, to prove who it is to a store's STS (``s3.web_identity``).

        Its audience is never the catalog's own and its ``typ`` is plain ``JWT``, so the catalog refuses it
        as an access token; no client can obtain one (token exchange only issues the catalog's audience).
        """
        if audience == self.settings.audience:
            raise ValueError(f"a workload token for the catalog's own audience {audience!r} would be an access token")
        now = int(time.time())
        claims = {
            "iss": self.issuer_url,
            "sub": subject,
            "aud": audience,
            "iat": now,  # no `nbf`: a store whose clock lags a little must not refuse a token just signed
            "exp": now + ttl,
            "jti": secrets.token_urlsafe(16),
        }
        return jwt.encode({"alg": self.alg, "kid": self.kid, "typ": "JWT"}, claims, self.key, algorithms=[self.alg])

    # -- device approval --------------------------------------------------
    def _pending(self, user_code: str) -> DeviceCredential:
        cred = self.devices.by_user_code(user_code)
        if cred is None or cred.is_expired():
            raise BadRequest("Unknown or expired user code")
        if cred.approved is not None:
            raise BadRequest("This user code was already approved or denied")
        return cred

    def approve_device(self, user_code: str, principal: str) -> tuple[str, ...]:
        """Let the device holding ``user_code`` obtain tokens as ``principal``; the user codes of that
        principal's older approvals withdrawn to stay within ``device_approved_per_principal``."""
        cred = self._pending(user_code)
        if self.directory.get_principal(principal) is None:
            raise BadRequest(f"Unknown principal {principal!r}")
        with cred.lock:
            if cred.approved is not None:
                raise BadRequest("This user code was already approved or denied")
            settled = self.devices.settle(cred, principal)  # never evicted by others' floods from now on
            if settled is None:
                raise BadRequest("Unknown or expired user code")
            cred.principal, cred.approved = principal, True
        logger.info("device authorization approved for principal %r (client %r)", principal, cred.client_id)
        return settled.withdrawn

    def deny_device(self, user_code: str, principal: str = "") -> None:
        """Refuse the device holding ``user_code``; the denial counts against ``principal``'s settled codes."""
        cred = self._pending(user_code)
        with cred.lock:
            if cred.approved is not None:
                raise BadRequest("This user code was already approved or denied")
            if self.devices.settle(cred, principal) is None:
                raise BadRequest("Unknown or expired user code")
            cred.approved = False
        logger.info("device authorization denied (client %r)", cred.client_id)

    # -- HTTP ---------------------------------------------------------------
    async def token_endpoint(self, request: Request) -> Response:
        """``POST`` token endpoint (form-encoded): all four grants, RFC 6749 §5.2 errors.

        Every call counts against its address; failed authentications (guesses) count per
        client id and address, and a caller over either allowance gets 429 before any
        secret is checked, so even the right secret gains a guesser nothing.
        """
        throttle = self.throttle
        address = client_address(request)
        wait = throttle.admit(throttle.token_calls, "", address)
        if wait is not None:
            return _throttled(wait)
        return await self._oauth(request, lambda oreq: self.server.create_token_response(oreq), throttle.token_failures)

    async def device_authorization_endpoint(self, request: Request) -> Response:
        """RFC 8628 device authorization, rate limited per client id and address (each call creates state)."""
        return await self._oauth(
            request, lambda oreq: self.server.create_endpoint_response("device_authorization", oreq), None
        )

    async def _oauth(self, request: Request, handle: Any, failures: tuple[Rule, ...] | None) -> Response:
        try:
            oreq = await oauth2_request(request)
        except FormError as exc:
            return oauth_error("invalid_request", str(exc))
        except InsecureTransportError as exc:
            return to_response(*exc())
        client_id, address = oreq.claimed_client_id, oreq.address
        throttle = self.throttle
        wait = (
            throttle.admit(throttle.device, client_id, address)
            if failures is None
            else throttle.blocked(failures, client_id, address)
        )
        if wait is not None:
            logger.info("throttled %s for client %r from %s", request.url.path, client_id, address)
            return _throttled(wait)
        status, body, headers = await run_in_threadpool(handle, oreq)
        error = body.get("error") if isinstance(body, dict) else None
        if failures is not None and error in FAILURE_ERRORS:
            throttle.record(failures, client_id, address)  # the address's counters only: never the id's owner
        return to_response(status, body, headers)

    async def _discovery(self, request: Request) -> Response:
        return JSONResponse(self.metadata(), headers={"Cache-Control": "public, max-age=300"})

    async def _jwks(self, request: Request) -> Response:
        return JSONResponse(self.jwks(), headers={"Cache-Control": "public, max-age=300"})

    async def _device_page(self, request: Request) -> Response:
        return self._page(normalize_user_code(request.query_params.get("user_code", "")))

    async def _device_submit(self, request: Request) -> Response:
        try:
            form = dict(await read_form(request))
        except FormError as exc:
            return self._page("", error=str(exc), status=400)
        user_code = normalize_user_code(form.get("user_code", ""))
        username, password = form.get("username", ""), form.get("password", "")
        principal = None
        address, failures = client_address(request), self.throttle.token_failures
        wait = self.throttle.blocked(failures, username[:255], address)
        if wait is not None:  # the approval form checks client secrets too: same brute-force allowance
            page = self._page(user_code, error=f"Too many failed sign-ins; retry in {wait} s.", status=429)
            page.headers["Retry-After"] = str(wait)
            return page
        if username and password:
            principal = await run_in_threadpool(self.directory.authenticate_client, username, password)
        if principal is None:
            self.throttle.record(failures, username[:255], address)
            return self._page(user_code, error="Invalid username or password.", status=401)
        try:
            if form.get("action") == "deny":
                self.deny_device(user_code, principal.name)
                return self._page("", notice="Access denied. The device will not be signed in.")
            withdrawn = self.approve_device(user_code, principal.name)
        except BadRequest as exc:
            return self._page(user_code, error=exc.message + ".", status=400)
        notice = f"Approved. The device is now signed in as {principal.name}; you can close this page."
        if withdrawn:
            notice += (
                f" Your older approval{'s' if len(withdrawn) > 1 else ''} of {', '.join(withdrawn)}, not yet used by "
                f"{'their devices' if len(withdrawn) > 1 else 'its device'}, {'were' if len(withdrawn) > 1 else 'was'}"
                f" withdrawn: at most {self.devices.per_principal} approvals may wait for their devices."
            )
        return self._page("", notice=notice)

    def _page(self, user_code: str, *, error: str = "", notice: str = "", status: int = 200) -> HTMLResponse:
        e = html.escape
        request_info = ""
        cred = self.devices.by_user_code(user_code) if user_code else None
        if cred is not None and not cred.is_expired() and cred.approved is None:
            request_info = (
                f"<p>Client <b>{e(cred.client_id)}</b> asks to act as you "
                f"(scope <code>{e(cred.scope or '')}</code>).</p>"
            )
        message = (f'<p class="error">{e(error)}</p>' if error else "") + (
            f'<p class="notice">{e(notice)}</p>' if notice else ""
        )
        form = (
            ""
            if notice
            else f"""
<form method="post" action="device">
  <label>Code <input name="user_code" value="{e(user_code)}" autocomplete="off" required></label>
  <label>Client id <input name="username" autocomplete="username" required></label>
  <label>Client secret <input name="password" type="password" autocomplete="current-password" required></label>
  <button name="action" value="approve">Approve</button> <button name="action" value="deny">Deny</button>
</form>"""
        )
        body = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>lakesession: sign in a device</title>
<style>body{{font-family:sans-serif;max-width:28em;margin:3em auto}}label{{display:block;margin:.6em 0}}
input{{display:block;width:100%}}.error{{color:#b00}}.notice{{color:#070}}</style></head>
<body><h1>Sign in a device</h1>{request_info}{message}{form}</body></html>"""
        return HTMLResponse(body, status_code=status, headers=_HTML_HEADERS)

    def _build_router(self) -> APIRouter:
        router = APIRouter(tags=["oidc"])
        pages = AuthorizePages(self)
        routes = [
            ("/.well-known/openid-configuration", self._discovery, "GET"),
            ("/jwks", self._jwks, "GET"),
            ("/token", self.token_endpoint, "POST"),
            ("/device_authorization", self.device_authorization_endpoint, "POST"),
            ("/device", self._device_page, "GET"),
            ("/device", self._device_submit, "POST"),
            ("/authorize", pages.show, "GET"),
            ("/authorize", pages.submit, "POST"),
            ("/userinfo", pages.userinfo, "GET"),
        ]
        for path, endpoint, method in routes:
            router.add_api_route(path, endpoint, methods=[method], include_in_schema=False)
        return router


def _throttled(wait: int) -> Response:
    """429 with ``Retry-After`` (``slow_down``, the RFC 8628 §3.5 error for clients that ask too often)."""
    resp = oauth_error("slow_down", f"Too many requests from this client or address; retry in {wait} s", status=429)
    resp.headers["Retry-After"] = str(wait)
    return resp
