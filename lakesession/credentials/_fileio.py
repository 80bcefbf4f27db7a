"""pyiceberg FileIOs that read and write with per-table credentials that stay fresh.

``VendedFileIO`` (a ``PyArrowFileIO``): before every ``new_input``/``new_output``/
``delete`` on ``s3://`` it asks the ``CredentialStore`` for a fresh credential of
its table covering the location (refreshing it through the catalog when due) and
uses a pyarrow ``S3FileSystem`` built for that credential's generation — rebuilt
only when the credential changed. pyiceberg's own ``fs_by_scheme`` cache is used
for every other scheme only: it keys filesystems by (scheme, bucket) and would
keep the first, soon-expired keys forever.

Seams of pyiceberg 0.12 relied on: every data, manifest and metadata file access goes
through ``FileIO.new_input``/``new_output``/``delete``; ``PyArrowFile(location, path, fs,
buffer_size)``; ``PyArrowFileIO._initialize_s3_fs(netloc)`` reads only ``self.properties``.

``SigningFileIO`` (an ``FsspecFileIO``): remote signing, no credentials on the client.
Each S3 request is signed by the catalog through pyiceberg's ``S3V4RestSigner``, which
asks the ``AUTH_MANAGER`` property for a fresh ``Authorization`` header on every request.
s3fs filesystems are built with ``skip_instance_cache``: fsspec would otherwise hand two
tables the same filesystem (same kwargs) and the last table's signer would sign for both.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from pyiceberg.io import (
    AWS_REGION,
    S3_ENDPOINT,
    S3_FORCE_VIRTUAL_ADDRESSING,
    S3_REGION,
    S3_SIGNER,
    S3_SIGNER_URI,
    InputFile,
    OutputFile,
)
from pyiceberg.catalog.rest.auth import AUTH_MANAGER
from pyiceberg.io.fsspec import FsspecFileIO, S3V4RestSigner
from pyiceberg.io.pyarrow import ONE_MEGABYTE, PyArrowFile, PyArrowFileIO
from pyiceberg.typedef import EMPTY_DICT, Properties

from ._store import public_config

if TYPE_CHECKING:
    from pyarrow.fs import FileSystem

    from ._store import CredentialStore

S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})
BUFFER_SIZE = "buffer-size"


def _s3_filesystem(properties: Properties, netloc: str | None) -> FileSystem:
    """pyiceberg's own S3FileSystem construction (endpoint, region, timeouts, …) for these properties."""
    return PyArrowFileIO(properties)._initialize_s3_fs(netloc)


class VendedFileIO(PyArrowFileIO):
    """A ``PyArrowFileIO`` whose S3 access always uses the table's current vended credentials.

    ``properties`` holds no secret (the credentials live in the store only); call
    ``current_properties()`` for a full, fresh FileIO config to hand to another engine.
    """

    def __init__(self, properties: Properties = EMPTY_DICT, *, store: CredentialStore, table: str,
                 location: str | None = None):
        self._store = store
        self._table = table
        self._location = location
        self._fs_lock = threading.Lock()
        self._s3_fs: dict[tuple[str, str, str], tuple[int, FileSystem]] = {}
        super().__init__(public_config(properties))

    @property
    def table(self) -> str:
        return self._table

    def current_properties(self, location: str | None = None) -> dict[str, str]:
        """FileIO properties with a fresh credential for ``location`` (default: the table's location)."""
        where = location or self._location
        if where is None:
            raise ValueError("no location: pass one")
        cred = self._store.credential_for(self._table, where)
        return {**self.properties, **cred.config}

    def _fs_for(self, location: str) -> tuple[FileSystem, str]:
        scheme, netloc, path = self.parse_location(location, self.properties)
        if scheme not in S3_SCHEMES:
            return self.fs_by_scheme(scheme, netloc), path
        cred = self._store.credential_for(self._table, location)  # refreshes when due; raises when revoked/expired
        key = (scheme, netloc, cred.prefix)
        with self._fs_lock:
            hit = self._s3_fs.get(key)
            if hit is not None and hit[0] == cred.generation:
                return hit[1], path
            fs = _s3_filesystem({**self.properties, **cred.config}, netloc)
            self._s3_fs[key] = (cred.generation, fs)
        return fs, path

    def _file(self, location: str) -> PyArrowFile:
        fs, path = self._fs_for(location)
        return PyArrowFile(fs=fs, location=location, path=path,
                           buffer_size=int(self.properties.get(BUFFER_SIZE, ONE_MEGABYTE)))

    def new_input(self, location: str) -> PyArrowFile:
        return self._file(location)

    def new_output(self, location: str) -> PyArrowFile:
        return self._file(location)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        str_location = location.location if isinstance(location, (InputFile, OutputFile)) else location
        fs, path = self._fs_for(str_location)
        try:
            fs.delete_file(path)
        except (FileNotFoundError, PermissionError):
            raise
        except OSError as e:
            if e.errno == 2 or "Path does not exist" in str(e):
                raise FileNotFoundError(f"Cannot delete file, does not exist: {str_location}") from e
            if e.errno == 13 or "AWS Error [code 15]" in str(e):
                raise PermissionError(f"Cannot delete file, access denied: {str_location}") from e
            raise

    def __repr__(self) -> str:
        return f"VendedFileIO(table={self._table!r}, store={self._store!r})"


SIGNED_BLOCK_SIZE = 32 * 1024 * 1024


def _signing_s3(properties: Properties) -> Any:
    """An s3fs filesystem whose every request is signed by the catalog (pyiceberg's ``S3V4RestSigner``)."""
    from botocore import UNSIGNED
    from s3fs import S3FileSystem

    config_kwargs: dict[str, Any] = {"signature_version": UNSIGNED}
    if str(properties.get("s3.path-style-access", "")).lower() == "true":
        config_kwargs["s3"] = {"addressing_style": "path"}
    elif str(properties.get(S3_FORCE_VIRTUAL_ADDRESSING, "")).lower() == "true":
        config_kwargs["s3"] = {"addressing_style": "virtual"}
    client_kwargs = {"endpoint_url": properties.get(S3_ENDPOINT),
                     "region_name": properties.get(S3_REGION) or properties.get(AWS_REGION)}
    # every request costs a round trip to the catalog's signer: read in larger blocks than s3fs's 5 MB
    # default so a scan needs fewer signatures (each block is one signed ranged GET)
    block = int(properties.get("s3.signer.block-size-bytes", SIGNED_BLOCK_SIZE))
    fs = S3FileSystem(anon=False, client_kwargs=client_kwargs, config_kwargs=config_kwargs, skip_instance_cache=True,
                      default_block_size=block)
    signer = AsyncRestSigner(properties)
    fs.s3.meta.events.unregister("before-sign.s3", unique_id=1925)
    fs.s3.meta.events.register_last("before-sign.s3", signer, unique_id=1925)
    return fs


class AsyncRestSigner:
    """pyiceberg's ``S3V4RestSigner`` protocol, without blocking s3fs's event loop.

    pyiceberg's signer posts to the catalog with synchronous ``requests`` from inside
    aiobotocore's event hook, which stalls every concurrent download while a request is
    being signed. aiobotocore awaits coroutine hooks, so this signer awaits an async
    HTTP call instead and the other range reads keep streaming.
    """

    def __init__(self, properties: Properties):
        self.properties = properties
        self._client: Any = None

    def _url(self) -> str:
        base = self.properties.get(S3_SIGNER_URI, self.properties.get("uri", "")).rstrip("/")
        endpoint = self.properties.get("s3.signer.endpoint", "v1/aws/s3/sign").strip()
        return f"{base}/{endpoint}"

    def _headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        manager = self.properties.get(AUTH_MANAGER)
        auth = manager.auth_header() if manager is not None else (
            f"Bearer {self.properties['token']}" if self.properties.get("token") else None)
        if auth:
            headers["Authorization"] = auth
        return headers

    async def __call__(self, request: Any, **_: Any) -> None:
        import httpx
        from pyiceberg.io.fsspec import SignError

        if self._client is None:
            self._client = httpx.AsyncClient(timeout=60)
        body = {"method": request.method, "region": request.context["client_region"], "uri": request.url,
                "headers": {key: [val] for key, val in request.headers.items()}}
        response = await self._client.post(self._url(), headers=self._headers(), json=body)
        if response.status_code != 200:
            raise SignError(f"Failed to sign request {response.status_code}: {request.method} {request.url}")
        signed = response.json()
        for key, value in signed["headers"].items():
            # replace, never append: the catalog echoes the request's own headers (Range, Host, …) and a
            # duplicated Range makes the store ignore it and send the whole object (pyiceberg appends)
            if key in request.headers:
                del request.headers[key]
            request.headers[key] = ", ".join(value)
        request.url = signed["uri"]


class SigningFileIO(FsspecFileIO):
    """An ``FsspecFileIO`` for remote signing: no credentials, the catalog signs every S3 request.

    ``properties`` need ``s3.signer.uri``/``s3.signer.endpoint`` and pyiceberg's ``AUTH_MANAGER``
    (an object whose ``auth_header()`` yields the user's current token, asked on every request).
    """

    def __init__(self, properties: Properties):
        super().__init__({**properties, S3_SIGNER: "S3V4RestSigner"})
        for scheme in S3_SCHEMES:
            self._scheme_to_fs[scheme] = _signing_s3

    def __repr__(self) -> str:
        return f"SigningFileIO(signer={self.properties.get(S3_SIGNER_URI)!r})"
