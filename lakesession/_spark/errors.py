"""Readable Python errors for catalog failures inside Spark.

pyspark turns JVM exceptions it does not know into ``Py4JJavaError`` with a
Java stack trace. Iceberg's REST exceptions (403 Forbidden, 401, 5xx) are
among them, so a revoked grant would greet the user with hundreds of lines of
Java. We wrap pyspark's ``convert_exception`` (the one documented place it
maps JVM exceptions) so these become ``CatalogAccessError`` carrying the
catalog's own message — and the object store's refusals of a job's reads and writes become one
``StorageAccessError`` naming the table (``lakesession._spark._denials``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pyspark.errors.exceptions import captured

from .._wire.enginerules import REFUSED_PREFIX
from ..catalog._chains import chain_hint
from ..catalog._refusals import forbidden_line, no_warehouse
from ..errors import CapabilityError as _CapabilityError
from ..errors import CatalogAccessError as _CatalogAccessError
from ..errors import ConfigError as _ConfigError
from ..errors import (
    EngineRefusedError,
    EngineUnavailableError,
    LoginRequiredError,
)
from ..errors import IdentityError as _IdentityError
from ..errors import ScopeError as _ScopeError
from ..gateway._nologin import found_no_login
from ._chain import Chain, SparkSideError, from_connect, from_java

ICEBERG_REST_EXCEPTIONS = {
    "org.apache.iceberg.exceptions.ForbiddenException": "forbidden",
    "org.apache.iceberg.exceptions.NotAuthorizedException": "not authorized",
    "org.apache.iceberg.exceptions.ServiceUnavailableException": "catalog unavailable",
    "org.apache.iceberg.exceptions.ServiceFailureException": "catalog failure",
    "org.apache.iceberg.exceptions.RESTException": "catalog error",
}

_original = captured.convert_exception


class CatalogAccessError(_CatalogAccessError, SparkSideError):
    """The catalog refused or failed a request Spark made; ``str()`` is the catalog's message.

    Both a ``lakesession.errors.CatalogAccessError`` (so ``except LakesessionError`` catches it) and
    pyspark's ``CapturedException`` (so pyspark's own handlers still recognise it).
    """

    def __init__(self, message: str, kind: str, java_class: str):
        SparkSideError.__init__(self, message or kind)
        self.kind = kind
        self.java_class = java_class
        self.status = None


class CapabilityError(_CapabilityError, SparkSideError):
    """A Spark query asked the catalog for what it does not offer (remote signing); one line."""

    def __init__(self, message: str, capability: str):
        SparkSideError.__init__(self, message)
        self.kind, self.java_class, self.status = "capability", BAD_REQUEST, 400
        self.capability, self.config = capability, {}


class ScopeError(_ScopeError, SparkSideError):
    """The issuer refused the scope the session's gateway asked for: what Python raises for it, from Spark."""

    def __init__(self, message: str, sent: str | None = None, expected: list[str] | None = None):
        SparkSideError.__init__(self, message)
        self.sent, self.expected = sent, list(expected or [])


class WarehouseError(_ConfigError, SparkSideError):
    """Iceberg Java's ``NoSuchWarehouseException`` (a 404 to ``/v1/config``): the ``ConfigError`` Python raises."""

    def __init__(self, message: str):
        SparkSideError.__init__(self, message)


NO_SUCH_WAREHOUSE = "org.apache.iceberg.exceptions.NoSuchWarehouseException"


def _no_warehouse(chain: Chain) -> WarehouseError | None:
    for link in chain.links:
        if link.name == NO_SUCH_WAREHOUSE:
            return WarehouseError(no_warehouse(link.message or "not found", uri=None, warehouse=None))
    return None


class IdentityError(_IdentityError, SparkSideError):
    """No usable login behind a Spark query (a dead login, a rejected client); ``cause`` names the class
    Python raises for it (``LoginRequiredError`` …)."""

    def __init__(self, message: str, cause: str):
        SparkSideError.__init__(self, message)
        self.cause = cause


class LoginRequired(LoginRequiredError, IdentityError):
    """``LoginRequiredError`` from Spark: log in again."""

    def __init__(self, message: str):
        IdentityError.__init__(self, message, "LoginRequiredError")


def identity_error(text: str) -> _IdentityError | None:
    """The identity error (same class as in Python) behind the gateway's "no usable login" 401 in ``text``."""
    found = found_no_login(text)
    if found is None:
        return None
    name, message, original = found
    if name == "ScopeError":
        sent = getattr(original, "sent", None)
        return ScopeError(message, sent=sent, expected=getattr(original, "expected", None))
    if name == "LoginRequiredError":
        return LoginRequired(message)
    return IdentityError(message, name)


BAD_REQUEST = "org.apache.iceberg.exceptions.BadRequestException"
# Iceberg Java's default error handler turns a 400 whose ErrorModel type is IllegalArgumentException (Polaris's
# answer to an unsupported delegation mode, ../shared/notes/polaris-1.4.1.md) into the JDK's own exception
ILLEGAL_ARGUMENT = "java.lang.IllegalArgumentException"
_MALFORMED = "Malformed request: "  # Iceberg's prefix for a 400's message


def _capability(chain: Chain) -> CapabilityError | None:
    """A 400 about remote signing (the gateway's refusal, or Polaris's "Unsupported access delegation mode")."""
    for link in chain.links:
        name = link.name
        if name in (BAD_REQUEST, ILLEGAL_ARGUMENT):
            said = link.message.removeprefix(_MALFORMED)
            if "remote signing" in said and name == BAD_REQUEST:
                return CapabilityError(said, "remote signing")
            if "access delegation" in said.lower():
                return CapabilityError(
                    f"The catalog does not offer remote signing (it answered: {said}). "
                    "Fix: lakesession.connect(..., access='vended-credentials') (the default).",
                    "remote signing",
                )
            if name == BAD_REQUEST:
                return None
    return None


def _iceberg_cause(chain: Chain) -> tuple[str, str] | None:
    """(the Iceberg REST exception class, its message) nearest the top of the chain."""
    for link in chain.links:
        for cls in ICEBERG_REST_EXCEPTIONS:
            if link.is_a(cls):
                return cls, link.message
    return None


# lakesession's JVM credential provider (java/src: GatewayClient.GatewayException), however Comet or S3A wrap it
_GATEWAY_REFUSAL = re.compile(
    r"lakesession: access to (\S+) refused by the session's gateway \(HTTP (\d{3})\): ([^\n]*)"
)
GATEWAY_EXCEPTION = "dev.lakesession.jvm.GatewayClient$GatewayException"
# what the AWS SDK appends when S3A's request check fails a request as an S3 403: v2 (GrantCheckInterceptor),
# v1 (GrantCheckHandlerV1, Spark 3.5: "(Service: Amazon S3; Status Code: 403; Error Code: AccessDenied; …)")
_SDK_SUFFIX = re.compile(
    r"\s*\(Service: (?:S3, Status Code: \d+, Request ID: |Amazon S3; Status Code: \d+;)[^)]*\)(:\S+)?\s*$"
)


def _gateway_refusal(chain: Chain) -> CatalogAccessError | None:
    """A path the session's gateway refused (raw s3a:// or Comet reads): the catalog's message, not a JVM trace."""
    for said in chain.messages:
        found = _GATEWAY_REFUSAL.search(said)
        if found is not None:
            path, status, message = found.groups()
            message = _SDK_SUFFIX.sub("", message)
            kind = "forbidden" if status == "403" else "not authorized" if status == "401" else "catalog error"
            return CatalogAccessError(f"access to {path} refused (HTTP {status}): {message}", kind, GATEWAY_EXCEPTION)
    return None


_STORE_REFUSAL = re.compile(r"^(s3a://\S+?):? (.*?) on s3a://")
STORE_DENIED = "java.nio.file.AccessDeniedException"
_WRITES = re.compile(r"put|write|delete|upload|copy|rename|mkdir|commit|create", re.IGNORECASE)


def _store_refusal(chain: Chain) -> CatalogAccessError | None:
    """S3A's AccessDeniedException for an s3a:// path: the store refused the session's credentials there
    (S3A's request check refuses ungranted paths before the store; this is what is left: e.g. a
    ``fs.s3a.bucket.<b>.lakesession.location`` narrowing, or a grant revoked mid-job)."""
    for link in chain.links:
        if link.is_a(STORE_DENIED):
            found = _STORE_REFUSAL.match(link.message)
            if found is not None:
                path, operation = found.group(1), found.group(2)
                grant = "LOCATION_WRITE" if _WRITES.search(operation) else "LOCATION_READ"
                return CatalogAccessError(
                    f"access to {path} refused by the store ({operation}): no grant of this session covers it; "
                    f"ask for {grant} on a registered location holding it (TABLE_READ_DATA/TABLE_WRITE_DATA when it "
                    "is a table's)",
                    "forbidden",
                    STORE_DENIED,
                )
    return None


def explain(chain: Chain) -> captured.CapturedException | None:
    """The one-line lakesession error a Spark failure stands for (classic or Connect), or None for Spark's own."""
    from ._denials import spark_denial
    from ._mistakes import missing_table_error, unlisted, unreached_error
    from ._rawpaths import unavailable

    unoffered = unreached_error(chain) or _capability(chain) or _no_warehouse(chain)
    if unoffered is not None:
        return unoffered
    found = _iceberg_cause(chain)
    if found is not None:
        cls, said = found
        no_login = identity_error(said)
        if no_login is not None:
            return no_login  # type: ignore[return-value]  # a CapturedException too
        message = chain_hint(said)
        kind = ICEBERG_REST_EXCEPTIONS[cls]
        if kind == "forbidden":
            try:
                unseen = unlisted(said)
            except Exception:  # suggesting names must never hide the refusal itself
                unseen = None
            if isinstance(unseen, captured.CapturedException):  # a TableNotFound
                return unseen
            message = forbidden_line(message, unseen)
        return CatalogAccessError(message, kind, cls)
    refused = _gateway_refusal(chain) or _store_refusal(chain)  # raw paths (Comet, s3a://): named by path
    if refused is not None:
        return refused
    no_s3a = unavailable(chain)  # a raw s3a:// read in a session without S3A: why, and the fix
    if no_s3a is not None:
        return no_s3a
    for explainer in (spark_denial, missing_table_error):
        try:
            explained = explainer(chain)
        except Exception:  # explaining must never hide the error itself
            explained = None
        if explained is not None:
            return explained
    return None


def _explained(read: Callable[[], Chain]) -> captured.CapturedException | None:
    """``explain`` of the chain ``read`` returns; None when reading or explaining fails (never hides the error)."""
    try:
        return explain(read())
    except Exception:
        return None


def convert_exception(e: Any) -> captured.CapturedException:
    """pyspark's conversion of a JVM exception, with lakesession's failures as their one-line errors."""
    explained = _explained(lambda: from_java(e))
    return explained if explained is not None else _original(e)


def install_error_conversion() -> None:
    """Idempotently route pyspark's exception conversion through ``convert_exception``."""
    if captured.convert_exception is not convert_exception:
        captured.convert_exception = convert_exception  # type: ignore[assignment,unused-ignore]  # pyspark 4 types it; 3.5 does not


_REFUSED = REFUSED_PREFIX
_UNAUTHENTICATED = "lakesession engine: "  # the front door's UNAUTHENTICATED statuses (engine/_proxy.py)


def refused_error(exc: BaseException) -> EngineRefusedError | None:
    """The ``EngineRefusedError`` an engine refusal (a gRPC PERMISSION_DENIED from the front door) stands for."""
    text = str(exc)
    at = text.find(_REFUSED)
    if at < 0:
        return None
    line = text[at:].splitlines()[0].rstrip(" \"'")
    rule = line.split("rule '", 1)[1].split("'", 1)[0] if "rule '" in line else "unknown"
    return EngineRefusedError(line, rule)


def install_connect_error_conversion() -> None:
    """The same one-line errors for Spark Connect sessions (errors arrive over gRPC).

    The Connect client fetches the server-side cause chain (class hierarchies, messages, frames): it is
    explained by the same rules as a classic session's JVM exception (``explain``), after the trusted
    engine's own refusals.
    """
    from pyspark.sql.connect.client import core as _core

    core: Any = _core  # its signature differs between pyspark 3.5 and 4
    original = core.convert_exception
    if getattr(original, "_lakesession", False):
        return

    def convert(info: Any, truncated_message: str, *args: Any, **kwargs: Any) -> Any:
        # pyspark 4: (info, message, resp, display_server_stacktrace, grpc_status); 3.5: (info, message)
        resp = args[0] if args else kwargs.get("resp")
        rule = info.metadata.get("rule") if info is not None and info.domain == "lakesession" else None
        line = (truncated_message or "").splitlines()[0] if truncated_message else ""
        if rule == "catalog-unavailable":  # the engine could not reach the catalog (or its issuer) for you
            return _CatalogAccessError(line, "catalog unavailable")
        if rule == "session-ended":  # the engine ended the session (idle): the client marked it closed
            return EngineUnavailableError(line, "")
        refused = refused_error(Exception(truncated_message or ""))  # the trusted engine's sandbox said no
        if refused is not None:
            return refused
        if (truncated_message or "").startswith(_UNAUTHENTICATED):  # the engine refused the token itself
            return LoginRequiredError(
                f"{truncated_message.splitlines()[0]}. Fix: log in again (lakesession.connect(...) / %lakesession login)"
            )
        explained = _explained(lambda: from_connect(info, truncated_message, resp))
        return explained if explained is not None else original(info, truncated_message, *args, **kwargs)

    convert._lakesession = True  # type: ignore[attr-defined]
    core.convert_exception = convert
