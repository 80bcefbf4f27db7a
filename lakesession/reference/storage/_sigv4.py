"""SigV4 verified over exactly the headers the client signed, as AWS verifies it.

Why: moto's ``IAMRequest.check_signature`` re-signs with botocore's signer, which leaves ``User-Agent`` (and
``Expect``, ``Transfer-Encoding``, ``X-Amzn-Trace-Id``) out of every signature it computes. AWS SDK v1 (Hadoop
3.3's S3A, Spark 3.5's raw paths) signs ``User-Agent``: AWS and every S3-compatible store accept its requests,
and moto answered each with ``SignatureDoesNotMatch``. Here the canonical request holds the headers named in
``SignedHeaders`` — no more (an unsigned header changes nothing) and no fewer (one signed, then dropped or
altered, still fails) — and the rest is botocore's signer as moto uses it.
"""

from __future__ import annotations

import hmac
from typing import Any

from botocore.auth import S3SigV4Auth, SigV4Auth
from botocore.awsrequest import AWSRequest, HTTPHeaders


def signed_headers(authorization: str) -> list[str]:
    """``SignedHeaders=a;b;c`` of an ``AWS4-HMAC-SHA256`` Authorization header, lower-cased."""
    return [h.strip().lower() for h in authorization.partition("SignedHeaders=")[2].partition(",")[0].split(";") if h]


class _AsSigned:
    """Mixin: the headers to sign are the request's headers the client named, whatever their name."""

    signed: frozenset[str] = frozenset()

    def headers_to_sign(self, request: AWSRequest) -> HTTPHeaders:
        header_map = HTTPHeaders()
        for name, value in request.headers.items():
            if name.lower() in self.signed:
                header_map[name.lower()] = value
        return header_map


class _S3AsSigned(_AsSigned, S3SigV4Auth):
    pass


class _ApiAsSigned(_AsSigned, SigV4Auth):
    pass


def signature_matches(iam_request: Any, *, s3: bool) -> bool:
    """Whether moto's ``IAMRequest`` carries the signature its key gives over what the client signed."""
    authorization = iam_request._headers["Authorization"]
    sent = authorization.partition("Signature=")[2].partition(",")[0].strip()
    signed = signed_headers(authorization)
    if "host" not in signed:
        return False  # AWS: the Host header must be signed
    auth = (_S3AsSigned if s3 else _ApiAsSigned)(
        iam_request._access_key.create_credentials(), iam_request._service, iam_request._region
    )
    auth.signed = frozenset(signed)
    request = iam_request._create_aws_request()
    canonical = auth.canonical_request(request)
    expected = auth.signature(auth.string_to_sign(request, canonical), request)
    return hmac.compare_digest(expected, sent)
