"""The ``/authorize`` sign-in page and ``/userinfo`` of the embedded issuer (authorization code flow).

``GET /authorize`` validates the request with authlib (client, exact redirect
URI, PKCE, scope, nonce) and shows a sign-in form that carries the request's
parameters plus an anti-forgery token also set as a ``SameSite=Strict`` cookie
(double submit: a cross-site POST has no cookie). ``POST /authorize`` validates
everything again, checks the token, signs the user in with the principal's
client id and secret, and redirects to the client with a code (registered
clients are first-party: no consent screen). Errors before the redirect URI is
known to be registered are shown as a page, never redirected (RFC 6749 §4.1.2.1).
"""

from __future__ import annotations

import hmac
import html
import logging
import secrets
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from authlib.oauth2.rfc6749.errors import InsecureTransportError, OAuth2Error
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from ..errors import NotAuthorized
from ._adapter import FormError, StarletteOAuth2Request, client_address, read_form
from ._authcode import user_info
from ._grants import User

if TYPE_CHECKING:
    from ._authcode import CodeIssuer

logger = logging.getLogger(__name__)

CSRF_COOKIE = "lakesession_authorize"  # "__Host-" prefixed over https: no sibling subdomain can plant it
CSRF_FIELD = "csrf_token"
LOGIN_FIELDS = frozenset({"username", "password", CSRF_FIELD, "action"})
_STYLE = (
    "body{font-family:sans-serif;max-width:28em;margin:3em auto}label{display:block;margin:.6em 0}"
    "input{display:block;width:100%}.error{color:#b00}"
)


def _headers(form_targets: str = "") -> dict[str, str]:
    # form-action also governs where the POST may redirect to (the client's registered origin)
    return {
        "Cache-Control": "no-store",
        "Pragma": "no-cache",
        "Content-Security-Policy": (
            f"default-src 'none'; style-src 'unsafe-inline'; form-action 'self'{form_targets}; frame-ancestors 'none'"
        ),
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "no-referrer",
    }


class AuthorizePages:
    """``/authorize`` (GET shows the form, POST signs in) and ``/userinfo`` for one issuer."""

    def __init__(self, issuer: CodeIssuer):
        self.issuer = issuer

    async def show(self, request: Request) -> Response:
        pairs = list(request.query_params.multi_items())
        grant_or_error = await self._validate(request, pairs)
        if isinstance(grant_or_error, Response):
            return grant_or_error
        name, secure = _cookie_name(request), request.url.scheme == "https"
        token = request.cookies.get(name) or ""
        fresh = len(token) < 32
        if fresh:
            token = secrets.token_urlsafe(32)
        page = self._login_page(pairs, token, grant_or_error.request.client.get_client_id())
        if fresh:
            path = "/" if secure else request.url.path
            page.set_cookie(name, token, path=path, httponly=True, samesite="strict", secure=secure)
        return page

    async def submit(self, request: Request) -> Response:
        try:
            form = await read_form(request)
        except FormError as exc:
            return self._error_page(str(exc), 400)
        pairs = [(k, v) for k, v in form if k not in LOGIN_FIELDS]
        fields = {k: v for k, v in form if k in LOGIN_FIELDS}
        grant_or_error = await self._validate(request, pairs)
        if isinstance(grant_or_error, Response):
            return grant_or_error
        grant = grant_or_error
        client_id = grant.request.client.get_client_id()
        cookie = request.cookies.get(_cookie_name(request)) or ""
        sent = fields.get(CSRF_FIELD, "")
        if not cookie or not sent or not hmac.compare_digest(cookie.encode(), sent.encode()):
            logger.warning("refused a sign-in POST without the form's anti-forgery token (client %r)", client_id)
            return self._error_page(
                "This sign-in form is not valid any more (or was not sent from this site). "
                "Go back to the application and sign in again.",
                403,
            )
        if fields.get("action") == "deny":
            return self._authorize(grant, None)
        username, password = fields.get("username", ""), fields.get("password", "")
        throttle, address = self.issuer.throttle, client_address(request)
        wait = throttle.blocked(throttle.token_failures, username[:255], address)
        if wait is not None:  # the sign-in form checks passwords: the token endpoint's brute-force allowance
            page = self._login_page(
                pairs, cookie, client_id, error=f"Too many failed sign-ins; retry in {wait} s.", status=429
            )
            page.headers["Retry-After"] = str(wait)
            return page
        principal = None
        if username and password:
            principal = await run_in_threadpool(self.issuer.directory.authenticate_client, username, password)
        if principal is None or principal.type != "user":
            throttle.record(throttle.token_failures, username[:255], address)
            logger.info("sign-in for client %r failed (wrong user name or password)", client_id)
            return self._login_page(pairs, cookie, client_id, error="Invalid user name or password.", status=401)
        logger.info("principal %r signed in for client %r (authorization code)", principal.name, client_id)
        return await run_in_threadpool(self._authorize, grant, User(principal.name))

    def _authorize(self, grant: Any, user: User | None) -> Response:
        status, body, headers = self.issuer.server.create_authorization_response(
            grant.request, grant_user=user, grant=grant
        )
        location = dict(headers or []).get("Location")
        if status == 302 and location:
            return RedirectResponse(location, status_code=302, headers={"Cache-Control": "no-store"})
        return self._error_page(str(body), status)

    async def _validate(self, request: Request, pairs: list[tuple[str, str]]) -> Any:
        """authlib's grant for a valid request, else the error response (page, or redirect to a registered URI)."""
        try:
            oreq = StarletteOAuth2Request(request, pairs)
        except InsecureTransportError:
            return self._error_page("The issuer must be reached over https.", 400)
        try:
            return await run_in_threadpool(self.issuer.server.get_consent_grant, oreq)
        except OAuth2Error as err:
            if err.redirect_uri:  # the client and this redirect URI are registered: tell the client
                _, _, headers = err()
                location = dict(headers or []).get("Location", "")
                return RedirectResponse(location, status_code=302, headers={"Cache-Control": "no-store"})
            return self._error_page(f"{err.error}: {err.description or 'invalid authorization request'}", 400)

    def _login_page(
        self, pairs: list[tuple[str, str]], csrf: str, client_id: str, *, error: str = "", status: int = 200
    ) -> HTMLResponse:
        e = html.escape
        hidden = "".join(
            f'<input type="hidden" name="{e(k)}" value="{e(v)}">' for k, v in pairs if k not in LOGIN_FIELDS
        )
        redirect = dict(pairs).get("redirect_uri", "")
        parts = urlsplit(redirect)
        target = f" {parts.scheme}://{parts.netloc}" if parts.scheme in ("http", "https") and parts.netloc else ""
        message = f'<p class="error">{e(error)}</p>' if error else ""
        body = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>lakesession: sign in</title><style>{_STYLE}</style></head>
<body><h1>Sign in</h1><p>to continue to <b>{e(client_id)}</b></p>{message}
<form method="post" action="authorize">{hidden}
  <input type="hidden" name="{CSRF_FIELD}" value="{e(csrf)}">
  <label>User name <input name="username" autocomplete="username" required autofocus></label>
  <label>Password <input name="password" type="password" autocomplete="current-password" required></label>
  <button name="action" value="login">Sign in</button> <button name="action" value="deny" formnovalidate>Cancel</button>
</form></body></html>"""
        return HTMLResponse(body, status_code=status, headers=_headers(target))

    def _error_page(self, message: str, status: int) -> HTMLResponse:
        body = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>lakesession: sign-in error</title><style>{_STYLE}</style></head>
<body><h1>Cannot sign in</h1><p class="error">{html.escape(message)}</p></body></html>"""
        return HTMLResponse(body, status_code=status, headers=_headers())

    async def userinfo(self, request: Request) -> Response:
        """OIDC UserInfo for a valid access token of this issuer; 401 ``invalid_token`` otherwise."""
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return _unauthorized("invalid_request", "A bearer access token is required")
        try:
            claims = self.issuer.verify(token.strip())
        except NotAuthorized:
            return _unauthorized("invalid_token", "The access token is invalid or expired")
        return JSONResponse(dict(user_info(str(claims["sub"]))), headers={"Cache-Control": "no-store"})


def _cookie_name(request: Request) -> str:
    return f"__Host-{CSRF_COOKIE}" if request.url.scheme == "https" else CSRF_COOKIE


def _unauthorized(error: str, description: str) -> JSONResponse:
    return JSONResponse(
        {"error": error, "error_description": description},
        status_code=401,
        headers={"WWW-Authenticate": f'Bearer error="{error}", error_description="{description}"'},
    )
