"""``Session.filesystem("s3://bucket/prefix")``: a pyarrow filesystem for a granted raw location.

Why: pandas, pyarrow (and through them DuckDB's Arrow scans) read raw Parquet outside Iceberg. They
get credentials the same way Comet and raw ``s3a://`` reads do: the session gateway's
``/lakesession/path-credentials`` route (the catalog decides by table or ``LOCATION_*`` grants and
scopes the key to exactly the granted prefix). pyarrow's ``S3FileSystem`` holds static keys, so this
handler builds a new one whenever the held key has too little life left (``required_life``, the rule
the gateway hands out by), before the key expires: a long loop of reads spans many TTLs.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.fs as pafs

from ..errors import CatalogAccessError, StorageAccessError
from ._denials import READ, WRITE, Denial, parse_denial

SCHEMES = ("s3://", "s3a://", "s3n://")
_HEAD_400 = re.compile(r"HTTP status 400\) during HeadObject operation")
DEFAULT_MIN_VALID = 60.0


def _strip(path: str) -> str:
    """``s3://b/k`` or ``b/k`` -> ``b/k`` (pyarrow's S3 paths)."""
    for scheme in SCHEMES:
        if path.startswith(scheme):
            return path[len(scheme) :]
    return path


class PathCredentials:
    """Credentials for one location from the gateway, renewed ahead of expiry (one fetch at a time)."""

    def __init__(self, gateway_uri: str, secret: str, location: str, mode: str, min_valid: float):
        self._uri, self._secret = gateway_uri.rstrip("/"), secret
        self.location, self.mode, self.min_valid = location, mode, min_valid
        self._lock = threading.Lock()
        self._config: dict[str, str] = {}
        self.prefix = ""
        self._fetched_at = self._expires_at = 0.0
        self.fetches = 0

    def __repr__(self) -> str:
        return f"PathCredentials(prefix={self.prefix!r}, mode={self.mode!r}, expires_at={self._expires_at:.0f})"

    def current(self) -> dict[str, str]:
        from ..gateway._credcache import required_life

        with self._lock:
            now = time.time()
            if self._expires_at - now < required_life(self._expires_at - self._fetched_at, self.min_valid):
                self._fetch()
            return self._config

    @property
    def expires_at(self) -> float:
        return self._expires_at

    def _fetch(self) -> None:
        params = {"path": self.location, "mode": self.mode, "min-valid-seconds": str(int(self.min_valid))}
        try:
            r = httpx.get(
                f"{self._uri}/lakesession/path-credentials",
                params=params,
                headers={"Authorization": f"Bearer {self._secret}"},
                timeout=60,
            )
        except httpx.HTTPError as e:
            raise CatalogAccessError(
                f"The session gateway did not answer for {self.location} ({type(e).__name__}); retry, or reopen "
                "the session (lakesession.connect())",
                "catalog unavailable",
            ) from None
        if r.status_code != 200:
            try:
                message = r.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = f"HTTP {r.status_code}"
            hint = (
                " Fix: ask an admin to register the prefix (POST /management/v1/locations) and grant you "
                f"LOCATION_{self.mode.upper()} on it; session.locations() lists the locations you hold."
                if r.status_code == 403
                else ""
            )
            kind = {401: "not authorized", 403: "forbidden"}.get(r.status_code, "catalog error")
            raise CatalogAccessError(f"{message}.{hint}", kind, status=r.status_code)
        entry = r.json()["storage-credentials"][0]
        self._config = {k: v for k, v in entry["config"].items() if isinstance(v, str)}
        self.prefix = entry["prefix"]
        self._fetched_at = time.time()
        self._expires_at = int(self._config["s3.session-token-expires-at-ms"]) / 1000
        self.fetches += 1


class PathAccessError(StorageAccessError, PermissionError):
    """A raw location's read or write refused, by the store or before it (a filesystem opened for reading):
    a ``StorageAccessError`` naming the path, and still the ``OSError`` pyarrow and pandas callers expect."""


class RefreshingS3Handler(pafs.FileSystemHandler):
    """Delegates every call to a pyarrow ``S3FileSystem`` built from the current credentials; a refusal
    becomes one ``PathAccessError`` line naming the path, the principal and the fix."""

    def __init__(self, creds: PathCredentials, principal: str | None = None):
        self.creds = creds
        self.principal = principal
        self._built: tuple[int, pafs.S3FileSystem] | None = None

    def _fs(self) -> pafs.S3FileSystem:
        config = self.creds.current()
        built = self._built
        if built is None or built[0] != id(config):
            endpoint = config.get("s3.endpoint")
            kwargs: dict[str, Any] = {}
            if endpoint:
                scheme, _, host = endpoint.partition("://")
                kwargs.update(endpoint_override=host.rstrip("/"), scheme=scheme)
            fs = pafs.S3FileSystem(
                access_key=config["s3.access-key-id"],
                secret_key=config["s3.secret-access-key"],
                session_token=config.get("s3.session-token"),
                region=config.get("client.region") or config.get("s3.region") or "us-east-1",
                allow_delayed_open=True,  # one PUT per small file instead of a three-request multipart upload
                **kwargs,
            )
            built = self._built = (id(config), fs)
        return built[1]

    def _denied(self, path: str, operation: str, code: str, message: str) -> PathAccessError:
        return PathAccessError(
            message, operation=operation, principal=self.principal, reason="denied", code=code, path=path
        )

    def _do(self, operation: str, path: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """``S3FileSystem.<method>(*args)`` for ``path``, its refusals told in one line."""
        where = f"s3://{_strip(path)}"
        if operation == WRITE:
            self._refuse_read_only(where)
        try:
            return getattr(self._fs(), method)(*args, **kwargs)
        except OSError as exc:
            refused = self._refusal(exc, operation, where)
            if refused is None:
                raise
            raise refused from exc

    def _refuse_read_only(self, where: str) -> None:
        """A write through a filesystem opened for reading never reaches the store."""
        who = f" as {self.principal}" if self.principal else ""
        if self.creds.mode != "write":
            raise self._denied(
                where,
                WRITE,
                "ReadOnlyFilesystem",
                f"lakesession refused to write {where}{who} before it reached the store: "
                f"session.filesystem({self.creds.location!r}) was opened for reading. Fix: "
                f"session.filesystem({self.creds.location!r}, mode='write') (it needs a LOCATION_WRITE grant).",
            )

    def _refusal(self, exc: OSError, operation: str, where: str) -> PathAccessError | None:
        """The store's refusal in ``exc`` as one ``PathAccessError`` line (None: not a refusal)."""
        denial = parse_denial(str(exc), operation=operation)
        if denial is None and _HEAD_400.search(str(exc)):
            # S3 answers a HEAD signed with an expired or unknown session token 400 without a body to name it
            denial = Denial("BadRequest", READ, "HeadObject")
        if denial is None:
            return None
        who = f" as {self.principal}" if self.principal else ""
        granted = self._granted()
        inside = where == granted or where.startswith(granted + "/")
        cause = (
            f"this filesystem's credentials cover {granted}/ only"
            if not inside
            else f"the grant on {granted}/ does not allow it (ask for LOCATION_WRITE)"
            if operation == WRITE
            else f"the store no longer honours the key for {granted}/ (revoked or expired early); a new session "
            "(lakesession.connect()) fetches a new one"
        )
        return self._denied(
            where,
            denial.operation or operation,
            denial.code,
            f"The object store refused to {denial.operation or operation} {where}{who}: {denial.code}. "
            f"Likely cause: {cause}. Fix: session.locations() lists the locations you may open with "
            "session.filesystem(...).",
        )

    def _output(self, path: str, method: str, metadata: Any) -> Any:
        """An output stream whose write, flush and close refusals are ``PathAccessError`` lines too: with
        delayed opens (one PUT per small file) the store sees the object only when the stream is closed."""
        stream = self._do(WRITE, path, method, _strip(path), metadata=metadata)
        return pa.PythonFile(_RefusalsTold(stream, self, f"s3://{_strip(path)}"), mode="w")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RefreshingS3Handler) and other.creds is self.creds

    def __ne__(self, other: object) -> bool:
        return not self == other

    def get_type_name(self) -> str:
        return "lakesession-s3"

    def normalize_path(self, path: str) -> str:
        return _strip(path)

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return self._do(READ, paths[0] if paths else "", "get_file_info", [_strip(p) for p in paths])

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        sel = pafs.FileSelector(_strip(selector.base_dir), selector.allow_not_found, selector.recursive)
        return self._do(READ, selector.base_dir, "get_file_info", sel)

    def create_dir(self, path: str, recursive: bool) -> None:
        """S3 has no directories (a key implies its parents), and pyarrow's own ``create_dir`` asks HeadBucket,
        which a key scoped to a prefix may not (on AWS neither): inside the granted prefix this creates nothing,
        so ``pyarrow.dataset.write_dataset`` and ``fs.create_dir`` work; outside it, one line refuses."""
        where = f"s3://{_strip(path)}"
        granted = self._granted()
        self._refuse_read_only(where)
        if where.rstrip("/") == granted or where.startswith(granted + "/"):
            return
        who = f" as {self.principal}" if self.principal else ""
        raise self._denied(
            where,
            WRITE,
            "OutsideLocation",
            f"lakesession refused to create directory {where}{who}: this filesystem's credentials cover "
            f"{granted}/ only. Fix: session.locations() lists the locations you may open with session.filesystem(...).",
        )

    def _granted(self) -> str:
        """The prefix the held key covers, as ``s3://bucket/prefix`` (no trailing slash)."""
        return "s3://" + _strip(self.creds.prefix or self.creds.location).rstrip("/")

    def delete_dir(self, path: str) -> None:
        self._do(WRITE, path, "delete_dir", _strip(path))

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self._do(WRITE, path, "delete_dir_contents", _strip(path), missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        raise OSError("lakesession filesystems never delete a bucket's whole contents")

    def delete_file(self, path: str) -> None:
        self._do(WRITE, path, "delete_file", _strip(path))

    def move(self, src: str, dest: str) -> None:
        self._do(WRITE, dest, "move", _strip(src), _strip(dest))

    def copy_file(self, src: str, dest: str) -> None:
        self._do(WRITE, dest, "copy_file", _strip(src), _strip(dest))

    def open_input_stream(self, path: str) -> Any:
        return self._do(READ, path, "open_input_stream", _strip(path))

    def open_input_file(self, path: str) -> Any:
        return self._do(READ, path, "open_input_file", _strip(path))

    def open_output_stream(self, path: str, metadata: Any) -> Any:
        return self._output(path, "open_output_stream", metadata)

    def open_append_stream(self, path: str, metadata: Any) -> Any:
        return self._output(path, "open_append_stream", metadata)


class _RefusalsTold:
    """A writable file object over pyarrow's S3 output stream that tells the store's refusals in one line."""

    def __init__(self, stream: Any, handler: RefreshingS3Handler, where: str):
        self._stream, self._handler, self._where = stream, handler, where

    def _call(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self._stream, method)(*args)
        except OSError as exc:
            refused = self._handler._refusal(exc, WRITE, self._where)
            if refused is None:
                raise
            raise refused from exc

    def write(self, data: Any) -> Any:
        return self._call("write", data)

    def flush(self) -> None:
        self._call("flush")

    def close(self) -> None:
        self._call("close")

    def tell(self) -> int:
        return int(self._stream.tell())

    @property
    def closed(self) -> bool:
        return bool(self._stream.closed)

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False


def location_filesystem(
    gateway_uri: str,
    secret: str,
    location: str,
    mode: str = "read",
    min_valid_seconds: float = DEFAULT_MIN_VALID,
    principal: str | None = None,
) -> pafs.PyFileSystem:
    """A pyarrow filesystem for ``location``; fails now (``CatalogAccessError``) if it is not granted."""
    if not isinstance(location, str) or not location.startswith(SCHEMES):
        from ..errors import ConfigError

        raise ConfigError(f"filesystem() takes an s3:// location, got {location!r}; e.g. s3://raw-bucket/landing/")
    if mode not in ("read", "write"):
        from ..errors import ConfigError

        raise ConfigError(f"mode must be 'read' or 'write', got {mode!r}")
    creds = PathCredentials(gateway_uri, secret, location, mode, min_valid_seconds)
    creds.current()  # a location without a grant fails here, with the catalog's reason and a fix
    return pafs.PyFileSystem(RefreshingS3Handler(creds, principal))


def policy_locations(gateway_uri: str, secret: str) -> list[str]:
    """The gateway's ``/lakesession/policy-locations`` (empty when it cannot answer)."""
    r = httpx.get(f"{gateway_uri}/lakesession/policy-locations", headers={"Authorization": f"Bearer {secret}"})
    return list(r.json().get("locations", [])) if r.status_code == 200 else []
