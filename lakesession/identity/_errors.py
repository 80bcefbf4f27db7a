"""The identity layer's exceptions (see ``lakesession.errors`` for the whole hierarchy).

Messages never contain a secret; each one says how to fix the problem.
"""

from __future__ import annotations

from ..errors import LakesessionError

LOGIN_HINT = "run `lakesession login` (or `%lakesession login` in a notebook), or call session.login()"


class IdentityError(LakesessionError):
    """The user's token could not be obtained or used."""


class LoginRequiredError(IdentityError):
    """There is no usable login (none yet, or the refresh token is dead): the user must log in again."""


class TokenRefreshError(IdentityError):
    """The issuer could not be reached or failed (transient): later calls try again and recover."""


class DeviceFlowError(IdentityError):
    """The device-code login (RFC 8628) did not complete: denied, expired or timed out."""


class _Transient(Exception):
    """Internal: a failure worth retrying (connection error, 5xx, 429, ``temporarily_unavailable``)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class _OAuthRejected(Exception):
    """Internal: the token endpoint answered with an RFC 6749 §5.2 error."""

    def __init__(self, error: str, description: str | None):
        super().__init__(error)
        self.error = error
        self.description = description

    def detail(self) -> str:
        return f"{self.error}: {self.description}" if self.description else self.error
