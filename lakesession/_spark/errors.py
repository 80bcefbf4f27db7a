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

import json
import re
from typing import Any

from pyspark.errors.exceptions import captured
from pyspark.errors.exceptions.base import PySparkException

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

ICEBERG_REST_EXCEPTIONS = {
    "org.apache.iceberg.exceptions.ForbiddenException": "forbidden",
    "org.apache.iceberg.exceptions.NotAuthorizedException": "not authorized",
    "org.apache.iceberg.exceptions.ServiceUnavailableException": "catalog unavailable",
    "org.apache.iceberg.exceptions.ServiceFailureException": "catalog failure",
    "org.apache.iceberg.exceptions.RESTException": "catalog error",
}

_original = captured.convert_exception


class CatalogAccessError(_CatalogAccessError, captured.CapturedException):
    """The catalog refused or failed a request Spark made; ``str()`` is the catalog's message.

    Both a ``lakesession.errors.CatalogAccessError`` (so ``except LakesessionError`` catches it) and
    pyspark's ``CapturedException`` (so pyspark's own handlers still recognise it).
    """

    def __init__(self, message: str, kind: str, java_class: str):
        # not CapturedException.__init__: it needs a py4j JVM, which a Spark Connect client has not
        PySparkException.__init__(self, message=message)
        self.desc = self._desc = message  # "desc": what pyspark 3.5 called it
        self._stackTrace, self._cause, self._origin = "", None, None
        self.kind = kind
        self.java_class = java_class
        self.status = None

    def __str__(self) -> str:
        return self.desc or self.kind


class CapabilityError(_CapabilityError, captured.CapturedException):
    """A Spark query asked the catalog for what it does not offer (remote signing); one line."""

    def __init__(self, message: str, capability: str):
        PySparkException.__init__(self, message=message)
        self.desc = self._desc = message
        self._stackTrace, self._cause, self._origin = "", None, None
        self.kind, self.java_class, self.status = "capability", BAD_REQUEST, 400
        self.capability, self.config = capability, {}

    def __str__(self) -> str:
        return self.desc


class ScopeError(_ScopeError, captured.CapturedException):
    """The issuer refused the scope the session's gateway asked for: what Python raises for it, from Spark."""

    def __init__(self, message: str, sent: str | None = None, expected: list[str] | None = None):
        PySparkException.__init__(self, message=message)
        self.desc = self._desc = message
        self._stackTrace, self._cause, self._origin = "", None, None
        self.sent, self.expected = sent, list(expected or [])

    def __str__(self) -> str:
        return self.desc


class WarehouseError(_ConfigError, captured.CapturedException):
    """Iceberg Java's ``NoSuchWarehouseException`` (a 404 to ``/v1/config``): the ``ConfigError`` Python raises."""

    def __init__(self, message: str):
        PySparkException.__init__(self, message=message)
        self.desc = self._desc = message
        self._stackTrace, self._cause, self._origin = "", None, None

    def __str__(self) -> str:
        return self.desc


NO_SUCH_WAREHOUSE = "org.apache.iceberg.exceptions.NoSuchWarehouseException"


def _no_warehouse(e: Any) -> WarehouseError | None:
    seen = 0
    while e is not None and seen < 20:
        if str(e.getClass().getName()) == NO_SUCH_WAREHOUSE:
            return WarehouseError(no_warehouse(str(e.getMessage() or "not found"), uri=None, warehouse=None))
        e = e.getCause()
        seen += 1
    return None


class IdentityError(_IdentityError, captured.CapturedException):
    """No usable login behind a Spark query (a dead login, a rejected client); ``cause`` names the class
    Python raises for it (``LoginRequiredError`` …)."""

    def __init__(self, message: str, cause: str):
        PySparkException.__init__(self, message=message)
        self.desc = self._desc = message
        self._stackTrace, self._cause, self._origin = "", None, None
        self.cause = cause

    def __str__(self) -> str:
        return self.desc


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


def _capability(e: Any) -> CapabilityError | None:
    """A 400 about remote signing (the gateway's refusal, or Polaris's "Unsupported access delegation mode")."""
    seen = 0
    while e is not None and seen < 20:
        name = str(e.getClass().getName())
        if name in (BAD_REQUEST, ILLEGAL_ARGUMENT):
            said = str(e.getMessage() or "").removeprefix(_MALFORMED)
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
        e = e.getCause()
        seen += 1
    return None


def _iceberg_cause(e: Any) -> tuple[Any, str] | None:
    from py4j.java_gateway import is_instance_of
    from pyspark import SparkContext

    gw = SparkContext._gateway
    seen = 0
    while e is not None and seen < 20:
        for cls in ICEBERG_REST_EXCEPTIONS:
            if is_instance_of(gw, e, cls):
                return e, cls
        e = e.getCause()
        seen += 1
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


def _gateway_refusal(e: Any) -> CatalogAccessError | None:
    """A path the session's gateway refused (raw s3a:// or Comet reads): the catalog's message, not a JVM trace."""
    seen = 0
    while e is not None and seen < 20:
        found = _GATEWAY_REFUSAL.search(str(e.getMessage() or ""))
        if found is not None:
            path, status, message = found.groups()
            message = _SDK_SUFFIX.sub("", message)
            kind = "forbidden" if status == "403" else "not authorized" if status == "401" else "catalog error"
            return CatalogAccessError(f"access to {path} refused (HTTP {status}): {message}", kind, GATEWAY_EXCEPTION)
        e = e.getCause()
        seen += 1
    return None


_STORE_REFUSAL = re.compile(r"^(s3a://\S+?):? (.*?) on s3a://")
STORE_DENIED = "java.nio.file.AccessDeniedException"
_WRITES = re.compile(r"put|write|delete|upload|copy|rename|mkdir|commit|create", re.IGNORECASE)


def _store_refusal(e: Any) -> CatalogAccessError | None:
    """S3A's AccessDeniedException for an s3a:// path: the store refused the session's credentials there
    (S3A's request check refuses ungranted paths before the store; this is what is left: e.g. a
    ``fs.s3a.bucket.<b>.lakesession.location`` narrowing, or a grant revoked mid-job)."""
    from py4j.java_gateway import is_instance_of
    from pyspark import SparkContext

    seen = 0
    while e is not None and seen < 20:
        if is_instance_of(SparkContext._gateway, e, STORE_DENIED):
            found = _STORE_REFUSAL.match(str(e.getMessage() or ""))
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
        e = e.getCause()
        seen += 1
    return None


def convert_exception(e: Any) -> captured.CapturedException:
    from ._mistakes import missing_table_error, unlisted, unreached_error

    unoffered = unreached_error(e) or _capability(e) or _no_warehouse(e)
    if unoffered is not None:
        return unoffered
    found = _iceberg_cause(e)
    if found is not None:
        cause, cls = found
        said = str(cause.getMessage() or "")
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
    refused = _gateway_refusal(e) or _store_refusal(e)  # raw paths (Comet, s3a://): named by path
    if refused is not None:
        return refused
    from ._rawpaths import unavailable

    no_s3a = unavailable(e)  # a raw s3a:// read in a session without S3A: why, and the fix
    if no_s3a is not None:
        return no_s3a
    try:
        from ._denials import spark_denial

        denied = spark_denial(e)
    except Exception:  # explaining must never hide the error itself
        denied = None
    if denied is not None:
        return denied
    try:
        missing = missing_table_error(e)
    except Exception:  # suggesting names must never hide the error itself
        missing = None
    return missing if missing is not None else _original(e)


def install_error_conversion() -> None:
    """Idempotently route pyspark's exception conversion through ``convert_exception``."""
    if captured.convert_exception is not convert_exception:
        captured.convert_exception = convert_exception  # type: ignore[assignment,unused-ignore]  # pyspark 4 types it; 3.5 does not


def _connect_iceberg_cause(info: Any, resp: Any) -> tuple[str, str] | None:
    """(Iceberg class, message) from a Spark Connect error: its cause chain if fetched, else its classes."""
    chain: list[tuple[list[str], str]] = []
    if resp is not None:
        chain = [(list(err.error_type_hierarchy), str(err.message)) for err in resp.errors]
    raw = info.metadata.get("classes") if info is not None else None
    if raw:
        chain.append((json.loads(raw), ""))
    for classes, message in chain:
        for cls in ICEBERG_REST_EXCEPTIONS:
            if cls in classes:
                return cls, message
    return None


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
    """The same readable ``CatalogAccessError`` for Spark Connect sessions (errors arrive over gRPC).

    The Connect client fetches the server-side cause chain (class hierarchies and messages); an
    Iceberg REST exception anywhere in it becomes ``CatalogAccessError`` with the catalog's message.
    """
    from pyspark.sql.connect.client import core as _core

    core: Any = _core  # its signature differs between pyspark 3.5 and 4
    original = core.convert_exception
    if getattr(original, "_lakesession", False):
        return

    def convert(info: Any, truncated_message: str, resp: Any, *args: Any, **kwargs: Any) -> Any:
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
        found = _connect_iceberg_cause(info, resp)
        if found is not None:
            cls, message = found
            message = message or truncated_message
            from ._mistakes import unreached_from

            unreached = unreached_from(message)  # the gateway's "never reached" 400: the class Python raises
            if unreached is not None:
                return unreached
            no_login = identity_error(message)
            if no_login is not None:
                return no_login
            prefix = f"{cls}: "
            return CatalogAccessError(chain_hint(message.removeprefix(prefix)), ICEBERG_REST_EXCEPTIONS[cls], cls)
        return original(info, truncated_message, resp, *args, **kwargs)

    convert._lakesession = True  # type: ignore[attr-defined]
    core.convert_exception = convert
