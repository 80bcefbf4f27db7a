"""pyiceberg FileIOs that read and write with per-table credentials that stay fresh (S3, ADLS, GCS).

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

The same holds on ``abfss://`` (ADLS: a SAS per table, through adlfs wrapped as a pyarrow filesystem —
pyarrow's own ``AzureFileSystem`` drops SAS tokens on container URLs, and pyiceberg's pyarrow path
keeps ``container@account`` in the path) and ``gs://`` (GCS: an OAuth token per table, pyarrow's
``GcsFileSystem``; gcsfs would look the token up at Google first). See ``_cloudfs``.

``SigningFileIO`` (an ``FsspecFileIO``, in ``_signing``): remote signing, no credentials on
the client; the catalog signs each S3 request, asked with the user's current token.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pyiceberg.io import InputFile, InputStream, OutputFile, OutputStream
from pyiceberg.io.pyarrow import ONE_MEGABYTE, PyArrowFile, PyArrowFileIO
from pyiceberg.typedef import EMPTY_DICT, Properties
from typing_extensions import override

from .._wire.cloudkeys import READ_ONLY_ACCESS, STORAGE_ACCESS
from ..errors import ConfigError, StorageAccessError
from ._cloudfs import ADLS_SCHEMES, GCS_SCHEMES, adls_filesystem, adls_path, gcs_filesystem
from ._denials import DELETE, READ, READ_ONLY, WRITE, likely_cause, parse_denial, storage_error
from ._signing import AsyncRestSigner, SigningFileIO, signing_s3
from ._states import REVOKED
from ._store import public_config

if TYPE_CHECKING:
    from pyarrow.fs import FileSystem

    from ._store import CredentialStore

__all__ = ["AsyncRestSigner", "SigningFileIO", "VendedFileIO", "signing_s3"]

S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})
VENDED_SCHEMES = S3_SCHEMES | ADLS_SCHEMES | GCS_SCHEMES
BUFFER_SIZE = "buffer-size"


def _s3_filesystem(properties: Properties, netloc: str | None) -> FileSystem:
    """pyiceberg's own S3FileSystem construction (endpoint, region, timeouts, …) for these properties."""
    return PyArrowFileIO(properties)._initialize_s3_fs(netloc)


class _TableFile(PyArrowFile):
    """A ``PyArrowFile`` whose store refusals (open, create, exists) become one ``StorageAccessError``."""

    _explain: Callable[[BaseException, str, str], StorageAccessError | None]

    @override
    def open(self, seekable: bool = True) -> InputStream:
        try:
            return super().open(seekable)
        except OSError as exc:
            denied = self._explain(exc, self.location, READ)
            if denied is None:
                raise
            raise denied from exc

    @override
    def create(self, overwrite: bool = False) -> OutputStream:
        try:
            stream = super().create(overwrite)
        except OSError as exc:
            denied = self._explain(exc, self.location, WRITE)
            if denied is None:
                raise
            raise denied from exc
        if self.location.split("://", 1)[0] in S3_SCHEMES:
            return stream  # S3 refuses at create (CreateMultipartUpload): pyarrow's own stream, no Python in between
        return _ExplainedStream(stream, lambda exc: self._explain(exc, self.location, WRITE))

    @override
    def exists(self) -> bool:
        try:
            return super().exists()
        except OSError as exc:
            denied = self._explain(exc, self.location, READ)
            if denied is None:
                raise
            raise denied from exc


class _ExplainedStream:
    """An output stream whose store refusals at write, flush or close become one ``StorageAccessError``.

    ADLS (adlfs) and GCS upload when a stream is flushed or closed, not when it is created: adlfs then
    raises ``RuntimeError("Failed to upload block: … ErrorCode:AuthorizationPermissionMismatch")``, which
    ``create`` never sees. Everything else is the wrapped stream's (pyarrow's ParquetWriter takes any
    file-like object)."""

    def __init__(self, stream: OutputStream, explain: Callable[[BaseException], StorageAccessError | None]):
        self._stream = stream
        self._explain = explain

    def _call(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self._stream, method)(*args)
        except Exception as exc:
            denied = self._explain(exc)
            if denied is None:
                raise
            raise denied from exc

    def write(self, data: bytes) -> int:
        return int(self._call("write", data) or 0)

    def flush(self) -> None:
        self._call("flush")

    def close(self) -> None:
        self._call("close")

    def writable(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:  # tell, closed, …
        return getattr(self._stream, name)

    def __enter__(self) -> _ExplainedStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class VendedFileIO(PyArrowFileIO):
    """A ``PyArrowFileIO`` whose S3 access always uses the table's current vended credentials.

    ``properties`` holds no secret (the credentials live in the store only); call
    ``current_properties()`` for a full, fresh FileIO config to hand to another engine. A store's refusal
    (read-only keys written with, revoked, expired) is raised as one ``StorageAccessError`` naming the
    table, the operation and ``principal``, with pyarrow's ``OSError`` as its ``__cause__``.
    """

    def __init__(
        self,
        properties: Properties = EMPTY_DICT,
        *,
        store: CredentialStore,
        table: str,
        location: str | None = None,
        principal: str | None = None,
    ):
        self._store = store
        self._principal = principal
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
            raise ConfigError("no location: pass current_properties(location=...)")
        cred = self._store.credential_for(self._table, where)
        return {**self.properties, **cred.config}

    def _fs_for(self, location: str) -> tuple[FileSystem, str]:
        scheme, netloc, path = self.parse_location(location, self.properties)
        if scheme not in VENDED_SCHEMES:
            return self.fs_by_scheme(scheme, netloc), path
        cred = self._store.credential_for(self._table, location)  # refreshes when due; raises when revoked/expired
        if scheme in ADLS_SCHEMES:
            path = adls_path(location)
        key = (scheme, netloc, cred.prefix)
        with self._fs_lock:
            hit = self._s3_fs.get(key)
            if hit is not None and hit[0] == cred.generation:
                return hit[1], path
            props = {**self.properties, **cred.config}
            if scheme in ADLS_SCHEMES:
                fs = adls_filesystem(props, netloc)
            elif scheme in GCS_SCHEMES:
                fs = gcs_filesystem(props)
            else:
                fs = _s3_filesystem(props, netloc)
            self._s3_fs[key] = (cred.generation, fs)
        return fs, path

    def _file(self, location: str) -> PyArrowFile:
        fs, path = self._fs_for(location)
        f = _TableFile(
            fs=fs, location=location, path=path, buffer_size=int(self.properties.get(BUFFER_SIZE, ONE_MEGABYTE))
        )
        f._explain = self.explain
        return f

    def explain(self, exc: BaseException, location: str, operation: str) -> StorageAccessError | None:
        """``exc`` (pyarrow's OSError, or pyiceberg's PermissionError over it) as a ``StorageAccessError``,
        or None when it is no authorization refusal (a missing file, a network error)."""
        text = f"{exc} {exc.__cause__ or ''}"
        denial = parse_denial(text, operation=operation)
        if denial is None:
            return None
        if denial.path is None:
            denial = replace(denial, path=location)
        entry = self._store.entry(self._table) if self._table in self._store else None
        expires = entry.expires_at if entry is not None else None
        cause = likely_cause(
            denial,
            revoked=entry is not None and entry.state == REVOKED,
            mode=entry.mode if entry else None,
            expired=expires is not None and expires <= time.time(),
        )
        return storage_error(denial, table=self._table, principal=self._principal, cause=cause)

    @override
    def new_input(self, location: str) -> PyArrowFile:
        return self._file(location)

    def _refuse_read_only(self, location: str, operation: str) -> None:
        """Raise before a write or delete the table's credentials cannot do: the catalog said they are
        read-only (``lakesession.storage-access``). Nothing reaches the store, so nothing is left behind
        there (a store that checks nothing, such as fake-gcs-server, would otherwise keep the file)."""
        scheme = location.split("://", 1)[0]
        if scheme not in VENDED_SCHEMES or self._table not in self._store:
            return
        cred = self._store.credential_for(self._table, location)
        if cred.config.get(STORAGE_ACCESS) != READ_ONLY_ACCESS:
            return
        who = f" as {self._principal}" if self._principal else ""
        raise StorageAccessError(
            f"lakesession refused to {operation} table {self._table}{who} before it reached the store: the catalog vended "
            f"read-only storage credentials for it (a read-only grant). Fix: ask the catalog's operator for write "
            f"access to table {self._table} (the reference catalog: TABLE_WRITE_DATA), then reload it "
            f"(session.table({self._table!r})) and run the {operation} again.",
            table=self._table,
            operation=operation,
            principal=self._principal,
            reason=READ_ONLY,
            code="ReadOnlyCredentials",
            path=location,
        )

    @override
    def new_output(self, location: str) -> PyArrowFile:
        self._refuse_read_only(location, WRITE)
        return self._file(location)

    @override
    def delete(self, location: str | InputFile | OutputFile) -> None:
        str_location = location.location if isinstance(location, (InputFile, OutputFile)) else location
        self._refuse_read_only(str_location, DELETE)
        fs, path = self._fs_for(str_location)
        try:
            fs.delete_file(path)
        except FileNotFoundError:
            raise
        except OSError as e:
            if (denied := self.explain(e, str_location, DELETE)) is not None:
                raise denied from e
            if e.errno == 2 or "Path does not exist" in str(e):
                raise FileNotFoundError(f"Cannot delete file, does not exist: {str_location}") from e
            if e.errno == 13 or "AWS Error [code 15]" in str(e):
                raise PermissionError(f"Cannot delete file, access denied: {str_location}") from e
            raise

    def __repr__(self) -> str:
        return f"VendedFileIO(table={self._table!r}, store={self._store!r})"
