"""Remote signing: the catalog signs each S3 request with its own credentials, after authorizing it.

Engines then hold no storage credentials at all, and the catalog's credentials can do anything
in the bucket — so the signer is an **allowlist** of S3 operations, never a denylist:

* object level, read (TABLE_READ_DATA): GetObject, HeadObject;
* object level, write (TABLE_WRITE_DATA): PutObject, DeleteObject and the multipart calls
  (CreateMultipartUpload ``POST ?uploads``, UploadPart ``PUT ?partNumber&uploadId``,
  CompleteMultipartUpload ``POST ?uploadId``, AbortMultipartUpload ``DELETE ?uploadId``,
  ListParts ``GET ?uploadId``);
* bucket level: only ListObjectsV2 (``GET ?list-type=2``) with a ``prefix`` that ends in ``/``
  and lies strictly inside the table location (``orders`` alone would list ``orders_archive``).

Anything else — another query parameter (``?policy``, ``?acl``, ``?delete``, ``?lifecycle``,
``?tagging``, ``?versions``…), ``x-amz-copy-source`` (it would read another table's object with
the catalog's credentials), a host other than the configured store — is refused with 403. Only
an allowlist of headers is signed; the rest are dropped (S3 rejects an unsigned ``x-amz-*``
header, so a client that still sends one fails instead of, say, making an object public).
Signing itself is botocore's SigV4 (``S3SigV4Auth``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlsplit

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from .errors import BadRequest, Forbidden
from .storage.policy import split_s3_location as split_s3
from .vending import S3Settings

# Headers signed as given (lower case); ``x-amz-checksum-*`` too. Everything else is dropped.
SIGNED_HEADERS = frozenset(
    {
        "content-type",
        "content-length",
        "content-md5",
        "content-encoding",  # aws-chunked uploads
        "range",
        "if-match",
        "if-none-match",
        "if-modified-since",
        "if-unmodified-since",
        "x-amz-content-sha256",
        "x-amz-decoded-content-length",
        "x-amz-sdk-checksum-algorithm",
        "x-amz-trailer",
        "x-amz-expected-bucket-owner",
        "x-amz-storage-class",
        # server-side encryption as Iceberg's S3FileIO configures it (s3.sse.*)
        "x-amz-server-side-encryption",
        "x-amz-server-side-encryption-aws-kms-key-id",
        "x-amz-server-side-encryption-context",
        "x-amz-server-side-encryption-bucket-key-enabled",
        "x-amz-server-side-encryption-customer-algorithm",
        "x-amz-server-side-encryption-customer-key",
        "x-amz-server-side-encryption-customer-key-md5",
    }
)
SIGNED_HEADER_PREFIXES = ("x-amz-checksum-",)
# Query parameters S3 ignores for dispatch (botocore adds ``x-id=GetObject`` and the like).
_IGNORED_PARAMS = frozenset({"x-id"})
_LIST_PARAMS = frozenset(
    {
        "list-type",
        "prefix",
        "delimiter",
        "continuation-token",
        "start-after",
        "max-keys",
        "encoding-type",
        "fetch-owner",
    }
)


@dataclass(frozen=True)
class _Op:
    method: str
    required: frozenset[str]  # the sub-resource parameters that name the operation
    optional: frozenset[str]
    name: str
    write: bool


def _op(method: str, required: set[str], optional: set[str], name: str, write: bool) -> _Op:
    return _Op(method, frozenset(required), frozenset(optional), name, write)


OBJECT_OPERATIONS = (
    _op("GET", set(), {"versionId", "partNumber"}, "GetObject", False),
    _op("HEAD", set(), {"versionId", "partNumber"}, "HeadObject", False),
    _op("PUT", set(), set(), "PutObject", True),
    _op("DELETE", set(), {"versionId"}, "DeleteObject", True),
    _op("POST", {"uploads"}, set(), "CreateMultipartUpload", True),
    _op("PUT", {"partNumber", "uploadId"}, set(), "UploadPart", True),
    _op("POST", {"uploadId"}, set(), "CompleteMultipartUpload", True),
    _op("DELETE", {"uploadId"}, set(), "AbortMultipartUpload", True),
    _op("GET", {"uploadId"}, {"max-parts", "part-number-marker"}, "ListParts", True),
)
_AWS_HOST = re.compile(
    r"^(?:(?P<bucket>[a-z0-9][a-z0-9.-]*)\.)?s3(?:[.-](?:dualstack\.)?[a-z0-9-]+)?\.amazonaws\.com(?:\.cn)?$"
)


@dataclass(frozen=True)
class S3Target:
    """One allowlisted S3 request: the bucket, the object key (or listing prefix) and the operation."""

    bucket: str
    key: str  # object key, or the listing prefix (with its trailing '/') for ListObjectsV2
    operation: str = "GetObject"
    write: bool = False
    listing: bool = False

    def within(self, location: str) -> bool:
        """Strictly inside ``location``, path-boundary safe: ``wh/orders`` contains ``wh/orders/x``, not
        ``wh/orders_archive/x`` nor ``wh/orders`` itself. A location not on S3 contains nothing."""
        try:
            bucket, base = split_s3(location)
        except ValueError:
            return False
        if bucket != self.bucket:
            return False
        return not base or self.key.startswith(base + "/")


def _netloc(scheme: str, host: str, port: int | None) -> tuple[str, str, int]:
    return scheme, host.lower(), port or (443 if scheme == "https" else 80)


def _bucket_and_key(uri: str, s3: S3Settings) -> tuple[str, str, str]:
    """(bucket, decoded key, raw query) of a URL addressed to the configured store, else 403."""
    try:
        parts = urlsplit(uri)
        hostname, port = parts.hostname, parts.port
    except ValueError as e:  # bad IPv6 literal, port out of range
        raise BadRequest(f"Cannot sign {uri!r}: {e}") from None
    if parts.scheme not in ("http", "https") or not hostname:
        raise BadRequest(f"Cannot sign {uri!r}: an http(s) S3 URL is required")
    here = _netloc(parts.scheme, hostname, port)
    if parts.username or parts.password:
        raise Forbidden("Refusing to sign: the S3 URL carries user information")
    path = unquote(parts.path).lstrip("/")
    if s3.endpoint:
        ep = urlsplit(s3.endpoint)
        store = _netloc(ep.scheme, ep.hostname or "", ep.port)
        if here == store:
            bucket, _, key = path.partition("/")
            return bucket, key, parts.query
        suffix = "." + store[1]
        if not s3.path_style and here[0] == store[0] and here[2] == store[2] and here[1].endswith(suffix):
            return here[1][: -len(suffix)], path, parts.query
    elif parts.scheme == "https" and (m := _AWS_HOST.match(here[1])) and here[2] == 443:
        if m.group("bucket"):
            return m.group("bucket"), path, parts.query
        bucket, _, key = path.partition("/")
        return bucket, key, parts.query
    raise Forbidden(f"Refusing to sign: {parts.scheme}://{parts.netloc} is not this catalog's object store")


def parse_target(method: str, uri: str, headers: dict[str, list[str]], s3: S3Settings) -> S3Target:
    """The allowlisted operation a request performs, or 403 naming what is refused."""
    m = method.upper()
    bucket, key, query = _bucket_and_key(uri, s3)
    if not bucket:
        raise BadRequest(f"Cannot sign {uri!r}: no bucket in the URL")
    if any(k.lower() == "x-amz-copy-source" for k in headers):
        raise Forbidden("Refusing to sign a copy (x-amz-copy-source): copy the data through a read and a write")
    pairs = parse_qsl(query, keep_blank_values=True)
    names = [k for k, _ in pairs if k not in _IGNORED_PARAMS]
    if len(set(names)) != len(names):
        raise Forbidden("Refusing to sign: a query parameter is repeated")
    params = dict(pairs)
    given = frozenset(names)
    if not key:  # bucket level: ListObjectsV2 inside the table only
        prefix = params.get("prefix", "")
        if m != "GET" or params.get("list-type") != "2" or not given <= _LIST_PARAMS:
            raise Forbidden(
                f"Refusing to sign {m} on bucket {bucket!r} with {sorted(given) or 'no parameters'}: "
                "the only bucket-level operation signed is ListObjectsV2 (GET ?list-type=2&prefix=<table>/...)"
            )
        if not prefix.endswith("/"):
            raise Forbidden(f"Refusing to sign a listing with prefix {prefix!r}: the prefix must end with '/'")
        _no_dot_segments(prefix)
        return S3Target(bucket, prefix, "ListObjectsV2", write=False, listing=True)
    _no_dot_segments(key)
    candidates = [
        op for op in OBJECT_OPERATIONS if op.method == m and op.required <= given <= op.required | op.optional
    ]
    if not candidates:
        what = f"?{'&'.join(sorted(given))}" if given else "(no sub-resource)"
        raise Forbidden(f"Refusing to sign {m} {what} on an object: not an operation the signer allows")
    op = max(candidates, key=lambda o: len(o.required))
    return S3Target(bucket, key, op.name, write=op.write)


def _no_dot_segments(key: str) -> None:
    if "/../" in f"/{key}/" or "/./" in f"/{key}/":
        raise Forbidden("Refusing to sign a path with '.' or '..' segments")


def signed_headers(headers: dict[str, list[str]]) -> dict[str, str]:
    """The client's headers that may be signed (allowlist), joined as S3 expects."""
    return {
        k: ",".join(v)
        for k, v in headers.items()
        if k.lower() in SIGNED_HEADERS or k.lower().startswith(SIGNED_HEADER_PREFIXES)
    }


def sign(
    method: str,
    uri: str,
    headers: dict[str, list[str]],
    region: str,
    s3: S3Settings,
    body: str | None = None,
    credentials: Credentials | None = None,
) -> dict[str, list[str]]:
    """SigV4-sign the request with the catalog's own credentials (``credentials``: its current session,
    else ``s3``'s keys); returns the headers to send."""
    if credentials is None and s3.access_key_id and s3.secret_access_key:
        credentials = Credentials(s3.access_key_id, s3.secret_access_key, s3.session_token)
    if credentials is None:
        raise Forbidden("Remote signing is not configured on this catalog (no signing credentials)")
    flat = signed_headers(headers)
    request = AWSRequest(method=method.upper(), url=uri, headers=flat, data=body.encode() if body else None)
    if "x-amz-content-sha256" not in {k.lower() for k in flat}:
        request.headers["x-amz-content-sha256"] = "UNSIGNED-PAYLOAD"
    S3SigV4Auth(credentials, "s3", region or s3.region).add_auth(request)
    return {k: [v] for k, v in request.headers.items()}
