"""GCS credential vending: short-lived OAuth tokens per table from a pluggable token source.

Split from ``cloudvending`` (same cache and single-flight rules, ``CloudVendor``): ``DownscopedTokenSource``
(production: Credential Access Boundary) and ``LocalTokenSource`` (emulators, which check no token).
"""

from __future__ import annotations

import datetime as dt
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from .._wire.cloudkeys import CLIENT_REFRESH, GCS_REFRESH, GCS_TOKEN
from .._wire.cloudkeys import GCS_TOKEN_EXPIRES_MS as GCS_TOKEN_EXPIRES
from .cloudvending import GCS_SCHEMES, WRITE, CloudCredential, CloudVendor
from .errors import BadRequest, ServiceUnavailable


# -- Google Cloud Storage ---------------------------------------------------------------------------------
class GcsTokenSource(Protocol):
    """Mints an OAuth access token valid for ``ttl`` seconds on ``gs://bucket/prefix`` (read or read-write)."""

    def token(self, bucket: str, prefix: str, write: bool, ttl: int) -> tuple[str, float]: ...


class LocalTokenSource:
    """Opaque random tokens for emulators (fake-gcs-server accepts any token): what was minted is kept,
    so tests can check that a token reaching the store is one the catalog vended, and when it expires."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.minted: dict[str, tuple[str, bool, float]] = {}  # token -> (gs://bucket/prefix, write, expires_at)

    def token(self, bucket: str, prefix: str, write: bool, ttl: int) -> tuple[str, float]:
        tok = "ya29.local-" + secrets.token_urlsafe(24)
        expires_at = time.time() + ttl
        with self._lock:
            self.minted[tok] = (f"gs://{bucket}/{prefix}", write, expires_at)
        return tok, expires_at

    def __repr__(self) -> str:
        return f"LocalTokenSource({len(self.minted)} minted)"


class DownscopedTokenSource:
    """Production: the catalog's own Google credentials (ADC or a service account), narrowed per table
    with a Credential Access Boundary (google-auth ``downscoped``): ``roles/storage.objectViewer`` (read)
    or ``objectAdmin`` (write) on the bucket, only for objects under the table's prefix.

    Downscoped tokens live as long as the source token (about an hour); ``ttl`` is not shortened."""

    def __init__(self, credentials: Any = None):
        self._credentials = credentials

    @staticmethod
    def boundary(bucket: str, prefix: str, write: bool) -> Any:
        """The Credential Access Boundary for one table: its bucket, objects under its prefix only."""
        from google.auth import downscoped

        role = "inRole:roles/storage.objectAdmin" if write else "inRole:roles/storage.objectViewer"
        under = prefix.strip("/") + "/"
        rule = downscoped.AccessBoundaryRule(
            available_resource=f"//storage.googleapis.com/projects/_/buckets/{bucket}",
            available_permissions=[role],
            availability_condition=downscoped.AvailabilityCondition(
                expression=(
                    f"resource.name.startsWith('projects/_/buckets/{bucket}/objects/{under}') || "
                    f"api.getAttribute('storage.googleapis.com/objectListPrefix', '').startsWith('{under}')"
                ),
                title="lakesession table prefix",
            ),
        )
        return downscoped.CredentialAccessBoundary(rules=[rule])

    def token(self, bucket: str, prefix: str, write: bool, ttl: int) -> tuple[str, float]:
        import google.auth
        import google.auth.transport.requests
        from google.auth import downscoped

        source = self._credentials
        if source is None:
            source, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
        creds = downscoped.Credentials(
            source_credentials=source, credential_access_boundary=self.boundary(bucket, prefix, write)
        )
        creds.refresh(google.auth.transport.requests.Request())
        expiry = creds.expiry.replace(tzinfo=dt.UTC).timestamp() if creds.expiry else time.time() + ttl
        return str(creds.token), expiry

    def __repr__(self) -> str:
        return "DownscopedTokenSource()"


@dataclass(frozen=True)
class GcsSettings:
    """How the catalog reaches GCS and where its tokens come from.

    Attributes:
        project_id: The Google Cloud project (``gcs.project-id`` for engines).
        endpoint: Storage endpoint for engines and the catalog (``None`` = Google; fake-gcs-server:
            ``http://127.0.0.1:4443``).
        token_source: Mints table-scoped tokens (``None`` = ``DownscopedTokenSource()`` over the
            catalog's Application Default Credentials).
        credential_ttl: Lifetime asked of vended tokens in seconds.
        min_remaining: Fraction of their lifetime cached tokens must still have to be handed out again.
    """

    project_id: str | None = None
    endpoint: str | None = None
    token_source: Any = None
    credential_ttl: int = 3600
    min_remaining: float = 0.9

    def __repr__(self) -> str:
        return f"GcsSettings(project_id={self.project_id!r}, endpoint={self.endpoint!r}, ttl={self.credential_ttl})"

    def store_config(self) -> dict[str, str]:
        cfg: dict[str, str] = {}
        if self.project_id:
            cfg["gcs.project-id"] = self.project_id
        if self.endpoint:
            cfg["gcs.service.host"] = self.endpoint.rstrip("/")
        return cfg


def parse_gs(location: str) -> tuple[str, str]:
    """``gs://bucket/path`` -> (bucket, path without slashes at its ends)."""
    if not location.startswith("gs://") or len(location) <= 5:
        raise BadRequest(f"Not a GCS location (gs://<bucket>/<path>): {location}")
    bucket, _, path = location[5:].partition("/")
    return bucket, path.strip("/")


class GcsVendor(CloudVendor):
    """Per-table OAuth tokens for a ``gs://`` warehouse (see the module docstring)."""

    schemes = GCS_SCHEMES

    def __init__(self, settings: GcsSettings):
        super().__init__(settings.credential_ttl, settings.min_remaining)
        self.gcs = settings
        self.source: GcsTokenSource = settings.token_source or DownscopedTokenSource()

    def _issue(self, principal: str, location: str, mode: str) -> CloudCredential:
        bucket, path = parse_gs(location)
        try:
            token, expires_at = self.source.token(bucket, path, mode == WRITE, self.credential_ttl)
        except Exception as e:  # the token source's own failure (google-auth, network); never its secrets
            raise ServiceUnavailable(
                f"Credential vending failed: GCS token source error ({type(e).__name__})"
            ) from None
        config = {
            GCS_TOKEN: token,
            GCS_TOKEN_EXPIRES: str(int(expires_at * 1000)),
            **self.gcs.store_config(),
        }
        return CloudCredential(config, expires_at, mode, location)

    def table_config(self, cred: CloudCredential, endpoint: str) -> dict[str, str]:
        return {**cred.config, GCS_REFRESH: endpoint, CLIENT_REFRESH: endpoint}

    def catalog_file_io(self) -> dict[str, str]:
        props = self.gcs.store_config()
        if self.gcs.endpoint:  # an emulator checks no token; without one pyarrow would look for Google's ADC
            props[GCS_TOKEN] = "lakesession-catalog-emulator"
            props[GCS_TOKEN_EXPIRES] = str(int((time.time() + 10 * 365 * 86400) * 1000))
        return props  # else: pyarrow's GcsFileSystem uses the catalog's Application Default Credentials
