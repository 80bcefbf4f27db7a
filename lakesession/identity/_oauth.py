"""Token-endpoint calls through authlib's httpx ``OAuth2Client``, with failures sorted out.

``oauth_client`` builds the client (client authentication per RFC 6749 §2.3:
``client_secret_basic`` with a secret, ``none`` without). ``call`` runs one
request and turns what can go wrong into: ``_Transient`` (retry later),
``_OAuthRejected`` (the issuer said no — the caller decides what that means)
or ``IdentityError``. No message ever includes a request or response body.
"""

from __future__ import annotations

import email.utils
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import httpx
from authlib.deprecate import AuthlibDeprecationWarning
from authlib.integrations.base_client import OAuthError

with warnings.catch_warnings():  # authlib >= 1.7 warns when it falls back from httpx2 to httpx
    warnings.simplefilter("ignore", AuthlibDeprecationWarning)
    from authlib.integrations.httpx_client import OAuth2Client

try:  # the module authlib's client is built on (httpx2 when installed, else httpx)
    import httpx2 as _client_httpx  # type: ignore[import-not-found,unused-ignore]  # present or not by environment
except ImportError:  # pragma: no cover - depends on the environment
    _client_httpx = httpx
STATUS_ERRORS = (httpx.HTTPStatusError, _client_httpx.HTTPStatusError)
TRANSPORT_ERRORS = (httpx.TransportError, _client_httpx.TransportError)

from ._errors import IdentityError, _OAuthRejected, _Transient  # noqa: E402 - after the optional httpx2 probe

DEVICE_CODE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
TOKEN_EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
DEFAULT_TIMEOUT = 30.0
TRANSIENT_OAUTH_ERRORS = frozenset({"temporarily_unavailable", "server_error"})


def oauth_client(
    client_id: str,
    client_secret: str | None = None,
    *,
    scope: str | None = None,
    http_options: Mapping[str, Any] | None = None,
) -> OAuth2Client:
    """An authlib ``OAuth2Client`` (an ``httpx.Client``); ``http_options`` go to httpx (transport, verify, …)."""
    options = {"timeout": DEFAULT_TIMEOUT, **(http_options or {})}
    return OAuth2Client(client_id=client_id, client_secret=client_secret, scope=scope, **options)


def transient_status(status: int) -> bool:
    return status >= 500 or status in (408, 429)


def retry_after(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks for (delta-seconds or an HTTP date, RFC 9110 §10.2.3); None if absent
    or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - time.time())


def busy(url: str, response: Any) -> _Transient:
    """A transient HTTP answer (5xx, 408, 429) as ``_Transient``, with its status, Retry-After and OAuth error."""
    status = int(response.status_code)
    error = None
    try:
        body = response.json()
        if isinstance(body, dict) and isinstance(body.get("error"), str):
            error = body["error"][:64]
    except ValueError:
        pass
    return _Transient(f"{url} answered HTTP {status}", status, retry_after(response.headers.get("retry-after")), error)


def call(url: str, request: Callable[[], Any]) -> dict[str, Any]:
    """Run one token-endpoint request (``request()``, e.g. ``client.fetch_token(...)``) and sort its failures."""
    try:
        return dict(request())
    except OAuthError as exc:
        error = str(getattr(exc, "error", "") or "oauth_error")
        description = getattr(exc, "description", None)
        if error in TRANSIENT_OAUTH_ERRORS:
            raise _Transient(f"{url} answered {error}") from None
        raise _OAuthRejected(error, description) from None
    except STATUS_ERRORS as exc:
        status = exc.response.status_code
        if transient_status(status):
            raise busy(url, exc.response) from None
        raise IdentityError(
            f"{url} answered HTTP {status} without an OAuth error. Check that this URL is the issuer's token endpoint."
        ) from None
    except TRANSPORT_ERRORS as exc:
        why = f"{type(exc).__name__}: {exc}"
        raise _Transient(f"cannot reach {url} ({why})", unreached=(url, why)) from None
    except ValueError:
        raise IdentityError(
            f"{url} did not answer with a JSON token response. Check that this URL is the issuer's token endpoint."
        ) from None


def post_form(client: OAuth2Client, url: str, data: dict[str, str], auth_method: str) -> dict[str, Any]:
    """POST a form authenticated as the client (authlib's client auth); the JSON answer, errors sorted like ``call``."""

    def send() -> dict[str, Any]:
        resp = client.request(
            "POST",
            url,
            data=data,
            withhold_token=True,
            auth=client.client_auth(auth_method),
            headers={"Accept": "application/json", "Content-Type": "application/x-www-form-urlencoded;charset=UTF-8"},
        )
        if transient_status(resp.status_code):
            resp.raise_for_status()
        try:
            body = resp.json()
        except ValueError:
            resp.raise_for_status()
            raise
        if not isinstance(body, dict):
            raise ValueError("not a JSON object")
        if "error" in body:
            raise OAuthError(error=body["error"], description=body.get("error_description"))
        resp.raise_for_status()
        return body

    return call(url, send)
