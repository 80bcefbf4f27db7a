"""Forwarding one request upstream as the user, and turning the gateway's own failures into clean errors.

The gateway must never answer 500 for a failure of its own: Iceberg turns a 500 on a commit into
``CommitStateUnknownException`` although nothing reached the catalog. So:

* the user's token cannot be obtained (issuer down, any token-source error) → 503 + Retry-After;
  a dead login (the user must log in again) → 401 naming the fix;
* the catalog cannot be reached (nothing was sent) → 503 + Retry-After;
* ... unless this session never reached it (nor where its tokens come from): a wrong address, not an outage →
  400 naming the URL and the setting to check, which Iceberg does not retry (it retries 429/502/503/504: twelve
  503s cost a newcomer 412 s before the first line of the error);
* the catalog stopped answering *after* a mutation was sent → 504 (the outcome is unknown: that
  is what Iceberg's ``CommitStateUnknownException`` is for), a read → 503.

Iceberg's HTTP client retries 503 with the Retry-After delay *instead of* its exponential backoff,
so the delay grows with the outage (the time it has lasted so far, 1-60 s): five retries then
span about as long as Iceberg's own backoff and a 20 s catalog restart costs no query.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

logger = logging.getLogger("lakesession.gateway")

Reply = tuple[int, bytes, dict[str, str]]
FORWARD_RESPONSE_HEADERS = ("content-type", "etag", "cache-control", "www-authenticate", "x-request-id", "retry-after")
# httpx errors raised before any byte of the request left: safe to retry whatever the method
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)
_SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
_SAFE_POSTS = ("sign", "metrics")  # last path segments: remote signing and scan reports change nothing, safe to repeat


def error_reply(status: int, type_: str, message: str, retry_after: int | None = None) -> Reply:
    """An Iceberg ``ErrorModel`` reply."""
    body = json.dumps({"error": {"message": message, "type": type_, "code": status}}).encode()
    headers = {"content-type": "application/json"}
    if retry_after is not None:
        headers["retry-after"] = str(retry_after)
    return status, body, headers


class Outage:
    """How long something upstream has been failing; the Retry-After to answer meanwhile."""

    def __init__(self) -> None:
        self._since: float | None = None
        self._lock = threading.Lock()

    def failed(self) -> int:
        now = time.monotonic()
        with self._lock:
            if self._since is None:
                self._since = now
            return max(1, min(60, math.ceil(now - self._since)))

    def recovered(self) -> None:
        self._since = None


def _client_factory(timeout: float) -> httpx.Client:
    # idle connections are dropped before a uvicorn catalog (keep-alive 5 s) closes them: a commit sent on a
    # connection the server is closing would otherwise look like "sent, no answer" (504, CommitStateUnknown)
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=32, keepalive_expiry=4.0)
    return httpx.Client(timeout=timeout, limits=limits)


@dataclass
class Upstream:
    """Where and as whom to forward. ``base`` may be a callable so the catalog can finish starting
    while the JVM launches (the first forwarded call waits for it). The HTTP client is built on first
    use: building it (TLS context) costs start-up time the JVM launch does not need to wait for."""

    base: str | Callable[[], str]
    token: Callable[[], str]
    invalidate: Callable[[], None]
    timeout: float = 60.0
    _client: httpx.Client | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    issuer_outage: Outage = field(default_factory=Outage, repr=False)
    catalog_outage: Outage = field(default_factory=Outage, repr=False)
    reached: bool = False  # whether the catalog ever answered through here: only then is a failure an outage

    @property
    def base_url(self) -> str:
        return (self.base() if callable(self.base) else self.base).rstrip("/")

    @property
    def client(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = _client_factory(self.timeout)
            return self._client

    def warm(self) -> None:
        """Build the HTTP client in the background (httpcore's imports take ~0.1-0.3 s): neither the
        gateway's start nor the JVM's first request waits for it."""
        threading.Thread(target=lambda: self.client, name="lakesession-gateway-warm", daemon=True).start()

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def _bearer(self) -> tuple[str | None, Reply | None]:
        """The user's current token, or the reply explaining why there is none."""
        try:
            token = self.token()
        except Exception as exc:  # any failure of the token source is the gateway's, never the catalog's
            return None, self._token_failure(exc)
        self.issuer_outage.recovered()
        return token, None

    def _token_failure(self, exc: Exception) -> Reply:
        from ..identity._errors import (  # loaded already when a source raises one
            IdentityError,
            IssuerUnreachableError,
            TokenRefreshError,
        )
        from ._nologin import no_login_message, unreached_message

        if isinstance(exc, IssuerUnreachableError):  # no token ever came from there: a wrong address, say so now
            logger.info("never reached the token endpoint %s; answering 400 (no retries)", exc.url)
            return error_reply(400, "BadRequestException", unreached_message(exc))
        if isinstance(exc, IdentityError) and not isinstance(exc, TokenRefreshError):
            # a dead login or a rejected client: retrying cannot help, the user must act (the message says how)
            # info, not a warning: the query's own error says it, in one line (a warning is a second line on stderr)
            logger.info("no usable login for the catalog: %s", type(exc).__name__)
            # Iceberg prefixes "Not authorized: " itself; Spark's error conversion raises ``exc``'s class again
            return error_reply(401, "NotAuthorizedException", no_login_message(exc))
        retry_after = self.issuer_outage.failed()
        # identity errors are secret-free by contract; anything else is logged by type and frames only
        detail = str(exc) if isinstance(exc, IdentityError) else type(exc).__name__
        logger.warning(
            "could not get the user's token (%s); answering 503, retry in %d s\n%s",
            type(exc).__name__,
            retry_after,
            "" if isinstance(exc, IdentityError) else "".join(traceback.format_tb(exc.__traceback__)),
        )
        msg = (
            f"The lakesession gateway could not get the user's access token ({detail}); nothing was sent to "
            f"the catalog. Retry in {retry_after} s: the session recovers when the issuer is reachable again."
        )
        return error_reply(503, "ServiceUnavailableException", msg, retry_after)

    def forward(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Reply:
        """Send ``path`` (raw, still encoded) and ``query`` (raw) upstream as the user."""
        base = httpx.URL(self.base_url)
        target = (
            base.raw_path.rstrip(b"/") + path.encode("latin-1") + (b"?" + query.encode("latin-1") if query else b"")
        )
        url = base.copy_with(raw_path=target)  # byte for byte: no decode/re-encode round trip
        return self.send(method, url, path, headers, body)

    def same_origin(self, url: str) -> bool:
        """Whether ``url`` is on the catalog's own origin (scheme, host, port): the only place the
        user's token may be sent."""
        try:
            there, here = httpx.URL(url), httpx.URL(self.base_url)
        except (httpx.InvalidURL, TypeError):
            return False
        return (there.scheme, there.host, there.port) == (here.scheme, here.host, here.port) and not there.userinfo

    def send(self, method: str, url: httpx.URL, path: str, headers: dict[str, str], body: bytes) -> Reply:
        """Send to ``url`` as the user (callers keep it on the catalog's origin); ``path`` names the call in errors."""
        for attempt in (1, 2):
            token, failure = self._bearer()
            if failure is not None:
                return failure
            h = {**headers, **({"Authorization": f"Bearer {token}"} if token else {})}  # '': no identity
            try:
                r = self.client.request(method, url, headers=h, content=body or None)
            except httpx.HTTPError as exc:
                return self._catalog_failure(method, path, exc)
            self.catalog_outage.recovered()
            self.reached = True
            if r.status_code == 401 and attempt == 1:
                self.invalidate()  # the token may have been revoked or expired early: fetch a new one once
                continue
            out_headers = {k: v for k, v in r.headers.items() if k.lower() in FORWARD_RESPONSE_HEADERS}
            return r.status_code, r.content, out_headers
        raise AssertionError("unreachable")

    def _catalog_failure(self, method: str, path: str, exc: httpx.HTTPError) -> Reply:
        kind = type(exc).__name__
        where = self.base_url
        if not self.reached and isinstance(exc, _NOT_SENT):
            from ..errors import CatalogUnreachableError
            from ._nologin import unreached_message

            logger.info(
                "never reached the catalog at %s: %s %s (%s); answering 400 (no retries)", where, method, path, kind
            )
            return error_reply(
                400, "BadRequestException", unreached_message(CatalogUnreachableError(where, f"{kind}: {exc}"))
            )
        if isinstance(exc, _NOT_SENT) or method in _SAFE_METHODS or path.split("/")[-1] in _SAFE_POSTS:
            retry_after = self.catalog_outage.failed()
            logger.warning("catalog unreachable: %s %s (%s); answering 503", method, path, kind)
            msg = f"Catalog at {where} is unreachable ({kind}); retry in {retry_after} s, when it is back"
            return error_reply(503, "ServiceUnavailableException", msg, retry_after)
        logger.warning("catalog stopped answering: %s %s (%s); outcome unknown, answering 504", method, path, kind)
        msg = (
            f"Catalog at {where} stopped answering after the request was sent ({kind}): it may or may not "
            "have been applied. Reload the table to see its state before retrying."
        )
        return error_reply(504, "ServiceFailureException", msg)


async def send_reply(send: Any, method: str, reply: Reply) -> None:
    """Send ``reply`` on an ASGI connection (no body for HEAD, 204 and 304)."""
    status, content, out_headers = reply
    body = b"" if method == "HEAD" or status in (204, 304) else content
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in out_headers.items() if k != "content-length"]
    if status not in (204, 304):
        headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
