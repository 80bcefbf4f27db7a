"""Remote signing: the catalog signs each S3 request with its own credentials, after authorizing it.

Engines then hold no storage credentials at all. A request is signed only if
its object (or listing prefix) lies inside one table's location and the
caller holds TABLE_READ_DATA (GET/HEAD) or TABLE_WRITE_DATA (PUT/POST/DELETE)
on that table. Signing itself is botocore's SigV4 (``S3SigV4Auth``).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from .errors import BadRequest, Forbidden
from .storage.policy import split_s3_location as split_s3
from .vending import S3Settings

READ_METHODS = frozenset({"GET", "HEAD"})
WRITE_METHODS = frozenset({"PUT", "POST", "DELETE"})
# Headers a client must never get signed on its behalf, or that the signer sets itself.
_DROP = frozenset({"authorization", "x-amz-date", "x-amz-security-token"})


@dataclass(frozen=True)
class S3Target:
    bucket: str
    key: str  # object key, or the listing prefix for bucket-level requests

    def within(self, location: str) -> bool:
        """Path-boundary safe containment: ``wh/orders`` contains ``wh/orders/x``, not ``wh/orders_archive/x``."""
        bucket, base = split_s3(location)
        if bucket != self.bucket:
            return False
        if not base:
            return True
        return self.key == base or self.key.startswith(base + "/")


def parse_target(uri: str, s3: S3Settings) -> S3Target:
    """The bucket and key an S3 request URL addresses (path-style or virtual-hosted)."""
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise BadRequest(f"Cannot sign {uri!r}: an http(s) S3 URL is required")
    path = unquote(parts.path)
    host = parts.hostname or ""
    endpoint_host = urlsplit(s3.endpoint).hostname if s3.endpoint else None
    if host == endpoint_host or (s3.path_style and endpoint_host is None and host.startswith("s3.")):
        bucket, _, key = path.lstrip("/").partition("/")
    elif ".s3." in host or host.endswith(".s3.amazonaws.com"):
        bucket, key = host.split(".s3", 1)[0], path.lstrip("/")
    else:
        raise BadRequest(f"Cannot sign {uri!r}: not an S3 URL of this catalog's storage")
    if not bucket:
        raise BadRequest(f"Cannot sign {uri!r}: no bucket in the URL")
    if not key:  # bucket-level request: ListObjects names its prefix in the query
        key = (parse_qs(parts.query).get("prefix") or [""])[0]
    if "/../" in f"/{key}/" or "/./" in f"/{key}/":
        raise Forbidden("Refusing to sign a path with '.' or '..' segments")
    return S3Target(bucket, key.rstrip("/"))


def required_write(method: str) -> bool:
    m = method.upper()
    if m in READ_METHODS:
        return False
    if m in WRITE_METHODS:
        return True
    raise BadRequest(f"Cannot sign method {method!r}: only GET, HEAD, PUT, POST and DELETE are signed")


def sign(
    method: str, uri: str, headers: dict[str, list[str]], region: str, s3: S3Settings, body: str | None = None
) -> dict[str, list[str]]:
    """SigV4-sign the request with the catalog's own credentials; returns the headers to send."""
    if not (s3.access_key_id and s3.secret_access_key):
        raise Forbidden("Remote signing is not configured on this catalog (no signing credentials)")
    flat = {k: ",".join(v) for k, v in headers.items() if k.lower() not in _DROP}
    request = AWSRequest(method=method.upper(), url=uri, headers=flat, data=body.encode() if body else None)
    if "x-amz-content-sha256" not in {k.lower() for k in flat}:
        request.headers["x-amz-content-sha256"] = "UNSIGNED-PAYLOAD"
    creds = Credentials(s3.access_key_id, s3.secret_access_key, s3.session_token)
    S3SigV4Auth(creds, "s3", region or s3.region).add_auth(request)
    return {k: [v] for k, v in request.headers.items()}
