"""Iceberg REST storage-credential keys of the three clouds, written once (a leaf module).

Both halves need them: the reference catalog vends them, the client's credential store, refresher and
gateway read their expiry and refresh endpoints. Names as Iceberg Java 1.10-1.12 defines them
(``S3FileIOProperties``, ``AzureProperties``, ``GCPProperties``); ADLS keys end with the account host
(``adls.sas-token.<account>.dfs.core.windows.net``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CLIENT_REFRESH = "client.refresh-credentials-endpoint"  # S3 (and lakesession's own client, any cloud)
S3_EXPIRES_MS = "s3.session-token-expires-at-ms"
ADLS_SAS = "adls.sas-token."
ADLS_SAS_EXPIRES_MS = "adls.sas-token-expires-at-ms."
ADLS_CONNECTION = "adls.connection-string."
ADLS_REFRESH = "adls.refresh-credentials-endpoint"
GCS_TOKEN = "gcs.oauth2.token"
GCS_TOKEN_EXPIRES_MS = "gcs.oauth2.token-expires-at"
GCS_REFRESH = "gcs.oauth2.refresh-credentials-endpoint"
REFRESH_KEYS = (CLIENT_REFRESH, ADLS_REFRESH, GCS_REFRESH)
# lakesession's own key beside a vended credential: what it allows ("read" or "read-write"), so a client refuses a
# write through read-only credentials before any file is written (catalogs that do not say change nothing)
STORAGE_ACCESS = "lakesession.storage-access"
READ_ONLY_ACCESS, READ_WRITE_ACCESS = "read", "read-write"
# substrings of keys that carry a credential (any cloud): a config holding one vends something
CREDENTIAL_MARKERS = ("access-key-id", "secret-access-key", "session-token", "sas-token.", "oauth2.token")


def is_expiry_key(key: str) -> bool:
    """Whether ``key`` states a vended credential's expiry in epoch milliseconds (any cloud)."""
    return key.endswith("expires-at-ms") or key.startswith(ADLS_SAS_EXPIRES_MS) or key == GCS_TOKEN_EXPIRES_MS


def expiry_seconds(config: Mapping[str, Any]) -> float | None:
    """The earliest expiry a credential config states, as epoch seconds (None: it states none)."""
    times = [int(v) / 1000 for k, v in config.items() if is_expiry_key(str(k)) and str(v).strip().isdigit()]
    return min(times) if times else None


def holds_credential(config: Mapping[str, Any]) -> bool:
    """Whether a config carries vended storage credentials (S3 keys, an ADLS SAS, a GCS token)."""
    return any(m in str(k) and not is_expiry_key(str(k)) for k in config for m in CREDENTIAL_MARKERS)


def refresh_endpoint(config: Mapping[str, Any]) -> str | None:
    """The refresh endpoint a table config names (lakesession's, else the cloud's own key)."""
    for key in REFRESH_KEYS:
        value = config.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def cloud_of(location: str) -> str:
    """``s3``, ``adls``, ``gcs`` or ``other`` for a storage location."""
    if location.startswith(("s3://", "s3a://", "s3n://")):
        return "s3"
    if location.startswith(("abfss://", "abfs://", "wasbs://", "wasb://")):
        return "adls"
    if location.startswith("gs://"):
        return "gcs"
    return "other"
