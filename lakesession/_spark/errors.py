"""Readable Python errors for catalog failures inside Spark.

pyspark turns JVM exceptions it does not know into ``Py4JJavaError`` with a
Java stack trace. Iceberg's REST exceptions (403 Forbidden, 401, 5xx) are
among them, so a revoked grant would greet the user with hundreds of lines of
Java. We wrap pyspark's ``convert_exception`` (the one documented place it
maps JVM exceptions) so these become ``CatalogAccessError`` carrying the
catalog's own message.
"""

from __future__ import annotations

from typing import Any

from pyspark.errors.exceptions import captured

from ..errors import CatalogAccessError as _CatalogAccessError

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
        captured.CapturedException.__init__(self, desc=message, stackTrace="")
        self.kind = kind
        self.java_class = java_class
        self.status = None

    def __str__(self) -> str:
        return self.desc or self.kind


def _iceberg_cause(e: Any) -> tuple[Any, str] | None:
    gw = captured.SparkContext._gateway
    seen = 0
    while e is not None and seen < 20:
        for cls in ICEBERG_REST_EXCEPTIONS:
            if captured.is_instance_of(gw, e, cls):
                return e, cls
        e = e.getCause()
        seen += 1
    return None


def convert_exception(e: Any) -> captured.CapturedException:
    found = _iceberg_cause(e)
    if found is not None:
        cause, cls = found
        message = str(cause.getMessage() or "")
        return CatalogAccessError(message, ICEBERG_REST_EXCEPTIONS[cls], cls)
    return _original(e)


def install_error_conversion() -> None:
    """Idempotently route pyspark's exception conversion through ``convert_exception``."""
    if captured.convert_exception is not convert_exception:
        captured.convert_exception = convert_exception
