"""The identity layer's exceptions, defined in ``lakesession.errors`` (the whole tree is drawn there).

The two private ones below never leave the package: the flows turn them into ``IdentityError``s.

Messages never contain a secret; each one says how to fix the problem.
"""

from __future__ import annotations

from ..errors import (
    DeviceFlowError,
    IdentityError,
    IssuerUnreachableError,
    LoginRequiredError,
    ScopeError,
    SignInBusyError,
    TokenRefreshError,
)

__all__ = [
    "LOGIN_HINT",
    "DeviceFlowError",
    "IdentityError",
    "IssuerUnreachableError",
    "LoginRequiredError",
    "ScopeError",
    "SignInBusyError",
    "TokenRefreshError",
]

LOGIN_HINT = "run `%lakesession login` in a notebook, or call lakesession.connect(...) again (a new device login)"


class _Transient(Exception):
    """Internal: a failure worth retrying (connection error, 5xx, 429, ``temporarily_unavailable``).

    ``status`` is the HTTP status when the server answered (None: no answer, e.g. a refused connection),
    ``retry_after`` its ``Retry-After`` in seconds when it said one, ``error`` its OAuth error code if any."""

    def __init__(
        self,
        reason: str,
        status: int | None = None,
        retry_after: float | None = None,
        error: str | None = None,
        *,
        unreached: tuple[str, str] | None = None,
    ):
        super().__init__(reason)
        self.reason = reason
        self.unreached = unreached  # (url, why) when nothing answered there: a wrong address if it never did
        self.status = status
        self.retry_after = retry_after
        self.error = error


class _OAuthRejected(Exception):
    """Internal: the token endpoint answered with an RFC 6749 §5.2 error."""

    def __init__(self, error: str, description: str | None):
        super().__init__(error)
        self.error = error
        self.description = description

    def detail(self) -> str:
        return f"{self.error}: {self.description}" if self.description else self.error
