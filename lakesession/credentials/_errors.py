"""The credentials layer's exceptions (see ``lakesession.errors`` for the whole hierarchy).

```
LakesessionError
└── CredentialsError               lakesession.credentials: a table's vended storage credentials
    ├── CredentialsRevokedError    the catalog refused a refresh (403): the grant is gone
    └── CredentialsRefreshError    no usable credentials: expired and the catalog could not refresh them
```

Messages name the table, never a key, secret or token, and end with a hint.
"""

from __future__ import annotations

from ..errors import LakesessionError

RELOAD_HINT = "reload the table (session.table(...)) once the catalog is reachable"


class CredentialsError(LakesessionError):
    """A table's vended storage credentials are missing or unusable."""

    def __init__(self, message: str, table: str | None = None):
        super().__init__(message)
        self.table = table


class CredentialsRevokedError(CredentialsError):
    """The catalog refused to refresh the table's credentials (HTTP 403): access was revoked."""

    def __init__(self, table: str, detail: str | None = None):
        reason = f" ({detail})" if detail else ""
        super().__init__(
            f"Access to table {table} was revoked: the catalog refused to refresh its storage credentials{reason}. "
            f"Ask for the grant again, then reload the table with session.table({table!r}).",
            table,
        )


class CredentialsRefreshError(CredentialsError):
    """The table's credentials expired and could not be refreshed (catalog unreachable or failing)."""

    def __init__(self, table: str, detail: str | None = None):
        reason = f": {detail}" if detail else ""
        super().__init__(
            f"The storage credentials of table {table} expired and could not be refreshed{reason}. "
            f"Later reads try again; or {RELOAD_HINT}.",
            table,
        )
