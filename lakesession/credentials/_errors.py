"""The credentials layer's exceptions, defined in ``lakesession.errors`` (the whole tree is drawn there).

```
LakesessionError
└── CredentialsError               lakesession.credentials: a table's vended storage credentials
    ├── CredentialsRevokedError    the catalog refused a refresh (403): the grant is gone
    └── CredentialsRefreshError    no usable credentials: expired and the catalog could not refresh them
```

Messages name the table, never a key, secret or token, and end with a hint.
"""

from __future__ import annotations

from ..errors import RELOAD_HINT, CredentialsError, CredentialsRefreshError, CredentialsRevokedError, StorageAccessError

__all__ = [
    "RELOAD_HINT",
    "CredentialsError",
    "CredentialsRefreshError",
    "CredentialsRevokedError",
    "StorageAccessError",
]
