"""Session policies that scope STS credentials to exactly one table's S3 prefix,
and the IAM policy evaluation the emulator enforces them with.

Pure functions, no AWS or moto imports: the credential vendor calls
:func:`table_session_policy` and passes the result (JSON-encoded) as the
``Policy`` of ``sts:AssumeRole``. Real AWS and
:class:`lakesession.reference.storage.S3Emulator` (via :func:`is_allowed`)
enforce the same document.

Path-boundary safety: a table at ``s3://b/wh/orders`` gets objects
``arn:aws:s3:::b/wh/orders/*`` and listing with ``s3:prefix`` in
``["wh/orders/*", "wh/orders"]``. ``wh/orders_archive/...`` matches neither.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

_LOCATION = re.compile(r"^s3[an]?://([^/]+)(?:/(.*))?$")
# Characters that are IAM wildcards or policy-variable syntax inside ARNs and
# condition values. A location containing them would widen the scope.
_UNSAFE = ("*", "?", "${")

READ_OBJECT_ACTIONS = ("s3:GetObject", "s3:GetObjectVersion")
WRITE_OBJECT_ACTIONS = (
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
)


def split_s3_location(location: str) -> tuple[str, str]:
    """``s3://bucket/a/b/`` -> ``("bucket", "a/b")`` (``s3a://`` and ``s3n://`` too).

    The key prefix is returned without leading or trailing slashes; an empty
    string means the bucket root.

    Raises:
        ValueError: not an S3 location, or it contains IAM wildcard characters.
    """
    m = _LOCATION.match(location.strip())
    if not m or not m.group(1):
        raise ValueError(f"not an s3 location: {location!r}")
    bucket, key = m.group(1), (m.group(2) or "").strip("/")
    for bad in _UNSAFE:
        if bad in bucket or bad in key:
            raise ValueError(f"location {location!r} contains {bad!r}, which IAM treats as a wildcard")
    return bucket, key


def table_session_policy(location: str, write: bool) -> dict[str, Any]:
    """The IAM session policy for one table location, read-only or read-write (see :func:`prefixes_session_policy`)."""
    return prefixes_session_policy([location], write)


def prefixes_session_policy(locations: Iterable[str], write: bool) -> dict[str, Any]:
    """The IAM session policy covering exactly the union of ``locations`` (one bucket or several).

    Why one document for several prefixes: Hadoop S3A takes one credential per bucket, so a session
    that holds grants on two prefixes of a bucket needs one key scoped to both, and to nothing else.

    Read, per prefix: ``s3:GetObject`` and ``s3:GetObjectVersion`` on ``<prefix>/*`` and on the bare
    ``<prefix>`` key (the directory itself: S3A, pyarrow and DuckDB probe it with a HEAD before they
    list; no other securable can own that key, since locations never overlap), ``s3:ListBucket`` on
    the bucket only for ``s3:prefix`` like ``<prefix>/*`` (not the bare ``<prefix>``: it would list
    sibling names such as ``<prefix>_archive/``), and ``s3:GetBucketLocation``. Write adds
    ``s3:PutObject``, ``s3:DeleteObject``, ``s3:AbortMultipartUpload``,
    ``s3:ListMultipartUploadParts`` on ``<prefix>/*`` only (never the bare key: a file named like the
    directory would shadow it). Never ``s3:ListBucketMultipartUploads``: AWS has no ``s3:prefix``
    key for it, so it would list every upload in the bucket (other tables' keys and upload ids);
    Iceberg's S3FileIO and pyarrow keep their own upload ids and never list uploads.

    Packed for STS's size bounds (``policysize``): each prefix appears three times and no more (its
    ``/*`` objects, its bare key, its listing condition; read puts both ARNs in one statement, write puts
    every object action on ``/*`` in one), no ``Sid``, one-element lists as plain strings. No wildcard
    ever joins two prefixes: a shared leading path segment cannot be factored out without also covering
    its unnamed siblings.

    Args:
        locations: ``s3://bucket/path/to/table`` (trailing slash optional), at least one.
        write: include write permissions.

    Raises:
        ValueError: no location, not an S3 location, a bucket root (that would cover every
            table in the bucket), or wildcard characters in a location.
    """
    split: list[tuple[str, str]] = []
    for location in locations:
        bucket, prefix = split_s3_location(location)
        if not prefix:
            raise ValueError(f"refusing to scope credentials to a whole bucket: {location!r}")
        if (bucket, prefix) not in split:
            split.append((bucket, prefix))
    if not split:
        raise ValueError("no location to scope credentials to")
    buckets = sorted({bucket for bucket, _ in split})
    objects = [f"arn:aws:s3:::{b}/{p}/*" for b, p in split]
    directories = [f"arn:aws:s3:::{b}/{p}" for b, p in split]
    statements: list[dict[str, Any]]
    if write:
        statements = [
            {"Effect": "Allow", "Action": [*READ_OBJECT_ACTIONS, *WRITE_OBJECT_ACTIONS], "Resource": objects},
            {"Effect": "Allow", "Action": list(READ_OBJECT_ACTIONS), "Resource": directories},
        ]
    else:
        both = [arn for pair in zip(directories, objects, strict=True) for arn in pair]
        statements = [{"Effect": "Allow", "Action": list(READ_OBJECT_ACTIONS), "Resource": both}]
    for bucket in buckets:
        statements.append(
            {
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": f"arn:aws:s3:::{bucket}",
                # only "<prefix>/…": a bare "<prefix>" would let the holder list names under "<prefix>_archive/"
                "Condition": {"StringLike": {"s3:prefix": [f"{p}/*" for b, p in split if b == bucket]}},
            }
        )
    statements.append(
        {"Effect": "Allow", "Action": "s3:GetBucketLocation", "Resource": [f"arn:aws:s3:::{b}" for b in buckets]}
    )
    for statement in statements:  # one resource: a plain string, as IAM prints it (and shorter)
        if isinstance(statement["Resource"], list) and len(statement["Resource"]) == 1:
            statement["Resource"] = statement["Resource"][0]
    return {"Version": "2012-10-17", "Statement": statements}


# --- evaluation (what AWS does for identity + session policies; used by the emulator)
#
# Supported: Action/NotAction (case-insensitive wildcards), Resource/NotResource
# (case-sensitive wildcards), explicit Deny, and Condition operators String*,
# Arn*, Numeric*, Date*, Bool, IpAddress/NotIpAddress, Null, the ...IfExists
# suffix and ForAnyValue:/ForAllValues: qualifiers. Condition keys are
# case-insensitive. An unsupported operator makes the request fail closed
# (denied). Not supported: policy variables (``${aws:username}``),
# permissions boundaries, resource-based policies.


class UnsupportedCondition(ValueError):
    """A condition operator this evaluator does not implement (the request is denied)."""


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


@functools.lru_cache(maxsize=4096)
def _glob(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(body, re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def wildcard_match(pattern: str, value: str, ignore_case: bool = False) -> bool:
    """IAM wildcard match: ``*`` any run of characters (``/`` included), ``?`` one character."""
    return _glob(str(pattern), ignore_case).fullmatch(value) is not None


def _number(v: Any) -> float:
    return float(v)


def _date(v: Any) -> float:
    s = str(v)
    try:
        return float(s)
    except ValueError:
        return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def _ip_in(v: Any, e: Any) -> bool:
    return ipaddress.ip_address(str(v)) in ipaddress.ip_network(str(e), strict=False)


def _cmp(convert: Callable[[Any], Any], op: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    def test(v: Any, e: Any) -> bool:
        try:
            return op(convert(v), convert(e))
        except (TypeError, ValueError):
            return False

    return test


_MATCHERS: dict[str, tuple[Callable[[Any, Any], bool], bool]] = {}  # operator -> (matcher, negated)
for _name, _fn in {
    "StringEquals": lambda v, e: str(v) == str(e),
    "StringEqualsIgnoreCase": lambda v, e: str(v).lower() == str(e).lower(),
    "StringLike": lambda v, e: wildcard_match(str(e), str(v)),
    "ArnEquals": lambda v, e: wildcard_match(str(e), str(v)),
    "ArnLike": lambda v, e: wildcard_match(str(e), str(v)),
    "NumericEquals": _cmp(_number, lambda a, b: a == b),
    "DateEquals": _cmp(_date, lambda a, b: a == b),
    "IpAddress": _cmp(str, _ip_in),
}.items():
    _MATCHERS[_name] = (_fn, False)
for _pos, _neg in (
    ("StringEquals", "StringNotEquals"),
    ("StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase"),
    ("StringLike", "StringNotLike"),
    ("ArnEquals", "ArnNotEquals"),
    ("ArnLike", "ArnNotLike"),
    ("NumericEquals", "NumericNotEquals"),
    ("DateEquals", "DateNotEquals"),
    ("IpAddress", "NotIpAddress"),
):
    _MATCHERS[_neg] = (_MATCHERS[_pos][0], True)
for _kind, _conv in (("Numeric", _number), ("Date", _date)):
    for _suffix, _op in (
        ("LessThan", lambda a, b: a < b),
        ("LessThanEquals", lambda a, b: a <= b),
        ("GreaterThan", lambda a, b: a > b),
        ("GreaterThanEquals", lambda a, b: a >= b),
    ):
        _MATCHERS[_kind + _suffix] = (_cmp(_conv, _op), False)
_MATCHERS["Bool"] = (lambda v, e: str(v).lower() == str(e).lower(), False)


def _condition(operator: str, key: str, expected: list[Any], context: dict[str, Any]) -> bool:
    qualifier, _, op = operator.rpartition(":")
    if qualifier not in ("", "ForAnyValue", "ForAllValues"):
        raise UnsupportedCondition(operator)
    if_exists = op.endswith("IfExists") and op != "IfExists"
    base = op[: -len("IfExists")] if if_exists else op
    present = key.lower() in context
    if base == "Null":
        return (not present) == (str(expected[0]).lower() == "true")
    if base not in _MATCHERS:
        raise UnsupportedCondition(operator)
    matcher, negated = _MATCHERS[base]
    if not present:
        if if_exists or qualifier == "ForAllValues":
            return True
        return negated and qualifier != "ForAnyValue"

    def one(value: Any) -> bool:
        hit = any(matcher(value, e) for e in expected)
        return not hit if negated else hit

    values = _as_list(context[key.lower()])
    return all(one(v) for v in values) if qualifier == "ForAllValues" else any(one(v) for v in values)


def _conditions(block: dict[str, Any] | None, context: dict[str, Any]) -> bool:
    for operator, keys in (block or {}).items():
        for key, expected in keys.items():
            if not _condition(operator, key, _as_list(expected), context):
                return False
    return True


def _matches_any(patterns: Any, value: str, ignore_case: bool) -> bool:
    return any(wildcard_match(p, value, ignore_case) for p in _as_list(patterns))


def _statement_applies(st: dict[str, Any], action: str, resource: str, context: dict[str, Any]) -> bool:
    if "Action" in st:
        if not _matches_any(st["Action"], action, True):
            return False
    elif "NotAction" not in st or _matches_any(st["NotAction"], action, True):
        return False
    if "Resource" in st:
        if not _matches_any(st["Resource"], resource, False):
            return False
    elif "NotResource" not in st or _matches_any(st["NotResource"], resource, False):
        return False
    return _conditions(st.get("Condition"), context)


def evaluate(
    policies: Iterable[dict[str, Any]], action: str, resource: str, context: dict[str, Any] | None = None
) -> str | None:
    """``"Deny"`` (explicit), ``"Allow"``, or ``None`` (implicit deny) for one request."""
    ctx = {k.lower(): v for k, v in (context or {}).items()}
    result = None
    for doc in policies:
        for st in _as_list(doc.get("Statement", [])):
            if _statement_applies(st, action, resource, ctx):
                if st.get("Effect") == "Deny":
                    return "Deny"
                if st.get("Effect") == "Allow":
                    result = "Allow"
    return result


def is_allowed(
    identity: list[dict[str, Any]],
    session: list[dict[str, Any]] | None,
    action: str,
    resource: str,
    context: dict[str, Any] | None = None,
) -> bool:
    """AWS's rule for a session: identity policies allow, the session policy (if any)
    allows too (intersection), and no explicit Deny anywhere. Fails closed on
    unsupported conditions."""
    try:
        if evaluate(identity, action, resource, context) != "Allow":
            return False
        return session is None or evaluate(session, action, resource, context) == "Allow"
    except UnsupportedCondition:
        return False


def _principal_matches(expected: Any, principals: list[str], account_id: str) -> bool:
    if expected == "*":
        return True
    for value in _as_list(expected.get("AWS", []) if isinstance(expected, dict) else []):
        value = str(value)
        if value == "*" or value in (account_id, f"arn:aws:iam::{account_id}:root"):
            return True  # account trust: the caller's identity policy decides
        if value in principals:
            return True
    return False


def trust_allows(
    trust_policy: dict[str, Any], principals: list[str], account_id: str, context: dict[str, Any] | None = None
) -> bool:
    """Does a role's trust policy let one of ``principals`` call ``sts:AssumeRole``?"""
    ctx = {k.lower(): v for k, v in (context or {}).items()}
    allowed = False
    try:
        for st in _as_list(trust_policy.get("Statement", [])):
            if not _matches_any(st.get("Action", []), "sts:AssumeRole", True):
                continue
            if not _principal_matches(st.get("Principal"), principals, account_id):
                continue
            if not _conditions(st.get("Condition"), ctx):
                continue
            if st.get("Effect") == "Deny":
                return False
            allowed = allowed or st.get("Effect") == "Allow"
    except UnsupportedCondition:
        return False
    return allowed
