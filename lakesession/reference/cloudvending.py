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
* **GCS** (``gcsvending``): short-lived OAuth access tokens from a pluggable ``GcsTokenSource``.
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
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from .._wire.cloudkeys import (
    ADLS_CONNECTION,
    ADLS_REFRESH,
    ADLS_SAS,
    CLIENT_REFRESH,
)
from .._wire.cloudkeys import ADLS_SAS_EXPIRES_MS as ADLS_SAS_EXPIRES
from .._wire.singleflight import SingleFlight
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
