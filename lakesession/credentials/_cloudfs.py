"""pyarrow filesystems for one vended ADLS SAS or GCS token (``VendedFileIO`` builds one per credential).

* ADLS: adlfs (``AzureBlobFileSystem``) from a connection string ``BlobEndpoint=…;SharedAccessSignature=…``,
  wrapped as a pyarrow filesystem. The endpoint is the one the catalog named for the account
  (``adls.connection-string.<host>``, Iceberg Java's key: an endpoint URL, e.g. Azurite's), else Azure's.
  pyarrow 26's ``AzureFileSystem`` is not used: with a SAS it builds container URLs after the query string.
* GCS: pyarrow's ``GcsFileSystem`` with the token and its expiry (``gcs.oauth2.token``,
  ``gcs.oauth2.token-expires-at``) and the catalog's ``gcs.service.host``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .._wire.cloudkeys import ADLS_CONNECTION, ADLS_SAS, GCS_TOKEN, GCS_TOKEN_EXPIRES_MS
from ._errors import CredentialsError

if TYPE_CHECKING:
    from pyarrow.fs import FileSystem

ADLS_SCHEMES = frozenset({"abfs", "abfss", "wasb", "wasbs"})
GCS_SCHEMES = frozenset({"gs", "gcs"})
#: adlfs is the client's [azure] extra: `pip install adlfs` adds it to any install
EXTRA_HINT = "pip install 'adlfs>=2024.12' (the [azure] extra: pip install -e '.[azure]' from a checkout)"


def adls_path(location: str) -> str:
    """``abfss://container@host/a/b`` -> ``container/a/b`` (the path adlfs and pyarrow expect)."""
    parts = urlsplit(location)
    container = parts.netloc.split("@", 1)[0] if "@" in parts.netloc else ""
    return f"{container}{parts.path}" if container else parts.path.lstrip("/")


def _blob_endpoint(props: Mapping[str, str], host: str) -> str:
    url = props.get(ADLS_CONNECTION + host)
    if url and url.startswith(("http://", "https://")):
        return url.rstrip("/")
    return f"https://{host.split('.', 1)[0]}.blob.core.windows.net"


def adls_filesystem(props: Mapping[str, str], netloc: str) -> FileSystem:
    """An adlfs filesystem (as pyarrow) for the SAS vended for the account of ``netloc``."""
    host = netloc.split("@", 1)[-1]
    sas = props.get(ADLS_SAS + host) or props.get("adls.sas-token")
    if not sas:
        raise CredentialsError(f"The catalog vended no SAS token for the ADLS account {host}")
    try:
        from adlfs import AzureBlobFileSystem
    except ImportError:
        raise CredentialsError(f"Reading ADLS tables needs adlfs: {EXTRA_HINT}") from None
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    fs = AzureBlobFileSystem(
        connection_string=f"BlobEndpoint={_blob_endpoint(props, host)};SharedAccessSignature={sas.lstrip('?')}",
        skip_instance_cache=True,  # fsspec would otherwise hand back the filesystem of an older SAS
    )
    return PyFileSystem(FSSpecHandler(fs))


def gcs_filesystem(props: Mapping[str, str]) -> FileSystem:
    """pyarrow's ``GcsFileSystem`` for the vended token (and the catalog's endpoint, e.g. an emulator)."""
    from pyarrow.fs import GcsFileSystem

    token = props.get(GCS_TOKEN)
    if not token:
        raise CredentialsError("The catalog vended no GCS token (gcs.oauth2.token)")
    kwargs: dict[str, object] = {"access_token": token}
    expires = props.get(GCS_TOKEN_EXPIRES_MS)
    if expires and expires.isdigit():
        kwargs["credential_token_expiration"] = dt.datetime.fromtimestamp(int(expires) / 1000, dt.UTC)
    endpoint = props.get("gcs.service.host")
    if endpoint:
        url = urlsplit(endpoint)
        kwargs["scheme"] = url.scheme or "https"
        kwargs["endpoint_override"] = url.netloc or endpoint
    if props.get("gcs.project-id"):
        kwargs["project_id"] = props["gcs.project-id"]
    return GcsFileSystem(**kwargs)
