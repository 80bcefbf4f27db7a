"""Object-store refusals (S3 AccessDenied, ExpiredToken, …) told as one readable ``StorageAccessError``.

The store's own words are useless to a notebook user: pyarrow says ``OSError: When initiating
multiple part upload for key … AWS Error ACCESS_DENIED``, Spark says ``Py4JJavaError`` with 271
lines of ``Job aborted due to stage failure … S3Exception: Access Denied``. What the user needs is
which table, which operation, as whom, and why (a read-only grant, a revoked one, expired keys).

This module holds the parts both paths share: ``parse_denial`` reads a store error's text (pyarrow
message or Java exception text), ``likely_cause`` guesses the reason from the code, the operation
and what lakesession knows of the table's credentials, and ``storage_error`` builds the exception.
The pyarrow path (``VendedFileIO``) and the Spark path (``lakesession._spark._denials``) call them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import StorageAccessError

READ, WRITE, DELETE = "read", "write", "delete"
READ_ONLY, REVOKED, EXPIRED, DENIED = "read-only grant", "revoked", "expired", "denied"

# S3 error codes meaning "these keys are no longer valid" (SeaweedFS answers InvalidAccessKeyId for expired keys)
EXPIRED_CODES = frozenset(
    {
        "ExpiredToken",
        "ExpiredTokenException",
        "RequestExpired",
        "TokenRefreshRequired",
        "InvalidAccessKeyId",
        "InvalidToken",
        "UNAUTHENTICATED",  # GCS: an expired OAuth token
    }
)
DENIED_CODES = frozenset(
    {
        "AccessDenied",
        "AllAccessDisabled",  # not "Forbidden": the catalog says that
        # Azure Blob/ADLS (adlfs and the Azure SDK: "ErrorCode:AuthorizationPermissionMismatch"); Azurite answers an
        # expired SAS AuthorizationFailure, Azure AuthenticationFailed: told apart by the credential's expiry
        "AuthorizationPermissionMismatch",
        "AuthorizationResourceTypeMismatch",
        "AuthorizationFailure",
        "AuthenticationFailed",
        # GCS through pyarrow's GcsFileSystem: "google::cloud::Status(PERMISSION_DENIED: …)"
        "PERMISSION_DENIED",
    }
)
_PYARROW_CODES = {
    "ACCESS_DENIED": "AccessDenied",
    "EXPIRED_TOKEN": "ExpiredToken",
    "INVALID_ACCESS_KEY_ID": "InvalidAccessKeyId",
}
_WRITE_OPS = ("Put", "Upload", "CreateMultipart", "CompleteMultipart", "Copy")
_DELETE_OPS = ("Delete",)

_KEY_BUCKET = re.compile(r"key '(?P<key>[^']*)' in bucket '(?P<bucket>[^']*)'")
_S3_URL = re.compile(r"\bs3a?n?://[^\s'\",;)]+")
_OPERATION = re.compile(r"during (?P<op>\w+) operation")
_AWS_ERROR = re.compile(r"AWS Error (?P<code>[A-Z_]+)")
_STATUS = re.compile(r"(?:HTTP status|Status Code:?)\s*(?P<status>\d{3})")
_JAVA_CODE = re.compile(r"Error Code:\s*(?P<code>\w+)")


@dataclass(frozen=True)
class Denial:
    """What a store's refusal says: its error code, the operation kind, the S3 request, the object."""

    code: str  # AccessDenied, ExpiredToken, InvalidAccessKeyId, …
    operation: str  # read, write or delete ("" when the text does not say)
    request: str | None = None  # the S3 call (CreateMultipartUpload, GetObject, …) when named
    path: str | None = None  # s3://bucket/key when named


def _code_in(text: str) -> str | None:
    for code in (*EXPIRED_CODES, *DENIED_CODES):
        if re.search(rf"\b{code}\b", text):
            return code
    if "Access Denied" in text or "access denied" in text:
        return "AccessDenied"
    lower = text.lower()
    if "token has expired" in lower or ("security token" in lower and "expired" in lower):
        return "ExpiredToken"
    if "access key id you provided does not exist" in lower:
        return "InvalidAccessKeyId"
    return None


def operation_of(request: str | None, default: str = "") -> str:
    """``write``/``read``/``delete`` for an S3 request name (``CreateMultipartUpload`` → write)."""
    if not request:
        return default
    if request.startswith(_DELETE_OPS):
        return DELETE
    if request.startswith(_WRITE_OPS):
        return WRITE
    return READ


def parse_denial(text: str, *, operation: str = "") -> Denial | None:
    """The refusal described by a store error's ``text``, or None when it is not an authorization refusal.

    Reads pyarrow's messages (``… key 'k' in bucket 'b': AWS Error ACCESS_DENIED during PutObject …``)
    and the AWS SDK's (``Access Denied (Service: S3, Status Code: 403, …)``); ``operation`` is the
    caller's knowledge when the text names no S3 request (a Java stack frame, a file opened for writing).
    """
    code = None
    if m := _AWS_ERROR.search(text):
        code = _PYARROW_CODES.get(m["code"])
    elif "AWS Error [code 15]" in text:  # older pyarrow: ACCESS_DENIED by number
        code = "AccessDenied"
    code = code or (m["code"] if (m := _JAVA_CODE.search(text)) else None) or _code_in(text)
    status = int(m["status"]) if (m := _STATUS.search(text)) else None
    if code is None and status == 403:
        code = "AccessDenied"  # a HEAD answers 403 without a body: no code to read
    if code is None or (code not in EXPIRED_CODES and code not in DENIED_CODES):
        return None
    request = m["op"] if (m := _OPERATION.search(text)) else None
    path = None
    if m := _KEY_BUCKET.search(text):
        path = f"s3://{m['bucket']}/{m['key']}"
    elif m := _S3_URL.search(text):
        path = m.group(0)
    return Denial(code, operation_of(request, operation), request, path)


def likely_cause(denial: Denial, *, revoked: bool = False, mode: str | None = None, expired: bool = False) -> str:
    """The likeliest reason: expired keys, a revoked grant, a read-only grant (a write refused), or denied.

    ``expired``: the keys used had expired by the refusal (a HEAD's 403 has no body to say ExpiredToken)."""
    if denial.code in EXPIRED_CODES:
        return REVOKED if revoked else EXPIRED
    if revoked:
        return REVOKED
    if expired:
        return EXPIRED
    if denial.operation in (WRITE, DELETE) and mode != "write":
        return READ_ONLY
    return DENIED


def _hint(cause: str, table: str | None, operation: str) -> str:
    reload = f"session.table({table!r})" if table else "session.table(...)"
    if cause == READ_ONLY:
        what = f"table {table}" if table else "the table"
        return (
            f"Likely cause: a read-only grant (the catalog vended read-only credentials). "
            f"Fix: ask the catalog's operator for write access to {what} (the reference catalog: TABLE_WRITE_DATA), "
            f"then run the {operation or 'write'} again."
        )
    if cause == REVOKED:
        return (
            "Likely cause: the grant was revoked (the catalog refused fresh credentials). "
            f"Fix: ask for the grant again, then reload the table with {reload}."
        )
    if cause == EXPIRED:
        return (
            "Likely cause: the storage credentials expired before they were refreshed. "
            f"Fix: run it again (a reload, {reload}, brings fresh ones); if it persists, compare the machine's clock "
            "with the store's and check session.credentials()."
        )
    return (
        "Likely cause: the credentials the catalog vended do not cover this file. Fix: check session.credentials() "
        "for the table's prefixes, and ask the catalog's operator."
    )


def storage_error(
    denial: Denial,
    *,
    table: str | None,
    principal: str | None,
    cause: str,
    cls: type[StorageAccessError] = StorageAccessError,
) -> StorageAccessError:
    """A one-line ``StorageAccessError``: table, operation, principal, the store's code, the likely cause."""
    op = denial.operation or "access"
    what = f"table {table}" if table else "a table's files"
    who = f" as {principal}" if principal else ""
    where = f" on {denial.path}" if denial.path else ""
    request = f" ({denial.request}{where})" if denial.request else (f" ({where.strip()})" if where else "")
    message = f"The object store refused to {op} {what}{who}: {denial.code}{request}. {_hint(cause, table, op)}"
    return cls(
        message,
        table=table,
        operation=op,
        principal=principal,
        reason=cause,
        code=denial.code,
        path=denial.path,
    )
