"""``TokenSource``: one interface for every way of getting the user's access token.

The base class owns the hard part, once for all flows:

* refresh *ahead* of expiry (margin: ``min(60 s, 10 % of the lifetime)``, at
  least 1 s), measured on ``time.monotonic()``;
* single flight: at most one refresh in flight; concurrent callers wait for it
  and share its outcome (one request for any number of threads);
* transient failures (connection errors, 5xx): while the current token is still
  valid it keeps being served and the next attempt is scheduled with
  full-jitter exponential backoff inside its remaining lifetime; once it has
  expired a call retries briefly and then raises ``TokenRefreshError``; later
  calls try again, so the source recovers when the issuer is back.

Subclasses implement ``_obtain(current)``: one network round trip producing a
new ``Token`` (raising ``_Transient`` or an ``IdentityError``).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from ._claims import claim_number, claim_str, unverified_claims
from ._errors import IdentityError, IssuerUnreachableError, TokenRefreshError, _Transient

logger = logging.getLogger("lakesession.identity")

MAX_MARGIN = 60.0
MIN_MARGIN = 1.0
BACKOFF_BASE = 0.5  # seconds; full jitter: uniform(0, min(cap, base * 2**n))
BACKOFF_CAP = 30.0
BLOCKING_RETRIES = 2  # extra attempts inside one call when there is no valid token to fall back on
BLOCKING_CAP = 2.0


class Token:
    """An access token (+ optional refresh token) and when it expires. Its repr shows no secret."""

    __slots__ = ("access_token", "claims", "deadline", "expires_at", "lifetime", "obtained", "refresh_token")

    def __init__(
        self,
        access_token: str,
        *,
        lifetime: float | None,
        refresh_token: str | None = None,
        total_lifetime: float | None = None,
        expires_at: float | None = None,
    ):
        self.access_token = access_token
        self.refresh_token = refresh_token
        self.claims = unverified_claims(access_token)
        now_wall, now_mono = time.time(), time.monotonic()
        self.obtained = now_mono
        # epoch seconds (display, cache): as given, else from the lifetime
        self.expires_at = expires_at if expires_at is not None or lifetime is None else now_wall + lifetime
        self.deadline = None if lifetime is None else now_mono + lifetime  # monotonic
        self.lifetime = total_lifetime if total_lifetime is not None else lifetime

    @classmethod
    def from_response(cls, response: Mapping[str, Any], *, previous_refresh: str | None = None) -> Token:
        """A token endpoint response (RFC 6749 §5.1) as a ``Token``; keeps ``previous_refresh`` unless rotated."""
        access = response.get("access_token")
        if not isinstance(access, str) or not access:
            raise IdentityError(
                "The token endpoint answered without an access_token. "
                "Check that the issuer URL and the grant type are right."
            )
        refresh = response.get("refresh_token")
        refresh = refresh if isinstance(refresh, str) and refresh else previous_refresh
        expires_in = response.get("expires_in")
        try:
            lifetime: float | None = float(expires_in) if expires_in is not None else None
        except (TypeError, ValueError):
            lifetime = None
        if lifetime is None:
            return cls.from_expiry(access, None, refresh_token=refresh)
        return cls(access, lifetime=lifetime, refresh_token=refresh)

    @classmethod
    def from_expiry(cls, access_token: str, expires_at: float | None, *, refresh_token: str | None = None) -> Token:
        """A token whose expiry is an epoch time (given, else the JWT's ``exp``; ``None``: no known expiry)."""
        claims = unverified_claims(access_token)
        exp = expires_at if expires_at is not None else claim_number(claims, "exp")
        if exp is None:
            return cls(access_token, lifetime=None, refresh_token=refresh_token)
        iat = claim_number(claims, "iat")
        total = exp - iat if iat is not None and exp > iat else None
        return cls(
            access_token, lifetime=exp - time.time(), refresh_token=refresh_token, total_lifetime=total, expires_at=exp
        )

    def remaining(self, now: float) -> float | None:
        return None if self.deadline is None else self.deadline - now

    def expired(self, now: float) -> bool:
        return self.deadline is not None and now >= self.deadline

    def __repr__(self) -> str:
        return f"<Token sub={claim_str(self.claims, 'sub')!r} expires_at={self.expires_at!r}>"


def _margin(lifetime: float | None, override: float | None) -> float:
    if override is not None:
        return max(0.0, override)
    if lifetime is None:
        return MIN_MARGIN
    return max(MIN_MARGIN, min(MAX_MARGIN, 0.1 * lifetime))


class TokenSource(ABC):
    """A user's access token, fresh on every ``token()`` call; thread-safe, single-flight refresh."""

    kind: ClassVar[str] = "token"

    def __init__(self, *, refresh_margin: float | None = None, issuer_hint: str | None = None):
        self._refresh_margin = refresh_margin
        self._issuer_hint = issuer_hint  # where tokens come from, for messages and as fallback issuer
        self._state = threading.Lock()  # guards the fields below; never held during I/O
        self._flight = threading.Lock()  # held by the one thread talking to the issuer
        self._current: Token | None = None
        self._invalidated = False
        self._attempts = 0  # finished attempts (success or failure)
        self._failures = 0  # consecutive transient failures
        self._next_attempt = 0.0  # monotonic: no new attempt before this while the token is valid
        self._last_error: Exception | None = None
        self._ever = False  # whether a token was ever obtained: a never-reached address is a mistake, not an outage
        #: the setting that names where tokens come from (messages about an address never reached)
        self.address_setting = "token_url= / issuer= (LAKESESSION_TOKEN_URL / LAKESESSION_ISSUER)"

    # -- public API --------------------------------------------------------------------------
    def token(self) -> str:
        """A fresh access token, refreshed ahead of expiry (see the module docstring)."""
        with self._state:
            served = self._serve(time.monotonic())
            if served is not None:
                return served
            seen = self._attempts
        with self._flight:
            with self._state:
                now = time.monotonic()
                if self._attempts != seen:  # an attempt finished while we waited: share its outcome
                    if self._usable(now):
                        return self._current.access_token  # type: ignore[union-attr]
                    if self._last_error is not None:
                        raise _copy(self._last_error)
                served = self._serve(now)
                if served is not None:
                    return served
            return self._refresh()

    @property
    def principal(self) -> str | None:
        """The token's subject (``sub``), read without verification — for display only."""
        cur = self._current
        return claim_str(cur.claims, "sub") if cur is not None else None

    @property
    def issuer(self) -> str | None:
        cur = self._current
        return (claim_str(cur.claims, "iss") if cur is not None else None) or self._issuer_hint

    @property
    def expires_at(self) -> float | None:
        """Epoch seconds at which the current access token expires (``None``: none yet, or unknown)."""
        cur = self._current
        return cur.expires_at if cur is not None else None

    def invalidate(self) -> None:
        """Force a refresh on the next ``token()`` (e.g. after the server answered 401)."""
        with self._state:
            self._invalidated = True
            self._next_attempt = 0.0

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release HTTP connections (the source stays usable: a later call reconnects)."""

    def describe(self) -> dict[str, Any]:
        """What to show a user: principal, issuer, expiry, kind. Never a secret."""
        return {
            "kind": self.kind,
            "principal": self.principal,
            "issuer": self.issuer,
            "expires_at": self.expires_at,
            **self._describe_extra(),
        }

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in self._describe_extra().items())
        return f"{type(self).__name__}(principal={self.principal!r}, issuer={self.issuer!r}{extra})"

    __str__ = __repr__

    # -- for subclasses ------------------------------------------------------------------------
    @abstractmethod
    def _obtain(self, current: Token | None) -> Token:
        """One round trip to the issuer for a new token; raise ``_Transient`` or an ``IdentityError``."""

    def _describe_extra(self) -> dict[str, Any]:
        return {}

    def _saved(self, token: Token) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Called (outside the state lock) after a new token was installed: e.g. write the cache."""

    def _due(self, token: Token, now: float) -> bool:
        remaining = token.remaining(now)
        return remaining is not None and remaining <= _margin(token.lifetime, self._refresh_margin)

    def _install(self, token: Token, *, save: bool = True) -> None:
        """Make ``token`` current (after a login, a cache load or a refresh); ``save``: call ``_saved``."""
        with self._state:
            self._current = token
            self._invalidated = False
            self._failures = 0
            self._next_attempt = 0.0
            self._last_error = None
            self._attempts += 1
            self._ever = True
        if save:
            self._saved(token)

    @property
    def _where(self) -> str:
        return self._issuer_hint or "the issuer"

    # -- internals ---------------------------------------------------------------------------------
    def _usable(self, now: float) -> bool:
        cur = self._current
        return cur is not None and not self._invalidated and not cur.expired(now)

    def _serve(self, now: float) -> str | None:
        """The current token if no attempt is needed now (state lock held)."""
        if not self._usable(now):
            return None
        cur = self._current
        assert cur is not None
        if not self._due(cur, now) or now < self._next_attempt:
            return cur.access_token
        return None

    def _refresh(self) -> str:
        """One refresh (with short retries when there is nothing valid to fall back on); flight lock held."""
        retries = 0
        while True:
            current = self._current
            try:
                token = self._obtain(current)
            except _Transient as exc:
                if exc.unreached is not None and not self._ever and current is None:
                    # never reached at all: a wrong address is far likelier than an outage, so fail now, in one line
                    url, why = exc.unreached
                    unreached = IssuerUnreachableError(url, why, self.address_setting)
                    self._fail(unreached)
                    raise unreached from None
                with self._state:
                    self._failures += 1
                    now = time.monotonic()
                    if self._usable(now):
                        remaining = current.remaining(now) if current is not None else None
                        delay = random.uniform(0, min(BACKOFF_CAP, BACKOFF_BASE * 2 ** (self._failures - 1)))
                        if remaining is not None:
                            delay = min(delay, max(0.0, remaining / 2))
                        self._next_attempt = now + delay
                        self._attempts += 1
                        logger.warning(
                            "could not refresh the access token at %s (%s); still using the current "
                            "one, valid for %s s more; next attempt in %.1f s",
                            self._where,
                            exc.reason,
                            "?" if remaining is None else f"{remaining:.0f}",
                            delay,
                        )
                        return current.access_token  # type: ignore[union-attr]
                if retries < BLOCKING_RETRIES:
                    retries += 1
                    delay = random.uniform(0, min(BLOCKING_CAP, BACKOFF_BASE * 2 ** (retries - 1)))
                    logger.info("token request to %s failed (%s); retrying in %.1f s", self._where, exc.reason, delay)
                    time.sleep(delay)
                    continue
                err = TokenRefreshError(
                    f"Could not get a fresh access token from {self._where}: {exc.reason}. "
                    f"{self._why_needed(current)} This is usually temporary (the issuer is down or unreachable): "
                    "the session recovers by itself as soon as the issuer is back — retry the operation then."
                )
                self._fail(err)
                raise err from None
            except IdentityError as err:
                self._fail(err)
                raise
            self._install(token)
            logger.debug(
                "obtained a new access token from %s (principal %r, expires_at %s)",
                self._where,
                claim_str(token.claims, "sub"),
                token.expires_at,
            )
            return token.access_token

    def _why_needed(self, current: Token | None) -> str:
        if current is None:
            return "There is no token yet."
        if self._invalidated:
            return "The current token was rejected (invalidated)."
        return "The current token has expired."

    def _fail(self, err: Exception) -> None:
        with self._state:
            self._attempts += 1
            self._last_error = err


def _copy(err: Exception) -> Exception:
    """A fresh exception of the same type and message (each waiter gets its own traceback)."""
    try:
        return type(err)(*err.args)
    except TypeError:  # pragma: no cover - our errors take one message argument
        return err
