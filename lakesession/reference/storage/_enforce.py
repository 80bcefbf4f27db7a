"""Enforcement hooks on moto 5.2.1: what AWS enforces for (temporary) credentials.

Two methods are patched, process-wide but active only for requests served by
an :class:`~lakesession.reference.storage.S3Emulator` (the emulator's WSGI
wrapper binds its :class:`Realm` to ``CURRENT_REALM`` for the request);
everything else (e.g. ``moto.mock_aws`` in the same process) gets moto's
original code path. A third patch, for everyone, fixes two S3 response root
element names (:data:`_S3_RESULT_ROOTS`) that break pyarrow's multipart writes.

* ``moto.core.authorization.ActionAuthenticatorMixin._authenticate_and_authorize_action``
  -> :func:`_authorize`: always authenticates (SigV4 via moto's
  ``IAMRequest``/``S3IAMRequest``, over exactly the signed headers: ``_sigv4``; moto's global knob
  ``settings.INITIAL_NO_AUTH_ACTION_COUNT`` is left alone), rejects expired
  STS credentials, and evaluates identity policies AND the AssumeRole session
  policy with :mod:`.policy` (conditions, wildcards, explicit Deny).
* ``moto.sts.models.STSBackend.assume_role`` -> :func:`_assume_role`:
  validates ``DurationSeconds`` / ``Policy`` and records the session policy and
  expiry by access key in the realm.
"""

from __future__ import annotations

import json
import logging
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

import moto

from ._sigv4 import signature_matches
from ._version import SUPPORTED_MOTO_VERSION, check_moto_version  # noqa: F401  (re-exported)

check_moto_version(moto.__version__)

import xmltodict  # noqa: E402  (moto dependency)
from moto.core.authorization import ActionAuthenticatorMixin  # noqa: E402
from moto.core.exceptions import (  # noqa: E402
    AccessDeniedError,
    InvalidClientTokenIdError,
    ServiceException,
)
from moto.core.utils import get_service_model  # noqa: E402
from moto.iam.access_control import AssumedRoleAccessKey, S3IAMRequest  # noqa: E402
from moto.iam.exceptions import NotFoundException  # noqa: E402
from moto.iam.models import iam_backends  # noqa: E402
from moto.iam.policy_validation import IAMPolicyDocumentValidator  # noqa: E402
from moto.s3.exceptions import (  # noqa: E402
    BucketAccessDeniedError,
    BucketInvalidAccessKeyIdError,
    S3AccessDeniedError,
    S3ClientError,
    S3InvalidAccessKeyIdError,
)
from moto.s3.models import s3_backends  # noqa: E402
from moto.sts.exceptions import STSClientError, STSValidationError  # noqa: E402
from moto.sts.models import STSBackend, sts_backends  # noqa: E402
from werkzeug.exceptions import HTTPException  # noqa: E402

from . import policy as iam_policy  # noqa: E402
from .policysize import PACKED_BUDGET, packed_estimate  # noqa: E402

log = logging.getLogger(__name__)

CURRENT_REALM: ContextVar[Realm | None] = ContextVar("lakesession_s3_emulator_realm", default=None)
MAX_SESSION_POLICY_CHARS = 2048  # AWS limit on a plain-text session policy (the packed one: policysize)


@dataclass
class Session:
    role_arn: str
    policy: dict[str, Any] | None
    expires_at: float  # epoch seconds


@dataclass
class Realm:
    """One emulator's view: its account, and the STS sessions issued in it."""

    account_id: str
    min_duration_seconds: int = 1
    partition: str = "aws"
    sessions: dict[str, Session] = field(default_factory=dict)


# --- errors shaped like moto's own (module moto.s3/moto.sts: model lookup works)


class S3ExpiredToken(S3ClientError):
    code = "ExpiredToken"

    def __init__(self) -> None:
        super().__init__("ExpiredToken", "The provided token has expired.")


class S3InvalidRequest(S3ClientError):
    def __init__(self, message: str) -> None:
        super().__init__("InvalidRequest", message)


class MalformedPolicyDocument(STSClientError):
    code = "MalformedPolicyDocument"


class PackedPolicyTooLarge(STSClientError):
    code = "PackedPolicyTooLarge"


for _cls in (S3ExpiredToken, S3InvalidRequest):
    _cls.__module__ = "moto.s3.exceptions"
MalformedPolicyDocument.__module__ = "moto.sts.exceptions"
PackedPolicyTooLarge.__module__ = "moto.sts.exceptions"


class _ApiError(InvalidClientTokenIdError):
    """A 403 query-protocol error (STS/IAM) with any code, like moto's own."""

    def __init__(self, code: str, message: str) -> None:
        super(InvalidClientTokenIdError, self).__init__(code, message)


class _S3Errors:
    def __init__(self, bucket: str | None):
        self.bucket = bucket

    def denied(self) -> Exception:
        return BucketAccessDeniedError(bucket=self.bucket) if self.bucket else S3AccessDeniedError()

    anonymous = denied

    def invalid_key(self) -> Exception:
        return BucketInvalidAccessKeyIdError(bucket=self.bucket) if self.bucket else S3InvalidAccessKeyIdError()

    def expired(self) -> Exception:
        return S3ExpiredToken()

    def unsupported(self) -> Exception:
        return S3InvalidRequest(
            "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256."
        )


class _ApiErrors:
    def __init__(self, principal: str = "anonymous", action: str = ""):
        self.principal, self.action = principal, action

    def denied(self) -> Exception:
        return AccessDeniedError(user_arn=self.principal, action=self.action)

    def anonymous(self) -> Exception:
        return _ApiError("MissingAuthenticationToken", "Request is missing Authentication Token")

    def invalid_key(self) -> Exception:
        return InvalidClientTokenIdError()

    def expired(self) -> Exception:
        return _ApiError("ExpiredToken", "The security token included in the request is expired")

    unsupported = anonymous


# --- the authorization hook


_original_authorize = ActionAuthenticatorMixin._authenticate_and_authorize_action
_original_assume_role = STSBackend.assume_role


# moto 5.2.1 serializes these S3 responses under "<Operation>Response"; S3 (and the
# AWS SDK for C++ in pyarrow, which then fails CompleteMultipartUpload) uses these roots.
_S3_RESULT_ROOTS = {"CompleteMultipartUpload": "CompleteMultipartUploadResult", "ListParts": "ListPartsResult"}


def install() -> None:
    """Patch moto (idempotent)."""
    ActionAuthenticatorMixin._authenticate_and_authorize_action = _authorize  # type: ignore[method-assign]
    STSBackend.assume_role = _assume_role  # type: ignore[method-assign]
    model = get_service_model("s3")  # cached: the instance moto's serializer uses
    for operation, root in _S3_RESULT_ROOTS.items():
        model.operation_model(operation).output_shape.serialization.setdefault("resultWrapper", root)


def _authorize(self: Any, iam_request_cls: type, resource: str = "*") -> None:
    realm = CURRENT_REALM.get()
    if realm is None:
        return _original_authorize(self, iam_request_cls, resource)
    try:
        _enforce(self, realm, iam_request_cls, resource)
    except (ServiceException, HTTPException):
        raise  # moto-shaped: serialized as a proper 4xx
    except Exception:  # never a 500: fail closed like AWS would for a request it cannot verify
        log.warning("S3 emulator: denying a request it could not verify", exc_info=True)
        if issubclass(iam_request_cls, S3IAMRequest):
            raise _S3Errors(_split_s3_arn(resource)[0]).denied() from None
        raise _ApiErrors().denied() from None


def _enforce(self: Any, realm: Realm, iam_request_cls: type, resource: str) -> None:
    is_s3 = issubclass(iam_request_cls, S3IAMRequest)
    bucket, key = _split_s3_arn(resource) if is_s3 else (None, None)
    errors: Any = _S3Errors(bucket) if is_s3 else _ApiErrors()

    auth = self.headers.get("Authorization")
    if not auth:
        raise errors.anonymous()
    if not auth.startswith("AWS4-HMAC-SHA256 ") or "Credential=" not in auth:
        raise errors.unsupported()
    access_key_id = auth.partition("Credential=")[2].partition("/")[0]
    if self.current_account != realm.account_id:
        raise errors.invalid_key()  # unknown here, or another emulator's/moto user's key
    signed = auth.partition("SignedHeaders=")[2].partition(",")[0].split(";")
    if "x-amz-date" not in signed or "X-Amz-Date" not in self.headers:
        raise errors.denied()  # AWS: "AWS authentication requires a valid Date or x-amz-date header"
    session = _session(realm, access_key_id)
    if session is not None and time.time() >= session.expires_at:
        raise errors.expired()
    path = _signed_path(self)
    iam_request = iam_request_cls(
        account_id=self.current_account,
        method=self.method,
        path=path,
        data=self.data,
        body=self.raw_body,
        headers=self.headers,
        action=self._get_action(),
    )  # raises InvalidAccessKeyId / InvalidToken like moto does
    if not signature_matches(iam_request, s3=is_s3):  # over exactly what the client signed (``_sigv4``)
        iam_request._raise_signature_does_not_match()
    principal = iam_request._access_key
    assumed = isinstance(principal, AssumedRoleAccessKey)
    if not assumed:
        stored = iam_backends[realm.account_id][realm.partition].access_keys.get(access_key_id)
        if stored is None or getattr(stored, "status", "Active") != "Active":
            raise errors.invalid_key()
    elif session is None:
        raise errors.invalid_key()

    context = _global_context(self, principal.arn)
    if is_s3:
        if bucket:
            owner = s3_backends.bucket_accounts.get(bucket)
            if owner is not None and owner[1] != realm.account_id:
                raise errors.denied()  # cross-account bucket without a bucket policy
        checks = _s3_checks(self, bucket, key, context)
    else:
        action = f"{iam_request._service}:{self._get_action()}"
        errors = _ApiErrors(principal.arn, action)
        if action.lower() == "sts:getcalleridentity":
            return  # AWS always allows it
        checks = [(action, resource, context)]

    try:
        identity = [_document(p) for p in principal.collect_policies()]
    except (NotFoundException, ValueError, StopIteration):
        raise errors.denied() from None
    session_policies = [session.policy] if session is not None and session.policy is not None else None
    for action, res, ctx in checks:
        if not iam_policy.is_allowed(identity, session_policies, action, res, ctx):
            raise errors.denied()
        if action.lower() == "sts:assumerole" and not _trusts(realm, res, principal, ctx):
            raise errors.denied()


def _signed_path(resp: Any) -> str:
    """The path and query exactly as sent: moto's decoded URL breaks SigV4 for keys like ``a=1``."""
    environ = getattr(getattr(resp, "request", None), "environ", None) or {}
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    parsed = urlparse(raw if raw else resp.uri)
    return (parsed.path or "/") + (f"?{parsed.query}" if parsed.query else "")


def _session(realm: Realm, access_key_id: str) -> Session | None:
    session = realm.sessions.get(access_key_id)
    if session is None and access_key_id.startswith("ASIA"):
        role = sts_backends[realm.account_id][realm.partition].get_assumed_role_from_access_key(access_key_id)
        if role is not None:  # issued outside our hook: moto's own record
            session = Session(role.role_arn, _loads(role.policy) if role.policy else None, _epoch(role.expiration))
    return session


def _global_context(resp: Any, principal_arn: str) -> dict[str, Any]:
    now = time.time()
    environ = getattr(getattr(resp, "request", None), "environ", None) or {}
    ctx = {
        "aws:principalarn": principal_arn,
        "aws:securetransport": "true" if resp.uri.startswith("https:") else "false",
        "aws:currenttime": datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "aws:epochtime": str(int(now)),
    }
    if environ.get("REMOTE_ADDR"):
        ctx["aws:sourceip"] = environ["REMOTE_ADDR"]
    return ctx


def _split_s3_arn(resource: str) -> tuple[str | None, str | None]:
    bucket, _, key = resource.partition(":::")[2].partition("/")
    return (None if bucket in ("", "*") else bucket), (key or None)


def _s3_checks(resp: Any, bucket: str | None, key: str | None, ctx: dict[str, Any]) -> list[tuple[str, str, dict]]:
    """(action, resource, context) triples AWS would evaluate for this S3 request."""
    name = resp.data.get("Action")
    name = name[0] if isinstance(name, list) else name
    query = parse_qs(urlparse(resp.uri).query, keep_blank_values=True)
    bucket_arn = f"arn:aws:s3:::{bucket}" if bucket else "arn:aws:s3:::*"
    if key is None:
        if name == "HeadBucket":
            name = "ListBucket"  # HeadBucket is authorized as s3:ListBucket
        if bucket and name == "DeleteObject" and "delete" in query:  # DeleteObjects: every key
            return [(f"s3:{a}", f"{bucket_arn}/{k}", ctx) for a, k in _delete_objects_keys(resp.body)]
        if name in ("ListBucket", "ListBucketVersions"):
            ctx = dict(ctx)
            for param, cond in (("prefix", "s3:prefix"), ("delimiter", "s3:delimiter"), ("max-keys", "s3:max-keys")):
                if param in query:
                    ctx[cond] = query[param][0]
        return [(f"s3:{name}", bucket_arn, ctx)]
    if resp.method == "HEAD" and "versionId" in query:
        name = "GetObjectVersion"
    checks = [(f"s3:{name}", f"{bucket_arn}/{key}", ctx)]
    source = resp.headers.get("x-amz-copy-source")
    if source and resp.method == "PUT":  # CopyObject / UploadPartCopy read the source
        src, _, qs = unquote(source).lstrip("/").partition("?")
        action = "s3:GetObjectVersion" if "versionId=" in qs else "s3:GetObject"
        checks.append((action, f"arn:aws:s3:::{src}", ctx))
    return checks


def _delete_objects_keys(body: Any) -> list[tuple[str, str]]:
    try:
        objects = (xmltodict.parse(body) or {}).get("Delete", {}).get("Object", [])
    except Exception:  # malformed: let moto answer MalformedXML
        return []
    objects = objects if isinstance(objects, list) else [objects]
    return [("DeleteObjectVersion" if o.get("VersionId") else "DeleteObject", o.get("Key", "")) for o in objects]


def _trusts(realm: Realm, role_arn: str, principal: Any, ctx: dict[str, Any]) -> bool:
    try:
        role = iam_backends[realm.account_id][realm.partition].get_role_by_arn(role_arn)
    except NotFoundException:
        return False  # AWS: AccessDenied for a role that does not exist
    principals = [principal.arn]
    if isinstance(principal, AssumedRoleAccessKey):
        principals.append(f"arn:aws:iam::{realm.account_id}:role/{principal._owner_role_name}")
    return iam_policy.trust_allows(_loads(role.assume_role_policy_document), principals, realm.account_id, ctx)


def _loads(doc: Any) -> dict[str, Any]:
    if isinstance(doc, dict):
        return doc
    try:
        return json.loads(doc)
    except ValueError:
        return json.loads(unquote(doc))


def _document(policy: Any) -> dict[str, Any]:
    """moto's collect_policies() items (str, dict, managed Policy) -> policy JSON."""
    if isinstance(policy, str):
        return _loads(policy)
    if isinstance(policy, dict):
        return _loads(policy["policy_document"])
    return _loads(next(v for v in policy.versions if v.is_default).document)


def _epoch(dt: datetime) -> float:
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


# --- the STS hook


def _assume_role(
    self: STSBackend,
    region_name: str,
    role_session_name: str,
    role_arn: str,
    policy: str | None,
    duration: int,
    external_id: str | None,
) -> Any:
    realm = CURRENT_REALM.get()
    if realm is None:
        return _original_assume_role(self, region_name, role_session_name, role_arn, policy, duration, external_id)  # type: ignore[arg-type]
    try:
        role = iam_backends[realm.account_id][realm.partition].get_role_by_arn(role_arn)
    except NotFoundException:
        raise STSValidationError(f"Role {role_arn} does not exist in this emulator") from None
    if duration < realm.min_duration_seconds:
        raise STSValidationError(
            f"1 validation error detected: Value '{duration}' at 'durationSeconds' failed to satisfy "
            f"constraint: Member must have value greater than or equal to {realm.min_duration_seconds}"
        )
    if duration > int(role.max_session_duration or 3600):
        raise STSValidationError("The requested DurationSeconds exceeds the MaxSessionDuration set for this role.")
    parsed = None
    if policy:
        if len(policy) > MAX_SESSION_POLICY_CHARS:
            raise STSValidationError(
                "1 validation error detected: Value at 'policy' failed to satisfy constraint: "
                f"Member must have length less than or equal to {MAX_SESSION_POLICY_CHARS}"
            )
        packed = packed_estimate(policy)  # AWS's packing is unpublished: the catalog's own estimate, enforced
        if packed > PACKED_BUDGET:
            raise PackedPolicyTooLarge(
                f"Packed size of the session policy is {packed * 100 // PACKED_BUDGET}% of the allowed maximum"
            )
        try:
            IAMPolicyDocumentValidator(policy).validate()
            parsed = json.loads(policy)
        except Exception as exc:
            message = getattr(exc, "message", None) or str(exc) or "Syntax errors in policy."
            raise MalformedPolicyDocument(message) from None
    assumed = _original_assume_role(self, region_name, role_session_name, role_arn, policy, duration, external_id)  # type: ignore[arg-type]
    realm.sessions[assumed.access_key_id] = Session(role_arn, parsed, _epoch(assumed.expiration))
    return assumed
