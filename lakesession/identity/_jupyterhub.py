"""``JupyterHubToken``: the hub user's own SSO token, read from their ``auth_state``.

Inside a single-user server the hub provides ``JUPYTERHUB_API_URL``,
``JUPYTERHUB_USER`` and ``JUPYTERHUB_API_TOKEN``. The authenticator (e.g.
oauthenticator's ``GenericOAuthenticator`` with ``enable_auth_state``) keeps the
user's tokens in ``auth_state`` and refreshes them (``refresh_pre_spawn``,
``auth_refresh_age``). This source re-reads ``auth_state`` before the access
token expires.

It reads ``GET {api}/users/{name}``: ``GET {api}/user`` returns
``auth_state: null`` even with the right scope (a known JupyterHub bug). The
server's token needs the ``admin:auth_state!user`` scope (and
``read:users!user``) on the server role.

Optionally (``token_url`` + ``client_id``), when the hub still holds an expired
access token, the refresh token from ``auth_state`` is used directly at the
issuer. With rotating refresh tokens this spends the hub's copy, so enable it
only when the hub does not refresh tokens itself.

``principal_claim`` names the claim shown as the principal (``describe()``, widgets): the hub's
``lakesession.hub.configure(principal_claim=...)`` passes the catalog's setting as
``LAKESESSION_PRINCIPAL_CLAIM``.

``initial_token`` (e.g. what ``lakesession.hub.auth_state_hook`` put into the
server's environment) is served until it is due for a refresh, saving the first
round trip to the hub.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx

from ._base import Token, TokenSource
from ._claims import claim_str
from ._errors import IdentityError, LoginRequiredError, _OAuthRejected, _Transient
from ._oauth import DEFAULT_TIMEOUT, call, oauth_client, transient_status

logger = logging.getLogger("lakesession.identity")

AUTH_STATE_HINT = (
    "Give the single-user server's API token the `admin:auth_state!user` scope (and `read:users!user`), "
    "e.g. c.JupyterHub.load_roles = [{'name': 'server', 'scopes': ['inherit', 'admin:auth_state!user', "
    "'read:users!user']}], and turn on c.Authenticator.enable_auth_state = True (needs JUPYTERHUB_CRYPT_KEY); "
    "then log out of the hub and in again so that auth_state is stored."
)
DEFAULT_REREAD = 300.0


class JupyterHubToken(TokenSource):
    """The access token in the hub user's ``auth_state`` (keys configurable), re-read before it expires."""

    kind = "jupyterhub"

    def __init__(
        self,
        *,
        api_url: str | None = None,
        user: str | None = None,
        api_token: str | None = None,
        access_token_key: str = "access_token",
        refresh_token_key: str = "refresh_token",
        expires_at_key: str = "expires_at",
        reread_interval: float = DEFAULT_REREAD,
        token_url: str | None = None,
        client_id: str | None = None,
        client_secret: str | None = None,
        http_options: Mapping[str, Any] | None = None,
        refresh_margin: float | None = None,
        issuer: str | None = None,
        initial_token: str | None = None,
        initial_expires_at: float | None = None,
        principal_claim: str = "sub",
    ):
        api_url = api_url or os.environ.get("JUPYTERHUB_API_URL")
        user = user or os.environ.get("JUPYTERHUB_USER")
        api_token = api_token or os.environ.get("JUPYTERHUB_API_TOKEN")
        missing = [
            name
            for name, value in (
                ("JUPYTERHUB_API_URL", api_url),
                ("JUPYTERHUB_USER", user),
                ("JUPYTERHUB_API_TOKEN", api_token),
            )
            if not value
        ]
        if missing:
            raise IdentityError(
                f"Not inside a JupyterHub single-user server: {', '.join(missing)} not set. "
                "Run in a hub-spawned server, or pass api_url=, user=, api_token=."
            )
        assert api_url and user and api_token
        super().__init__(refresh_margin=refresh_margin, issuer_hint=issuer)
        self._api_url = api_url.rstrip("/")
        self._user = user
        self._api_token = api_token
        self._keys = (access_token_key, refresh_token_key, expires_at_key)
        self._principal_claim = principal_claim or "sub"
        self._reread = float(reread_interval)
        self._http = httpx.Client(**{"timeout": DEFAULT_TIMEOUT, **(http_options or {})})
        self._direct = (
            (token_url, oauth_client(client_id, client_secret, http_options=http_options))
            if (token_url and client_id)
            else None
        )
        if initial_token:
            first = Token.from_expiry(initial_token, initial_expires_at)
            if not first.expired(time.monotonic()):
                self._install(first, save=False)

    @property
    def principal(self) -> str | None:
        """The token's ``principal_claim`` (e.g. Keycloak's ``preferred_username``: its ``sub`` is a UUID), else
        ``sub`` — unverified, for display only (the catalog decides who the token names)."""
        cur = self._current
        if cur is None:
            return None
        return claim_str(cur.claims, self._principal_claim) or claim_str(cur.claims, "sub")

    @property
    def _where(self) -> str:
        return f"the JupyterHub API at {self._api_url}"

    def _describe_extra(self) -> dict[str, Any]:
        return {"hub_user": self._user}

    def _due(self, token: Token, now: float) -> bool:
        if token.deadline is None:  # opaque token without a known expiry: re-read now and then
            return now - token.obtained >= self._reread
        return super()._due(token, now)

    def _obtain(self, current: Token | None) -> Token:
        token = self._read_hub()
        now = time.monotonic()
        newer = current is None or (
            token.access_token != current.access_token
            and (token.deadline is None or current.deadline is None or token.deadline > current.deadline)
        )
        if newer and not token.expired(now):
            return token
        # the hub holds nothing newer than what we have: it has not refreshed the token (yet)
        refresh = (current.refresh_token if current is not None else None) or token.refresh_token
        if self._direct is not None and refresh:
            return self._refresh_directly(refresh)
        raise _Transient(
            "the hub has not refreshed the user's token yet (make the authenticator refresh it: "
            "Authenticator.refresh_pre_spawn / auth_refresh_age, or log in to the hub again)"
        )

    def _read_hub(self) -> Token:
        url = f"{self._api_url}/users/{quote(self._user, safe='')}"
        try:
            resp = self._http.get(
                url, headers={"Authorization": f"token {self._api_token}", "Accept": "application/json"}
            )
        except httpx.TransportError as exc:
            raise _Transient(f"cannot reach {url} ({type(exc).__name__}: {exc})") from None
        if transient_status(resp.status_code):
            raise _Transient(f"{url} answered HTTP {resp.status_code}")
        if resp.status_code in (401, 403):
            raise IdentityError(
                f"The hub refused to show user {self._user!r} (HTTP {resp.status_code}). " + AUTH_STATE_HINT
            )
        if resp.status_code == 404:
            raise IdentityError(
                f"The hub knows no user {self._user!r} at {url} (HTTP 404). "
                "Check JUPYTERHUB_USER and JUPYTERHUB_API_URL (it ends in /hub/api)."
            )
        if resp.status_code != 200:
            raise IdentityError(f"The hub answered HTTP {resp.status_code} for {url}. Check JUPYTERHUB_API_URL.")
        try:
            body = resp.json()
        except ValueError:
            raise IdentityError(f"The hub did not answer with JSON at {url}. Check JUPYTERHUB_API_URL.") from None
        auth_state = body.get("auth_state") if isinstance(body, dict) else None
        if not isinstance(auth_state, dict):
            raise IdentityError(f"The hub returned no auth_state for user {self._user!r}. " + AUTH_STATE_HINT)
        access_key, refresh_key, expires_key = self._keys
        access = auth_state.get(access_key)
        if not isinstance(access, str) or not access:
            raise IdentityError(
                f"The user's auth_state has no {access_key!r} (it has: "
                f"{', '.join(sorted(map(str, auth_state))) or 'nothing'}). Pass "
                "access_token_key= naming the key the authenticator stores the access token under."
            )
        expires = auth_state.get(expires_key)
        expires_at = float(expires) if isinstance(expires, (int, float)) and not isinstance(expires, bool) else None
        refresh = auth_state.get(refresh_key)
        return Token.from_expiry(access, expires_at, refresh_token=refresh if isinstance(refresh, str) else None)

    def _refresh_directly(self, refresh: str) -> Token:
        assert self._direct is not None
        url, client = self._direct
        try:
            response = call(url, lambda: client.refresh_token(url, refresh_token=refresh))
        except _OAuthRejected as exc:
            raise LoginRequiredError(
                f"The hub's token has expired and its refresh token was rejected by {url} "
                f"({exc.detail()}). Log out of the hub and in again."
            ) from None
        logger.info("refreshed the hub user's token directly at %s", url)
        return Token.from_response(response, previous_refresh=refresh)

    def close(self) -> None:
        self._http.close()
        if self._direct is not None:
            self._direct[1].close()
