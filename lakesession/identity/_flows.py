"""Token sources without user interaction: a static token, client credentials, token exchange (RFC 8693)."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping
from typing import Any

from ._base import Token, TokenSource
from ._cache import TokenCache, cache_key
from ._claims import claim_str
from ._errors import IdentityError, LoginRequiredError, TokenRefreshError, _OAuthRejected, _Transient
from ._oauth import ACCESS_TOKEN_TYPE, TOKEN_EXCHANGE_GRANT, call, oauth_client

logger = logging.getLogger("lakesession.identity")


def rejected(
    exc: _OAuthRejected, where: str, client_id: str, *, scope: str | None = None, token_url: str | None = None
) -> IdentityError:
    """An issuer's refusal (other than a dead refresh token) as an ``IdentityError`` with a fix-it hint;
    ``invalid_scope`` as a ``ScopeError`` naming the scope sent and the one expected (``_scopes``)."""
    if exc.error == "invalid_scope" and token_url:
        from ._scopes import scope_error

        return scope_error(exc.detail(), where, scope, token_url, where if where != token_url else None)
    if exc.error in ("invalid_client", "unauthorized_client"):
        hint = f"Check the client id ({client_id!r}) and client secret, and that the client may use this grant."
    elif exc.error in ("invalid_scope", "invalid_target"):
        hint = "Check the requested scope and audience."
    elif exc.error == "unsupported_grant_type":
        hint = "This issuer does not support the grant; choose another flow."
    else:
        hint = "Check the issuer URL and the client's configuration at the issuer."
    return IdentityError(f"The issuer at {where} refused the token request ({exc.detail()}). {hint}")


class _OAuthSource(TokenSource):
    """Shared by the OAuth 2.0 flows: an authlib client, the token endpoint, the optional on-disk cache."""

    def __init__(
        self,
        token_url: str,
        client_id: str,
        client_secret: str | None,
        *,
        issuer: str | None,
        cache: TokenCache | None,
        http_options: Mapping[str, Any] | None,
        refresh_margin: float | None,
    ):
        super().__init__(refresh_margin=refresh_margin, issuer_hint=issuer or token_url)
        self._token_url = token_url
        self._client_id = client_id
        self._client = oauth_client(client_id, client_secret, http_options=http_options)
        self._cache = cache
        self._cache_key = cache_key(issuer or token_url, client_id)
        if cache is not None:
            self._load_cache()

    def _load_cache(self) -> None:
        assert self._cache is not None
        entry = self._cache.load(self._cache_key)
        if not entry or not isinstance(entry.get("access_token"), str):
            return
        expires_at = entry.get("expires_at")
        refresh = entry.get("refresh_token") if isinstance(entry.get("refresh_token"), str) else None
        token = Token.from_expiry(
            entry["access_token"],
            float(expires_at) if isinstance(expires_at, (int, float)) else None,
            refresh_token=refresh,
        )
        self._install(token, save=False)
        logger.debug("loaded a cached token for %s (principal %r)", self._cache_key, self.principal)

    def _saved(self, token: Token) -> None:
        if self._cache is not None:
            self._cache.save(
                self._cache_key,
                {
                    "access_token": token.access_token,
                    "refresh_token": token.refresh_token,
                    "expires_at": token.expires_at,
                    "principal": claim_str(token.claims, "sub"),
                    "saved_at": time.time(),
                },
            )

    def _forget(self) -> None:
        """Drop a dead refresh token from memory and the cache."""
        cur = self._current
        if cur is not None:
            cur.refresh_token = None
        if self._cache is not None:
            self._cache.delete(self._cache_key)

    def _describe_extra(self) -> dict[str, Any]:
        return {"client_id": self._client_id}

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()


class Anonymous(TokenSource):
    """No identity, for a catalog without authentication (local development, Apache's REST fixture).

    ``token()`` is empty and every caller then sends no ``Authorization`` header: nothing is invented,
    and a catalog that does want a login answers 401 (``NotAuthorizedException``) as it would to anyone.
    Chosen explicitly (``connect(identity="none")``), never as a fallback.
    """

    kind = "none"

    def token(self) -> str:
        return ""

    def _obtain(self, current: Token | None) -> Token:  # never called: token() is overridden
        raise IdentityError("no identity (identity='none') has no token to obtain")


class StaticToken(TokenSource):
    """A token handed over as is (``expires_at`` epoch seconds, else the JWT's ``exp``); never refreshed."""

    kind = "static"

    def __init__(self, token: str, *, expires_at: float | None = None):
        if not isinstance(token, str) or not token.strip():
            raise IdentityError("StaticToken needs a non-empty token string. Pass the access token itself.")
        super().__init__()
        self._install(Token.from_expiry(token.strip(), expires_at))

    def _due(self, token: Token, now: float) -> bool:
        return token.expired(now)  # nothing to refresh with: serve it to the last second

    def _obtain(self, current: Token | None) -> Token:
        if self._invalidated:
            why = "was rejected by the server (invalidated)"
        else:
            when = (
                time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(current.expires_at))
                if (current is not None and current.expires_at is not None)
                else "an unknown time"
            )
            why = f"expired at {when}"
        raise LoginRequiredError(
            f"The static access token {why} and cannot be refreshed. Fix: pass a fresh token "
            "(lakesession.connect(token=...) or LAKESESSION_TOKEN), or log in with credential=/issuer= so that "
            "tokens refresh themselves."
        )


class ClientCredentials(_OAuthSource):
    """The client credentials grant (RFC 6749 §4.4): a service principal's own token, re-fetched before expiry."""

    kind = "client_credentials"

    def __init__(
        self,
        token_url: str,
        client_id: str,
        client_secret: str,
        scope: str | None = None,
        audience: str | None = None,
        *,
        issuer: str | None = None,
        cache: TokenCache | None = None,
        http_options: Mapping[str, Any] | None = None,
        refresh_margin: float | None = None,
    ):
        if not client_secret:
            raise IdentityError(
                "ClientCredentials needs a client secret. Pass client_secret=..., "
                "or use DeviceCode to log in as a user."
            )
        super().__init__(
            token_url,
            client_id,
            client_secret,
            issuer=issuer,
            cache=cache,
            http_options=http_options,
            refresh_margin=refresh_margin,
        )
        self._scope = scope
        self._audience = audience

    def _obtain(self, current: Token | None) -> Token:
        url = self._token_url
        try:
            response = call(
                url,
                lambda: self._client.fetch_token(
                    url, grant_type="client_credentials", scope=self._scope, audience=self._audience
                ),
            )
        except _OAuthRejected as exc:
            raise rejected(exc, self._where, self._client_id, scope=self._scope, token_url=url) from None
        token = Token.from_response(response)
        token.refresh_token = None  # nothing to refresh with: the next token is fetched the same way
        return token


class TokenExchange(_OAuthSource):
    """RFC 8693: this client acts for the subject of another source's token (the new token carries ``act``)."""

    kind = "token_exchange"

    def __init__(
        self,
        token_url: str,
        subject: TokenSource,
        client_id: str,
        client_secret: str,
        audience: str | None = None,
        scope: str | None = None,
        *,
        issuer: str | None = None,
        http_options: Mapping[str, Any] | None = None,
        refresh_margin: float | None = None,
    ):
        if not isinstance(subject, TokenSource):
            raise IdentityError(
                "TokenExchange needs a TokenSource as subject, e.g. JupyterHubToken() or DeviceCode(...)."
            )
        super().__init__(
            token_url,
            client_id,
            client_secret,
            issuer=issuer,
            cache=None,
            http_options=http_options,
            refresh_margin=refresh_margin,
        )
        self._subject = subject
        self._scope = scope
        self._audience = audience

    @property
    def subject(self) -> TokenSource:
        return self._subject

    def _obtain(self, current: Token | None) -> Token:
        for attempt in (1, 2):
            try:
                subject_token = self._subject.token()
            except TokenRefreshError as exc:
                raise _Transient(f"the subject's token is unavailable ({exc})") from None
            url = self._token_url
            try:
                response = call(
                    url,
                    functools.partial(
                        self._client.fetch_token,
                        url,
                        grant_type=TOKEN_EXCHANGE_GRANT,
                        subject_token=subject_token,
                        subject_token_type=ACCESS_TOKEN_TYPE,
                        requested_token_type=ACCESS_TOKEN_TYPE,
                        audience=self._audience,
                        scope=self._scope,
                    ),
                )
            except _OAuthRejected as exc:
                if exc.error == "invalid_grant" and attempt == 1:
                    self._subject.invalidate()  # the subject token may just have been revoked or expired
                    continue
                if exc.error == "invalid_grant":
                    raise IdentityError(
                        f"The issuer at {self._where} refused to exchange the subject's token ({exc.detail()}). "
                        "Check that the subject token comes from this issuer and that the client may "
                        "exchange it; log the subject in again if its session ended."
                    ) from None
                if exc.error == "access_denied":
                    raise self._denied(exc) from None
                if exc.error == "invalid_request" and "invalid token" in (exc.description or "").lower():
                    # Keycloak's answer for a subject token whose sign-in session ended (logout, revocation)
                    if attempt == 1:
                        self._subject.invalidate()
                        continue
                    raise LoginRequiredError(
                        f"The issuer at {self._where} refused to exchange the subject's token ({exc.detail()}): its "
                        "sign-in session ended (a logout or an admin revocation); log in again."
                    ) from None
                raise rejected(exc, self._where, self._client_id, scope=self._scope, token_url=url) from None
            token = Token.from_response(response)
            token.refresh_token = None
            return token
        raise AssertionError("unreachable")  # pragma: no cover

    def _denied(self, exc: _OAuthRejected) -> IdentityError:
        """A refused exchange: Keycloak's standard exchange says "Client is not within the token audience"
        when the subject token's ``aud`` does not name this client; the fix is at the issuer."""
        who = self._client_id
        if "audience" in (exc.description or "").lower():
            hint = (
                f"Make the users' tokens name {who!r} in their audience (Keycloak: an audience mapper with "
                f"included.client.audience={who} on the client they log in with), then try again."
            )
        else:
            hint = f"Allow client {who!r} to exchange this subject's tokens at the issuer (its token exchange policy)."
        return IdentityError(
            f"The issuer at {self._where} refused to let client {who!r} exchange the subject's token "
            f"({exc.detail()}). {hint}"
        )

    def _describe_extra(self) -> dict[str, Any]:
        act = self._current.claims.get("act") if self._current is not None else None
        return {
            "client_id": self._client_id,
            "actor": act.get("sub") if isinstance(act, dict) else None,
            "subject_kind": self._subject.kind,
        }
