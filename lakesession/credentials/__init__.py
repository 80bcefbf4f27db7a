"""Per-table vended storage credentials: the store, prefix matching, refresh ahead of expiry, FileIOs.

* ``CredentialStore`` — thread-safe per-table state (prefixes, mode, expiry, state,
  last refresh, last error); ``match(path)`` picks the longest prefix on a path
  boundary; ``snapshot()`` gives secret-free rows for DataFrames and widgets.
* Refreshing is lazy: every file open asks ``store.credential_for(table, path)``,
  which refreshes through the catalog's ``client.refresh-credentials-endpoint`` once
  the credentials are within min(300 s, 20 % of their lifetime) of expiry (single flight
  per table; transient failures keep serving still-valid credentials). ``refresh_all()``
  refreshes on demand; no background threads.
* ``VendedFileIO`` — pyiceberg ``PyArrowFileIO`` using the store; ``SigningFileIO`` — pyiceberg
  ``FsspecFileIO`` whose S3 requests the catalog signs (remote signing, no credentials).

Secrets (keys, session tokens, the user's token) appear in no repr, snapshot or message.
"""

from ._errors import CredentialsError, CredentialsRefreshError, CredentialsRevokedError, StorageAccessError
from ._refresh import Refresher, resolve_endpoint
from ._states import (
    EXPIRED,
    FAILED,
    READ,
    REFRESHING,
    REVOKED,
    STATES,
    UNKNOWN,
    VALID,
    WRITE,
    StorageCredential,
    TableCredentials,
    refresh_margin,
)
from ._store import CredentialStore, covers, is_secret_key, public_config

__all__ = [
    "EXPIRED",
    "FAILED",
    "READ",
    "REFRESHING",
    "REVOKED",
    "STATES",
    "UNKNOWN",
    "VALID",
    "WRITE",
    "CredentialStore",
    "CredentialsError",
    "CredentialsRefreshError",
    "CredentialsRevokedError",
    "Refresher",
    "SigningFileIO",
    "StorageAccessError",
    "StorageCredential",
    "TableCredentials",
    "VendedFileIO",
    "covers",
    "is_secret_key",
    "public_config",
    "refresh_margin",
    "resolve_endpoint",
]


def __getattr__(name: str) -> object:  # the FileIOs import pyarrow/fsspec: only when asked for
    if name in ("VendedFileIO", "SigningFileIO"):
        from . import _fileio

        return getattr(_fileio, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
