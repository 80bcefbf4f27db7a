"""Credential vending for Azure (ADLS Gen2 / Blob) and Google Cloud Storage warehouses.

The S3 vendor (``vending``) assumes a role with a session policy; these two do what their clouds
offer instead, with the same rules: per (principal, table, location, mode), read-only or read-write
by privilege, lifetime = ``credential_ttl``, cached while ``min_remaining`` of the lifetime is left,
concurrent misses for one key share one issuance.

* **ADLS**: a SAS signed with the storage account key the catalog holds (the Azure SDK's
  ``generate_directory_sas`` / ``generate_container_sas``, never hand-made). ``sas_scope="directory"``
  (default) is a directory SAS (``sr=d``) on exactly the table's directory: the narrowest Azure
  offers, on accounts with a hierarchical namespace. ``"container"`` (``sr=c``) covers the whole
  container: for flat-namespace accounts and Azurite, which refuses directory SAS (tested).
* **GCS**: short-lived OAuth access tokens from a pluggable ``GcsTokenSource``.
  ``DownscopedTokenSource`` (production) narrows the catalog's own Google credentials with a
  Credential Access Boundary to the table's prefix (google-auth's ``downscoped``);
  ``LocalTokenSource`` (emulators: fake-gcs-server checks no token) mints opaque tokens.

Iceberg REST keys (Iceberg Java 1.10-1.12 ``AzureProperties`` / ``GCPProperties``):
``adls.sas-token.<account host>``, ``adls.sas-token-expires-at-ms.<account host>``,
``adls.refresh-credentials-endpoint``, ``adls.connection-string.<account host>`` (endpoint);
``gcs.oauth2.token``, ``gcs.oauth2.token-expires-at`` (epoch ms), ``gcs.oauth2.refresh-credentials-endpoint``,
``gcs.service.host``, ``gcs.project-id``.
"""

from __future__ import annotations

import datetime as dt
import re
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

from .._cloudkeys import (
    ADLS_CONNECTION,
    ADLS_REFRESH,
    ADLS_SAS,
    CLIENT_REFRESH,
    GCS_REFRESH,
    GCS_TOKEN,
)
from .._cloudkeys import ADLS_SAS_EXPIRES_MS as ADLS_SAS_EXPIRES
from .._cloudkeys import GCS_TOKEN_EXPIRES_MS as GCS_TOKEN_EXPIRES
from .._singleflight import SingleFlight
from .errors import BadRequest, ServiceUnavailable

READ, WRITE = "read", "write"
ADLS_SCHEMES = ("abfss://", "abfs://")
GCS_SCHEMES = ("gs://",)
_ABFS = re.compile(r"^abfss?://([^@/]+)@([^/]+)(/.*)?$")


@dataclass(frozen=True)
class CloudCredential:
    """One vended ADLS SAS or GCS token: its Iceberg FileIO ``config`` (secret-bearing, never shown)."""

    config: Mapping[str, str] = field(repr=False)
    expires_at: float
    mode: str
    prefix: str
    issued_at: float = field(default_factory=time.time)

    def __repr__(self) -> str:
        return f"CloudCredential(prefix={self.prefix!r}, mode={self.mode!r}, expires_at={self.expires_at:.0f})"


class CloudVendor:
    """The S3 vendor's cache rules for any cloud: hand out cached credentials only while ``min_remaining``
    of their lifetime is left; one issuance per key at a time."""

    schemes: tuple[str, ...] = ()

    def __init__(self, credential_ttl: int, min_remaining: float):
        self.credential_ttl = credential_ttl
        self.min_remaining = min_remaining
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str, str, str], CloudCredential] = {}
        self._flights: SingleFlight[CloudCredential] = SingleFlight()
        self.issued = 0  # credentials minted (not served from the cache)

    def handles(self, location: str) -> bool:
        return location.startswith(self.schemes)

    def vend(
        self, principal: str, table: str, location: str, mode: str, *, now: float | None = None
    ) -> tuple[CloudCredential, bool]:
        """Credentials for ``principal`` on ``table`` at ``location``; returns (credential, cache_hit)."""
        key = (principal, table, location.rstrip("/"), mode)
        now = time.time() if now is None else now
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit.expires_at - now >= self.min_remaining * (hit.expires_at - hit.issued_at):
                return hit, True

        def issue() -> CloudCredential:
            cred = self._issue(principal, location.rstrip("/"), mode)
            with self._lock:
                self.issued += 1
                self._cache[key] = cred
                if len(self._cache) > 10_000:
                    for k in [k for k, v in self._cache.items() if v.expires_at <= now]:
                        del self._cache[k]
            return cred

        return self._flights.do(key, issue)

    def invalidate(self, principal: str | None = None) -> None:
        """Drop cached credentials (all, or one principal's) — e.g. after a grant is revoked."""
        with self._lock:
            for k in [k for k in self._cache if principal is None or k[0] == principal]:
                del self._cache[k]

    def _issue(self, principal: str, location: str, mode: str) -> CloudCredential:
        raise NotImplementedError

    def table_config(self, cred: CloudCredential, endpoint: str) -> dict[str, str]:
        """The table's FileIO config: the credential, where the store is, and where to refresh."""
        raise NotImplementedError

    def catalog_file_io(self) -> dict[str, str]:
        """pyiceberg FileIO properties for the catalog's own metadata reads and writes."""
        raise NotImplementedError


# -- Azure ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AdlsSettings:
    """How the catalog reaches an Azure storage account, and how it signs SAS tokens.

    Attributes:
        account_name: The storage account (``<account>.dfs.core.windows.net`` in ``abfss://`` locations).
        account_key: The account key the SAS tokens are signed with. Never sent to clients.
        endpoint: Blob endpoint for engines and the catalog (``None`` = ``https://<account>.blob.core.windows.net``;
            Azurite: ``http://127.0.0.1:10000/devstoreaccount1``).
        sas_scope: ``directory`` (``sr=d``, the table's directory; needs a hierarchical namespace) or
            ``container`` (``sr=c``: flat-namespace accounts, Azurite).
        credential_ttl: Lifetime of vended SAS tokens in seconds.
        min_remaining: Fraction of their lifetime cached tokens must still have to be handed out again.
    """

    account_name: str
    account_key: str = field(repr=False)
    endpoint: str | None = None
    sas_scope: str = "directory"
    credential_ttl: int = 3600
    min_remaining: float = 0.9

    def __post_init__(self) -> None:
        if self.sas_scope not in ("directory", "container"):
            raise ValueError(f"adls.sas_scope must be 'directory' or 'container', not {self.sas_scope!r}")

    def __repr__(self) -> str:
        return f"AdlsSettings(account_name={self.account_name!r}, endpoint={self.endpoint!r}, sas_scope={self.sas_scope!r}, ttl={self.credential_ttl})"

    @property
    def blob_endpoint(self) -> str:
        return (self.endpoint or f"https://{self.account_name}.blob.core.windows.net").rstrip("/")


def parse_abfs(location: str) -> tuple[str, str, str]:
    """``abfss://container@host/path`` -> (container, account host, path without slashes at its ends)."""
    m = _ABFS.match(location)
    if m is None:
        raise BadRequest(f"Not an ADLS location (abfss://<container>@<account host>/<path>): {location}")
    return m.group(1), m.group(2), (m.group(3) or "").strip("/")


class AdlsVendor(CloudVendor):
    """Per-table SAS tokens for an ``abfss://`` warehouse (see the module docstring)."""

    schemes = ADLS_SCHEMES

    def __init__(self, settings: AdlsSettings):
        super().__init__(settings.credential_ttl, settings.min_remaining)
        self.adls = settings

    def _issue(self, principal: str, location: str, mode: str) -> CloudCredential:
        from azure.storage.blob import ContainerSasPermissions, generate_container_sas
        from azure.storage.filedatalake import DirectorySasPermissions, generate_directory_sas

        container, host, path = parse_abfs(location)
        s = self.adls
        if host.split(".", 1)[0] != s.account_name:
            raise BadRequest(f"Location {location} is not in the catalog's storage account {s.account_name}")
        write = mode == WRITE
        expires_at = float(int(time.time()) + self.credential_ttl)  # SAS expiry has whole seconds
        expiry = dt.datetime.fromtimestamp(expires_at, dt.UTC)
        try:
            if s.sas_scope == "directory" and path:
                sas = generate_directory_sas(
                    s.account_name,
                    container,
                    path,
                    s.account_key,
                    permission=DirectorySasPermissions(
                        read=True, list=True, add=write, create=write, write=write, delete=write
                    ),
                    expiry=expiry,
                )
            else:
                sas = generate_container_sas(
                    s.account_name,
                    container,
                    account_key=s.account_key,
                    permission=ContainerSasPermissions(
                        read=True, list=True, add=write, create=write, write=write, delete=write
                    ),
                    expiry=expiry,
                )
        except (ValueError, TypeError) as e:  # a malformed account key: the operator's to fix
            raise ServiceUnavailable(
                f"Credential vending failed: cannot sign an ADLS SAS ({type(e).__name__})"
            ) from None
        config = {
            ADLS_SAS + host: sas,
            ADLS_SAS_EXPIRES + host: str(int(expires_at * 1000)),
            **self._store_config(host),
        }
        return CloudCredential(config, expires_at, mode, location)

    def _store_config(self, host: str) -> dict[str, str]:
        """Where engines reach the account: Iceberg Java (connection string = endpoint URL) and pyiceberg."""
        s = self.adls
        cfg = {"adls.account-name": s.account_name}
        if s.endpoint:
            url = urlsplit(s.blob_endpoint)
            cfg[ADLS_CONNECTION + host] = s.blob_endpoint
            cfg["adls.blob-storage-authority"] = url.netloc
            cfg["adls.blob-storage-scheme"] = url.scheme
            cfg["adls.dfs-storage-authority"] = url.netloc
            cfg["adls.dfs-storage-scheme"] = url.scheme
            cfg["adls.account-host"] = url.netloc
        return cfg

    def table_config(self, cred: CloudCredential, endpoint: str) -> dict[str, str]:
        return {**cred.config, ADLS_REFRESH: endpoint, CLIENT_REFRESH: endpoint}

    def catalog_file_io(self) -> dict[str, str]:
        s = self.adls
        host = f"{s.account_name}.dfs.core.windows.net"
        props = {**self._store_config(host), "adls.account-key": s.account_key}
        props.pop(ADLS_CONNECTION + host, None)
        if s.endpoint:  # adlfs (pyiceberg's fsspec ADLS FileIO) takes the emulator through a connection string
            props["adls.connection-string"] = (
                f"DefaultEndpointsProtocol={urlsplit(s.blob_endpoint).scheme};AccountName={s.account_name};"
                f"AccountKey={s.account_key};BlobEndpoint={s.blob_endpoint};"
            )
        return props


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


def vendor_for(
    warehouse: str, *, s3: Any = None, adls: AdlsSettings | None = None, gcs: GcsSettings | None = None
) -> Any:
    """The cloud vendor for a warehouse (None: no vending, e.g. ``file://``); S3 is ``vending``'s."""
    if warehouse.startswith(ADLS_SCHEMES) and adls is not None:
        return AdlsVendor(adls)
    if warehouse.startswith(GCS_SCHEMES) and gcs is not None:
        return GcsVendor(gcs)
    return None
