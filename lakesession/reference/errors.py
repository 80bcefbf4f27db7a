"""Iceberg REST errors, mapped from exceptions to ``IcebergErrorResponse`` in one place.

Hierarchy::

    CatalogError                      (500 InternalServerError)
    ├── BadRequest                    400 BadRequestException
    ├── NotAuthorized                 401 NotAuthorizedException
    ├── Forbidden                     403 ForbiddenException
    ├── NotFound                      404 NotFoundException
    │   ├── NoSuchNamespace           404 NoSuchNamespaceException
    │   ├── NoSuchTable               404 NoSuchTableException
    │   └── NoSuchView                404 NoSuchViewException
    ├── NotAcceptable                 406 UnsupportedOperationException
    ├── Conflict                      409 AlreadyExistsException
    │   ├── NamespaceNotEmpty         409 NamespaceNotEmptyException
    │   └── CommitFailed              409 CommitFailedException
    └── ServiceUnavailable            503 ServiceUnavailableException

Every response a client can cause carries one of these bodies; a client mistake
never becomes a 500. Neither does an outage of the catalog's database: a lost or refused
connection (SQLAlchemy ``OperationalError``/``InterfaceError``, a pool timeout) is a 503 with a
Retry-After growing with the outage, so clients retry and the server recovers by itself (the
engine pre-pings pooled connections) — no restart.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException

logger = logging.getLogger(__name__)


class CatalogError(Exception):
    """Base of every error the catalog answers with an ``IcebergErrorResponse``."""

    status: int = 500
    type: str = "InternalServerError"

    def __init__(self, message: str, *, type: str | None = None, headers: dict[str, str] | None = None):
        message = message.replace("\x1f", ".")  # pyiceberg's own messages name a namespace by its stored key
        super().__init__(message)
        self.message = message
        if type is not None:
            self.type = type
        self.headers = headers or {}


class BadRequest(CatalogError):
    status, type = 400, "BadRequestException"


class NotAuthorized(CatalogError):
    status, type = 401, "NotAuthorizedException"

    def __init__(self, message: str = "Not authorized: a valid bearer token is required", **kw: Any):
        kw.setdefault("headers", {"WWW-Authenticate": 'Bearer realm="lakesession"'})
        super().__init__(message, **kw)


class Forbidden(CatalogError):
    status, type = 403, "ForbiddenException"


class NotFound(CatalogError):
    status, type = 404, "NotFoundException"


class NoSuchNamespace(NotFound):
    type = "NoSuchNamespaceException"


class NoSuchTable(NotFound):
    type = "NoSuchTableException"


class NoSuchView(NotFound):
    type = "NoSuchViewException"


class NotAcceptable(CatalogError):
    status, type = 406, "UnsupportedOperationException"


class Conflict(CatalogError):
    status, type = 409, "AlreadyExistsException"


class NamespaceNotEmpty(Conflict):
    type = "NamespaceNotEmptyException"


class CommitFailed(Conflict):
    type = "CommitFailedException"


class ServiceUnavailable(CatalogError):
    status, type = 503, "ServiceUnavailableException"


def error_body(status: int, type: str, message: str) -> dict[str, Any]:
    """The spec's ``IcebergErrorResponse`` (never with a stack: it would leak internals)."""
    return {"error": {"message": message, "type": type, "code": status}}


def error_response(exc: CatalogError) -> JSONResponse:
    return JSONResponse(error_body(exc.status, exc.type, exc.message), status_code=exc.status, headers=exc.headers)


_HTTP_TYPES = {
    400: "BadRequestException",
    401: "NotAuthorizedException",
    403: "ForbiddenException",
    404: "NotFoundException",
    405: "MethodNotAllowedException",
    406: "UnsupportedOperationException",
    409: "AlreadyExistsException",
    413: "BadRequestException",
    415: "BadRequestException",
    422: "BadRequestException",
}


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
        parts.append(f"{where or 'body'}: {err.get('msg', 'invalid')}")
    return "Malformed request: " + "; ".join(parts)


def database_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` means the database cannot be used right now (down, unreachable, connection lost),
    as opposed to a bug in a query."""
    if isinstance(exc, sa_exc.TimeoutError):  # no pooled connection came free: connections hang
        return True
    return isinstance(exc, sa_exc.DBAPIError) and (
        exc.connection_invalidated or isinstance(exc, (sa_exc.OperationalError, sa_exc.InterfaceError))
    )


class _Outage:
    """Retry-After for a database outage: the seconds it has lasted so far (1-60); a failure more
    than 10 s after the previous one starts a new outage."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since = self._last = -math.inf

    def retry_after(self) -> int:
        now = time.monotonic()
        with self._lock:
            if now - self._last > 10:
                self._since = now
            self._last = now
            return max(1, min(60, math.ceil(now - self._since)))


_OAUTH_PATHS = ("/oidc/", "/v1/oauth/")


def install_error_handlers(app: FastAPI) -> None:
    """Route every failure through ``IcebergErrorResponse``."""

    @app.exception_handler(CatalogError)
    async def _catalog_error(_: Request, exc: CatalogError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body(400, "BadRequestException", _validation_message(exc)), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        status = exc.status_code
        type_ = _HTTP_TYPES.get(status, "BadRequestException" if status < 500 else "InternalServerError")
        return JSONResponse(error_body(status, type_, str(exc.detail)), status_code=status, headers=exc.headers)

    outage = _Outage()

    @app.exception_handler(sa_exc.DBAPIError)
    @app.exception_handler(sa_exc.TimeoutError)
    async def _database_error(request: Request, exc: Exception) -> JSONResponse:
        if not database_unavailable(exc):
            return await _unexpected(request, exc)
        retry_after = outage.retry_after()
        cause = type(getattr(exc, "orig", None) or exc).__name__  # by type: a driver message may name the server
        logger.warning("database unavailable on %s %s (%s); answering 503", request.method, request.url.path, cause)
        message = f"The catalog's database is unavailable ({type(exc).__name__}); retry in {retry_after} s"
        headers = {"Retry-After": str(retry_after)}
        if request.url.path.startswith(_OAUTH_PATHS):  # OAuth clients read RFC 6749 error bodies
            body = {"error": "temporarily_unavailable", "error_description": message}
            return JSONResponse(body, status_code=503, headers={**headers, "Cache-Control": "no-store"})
        return JSONResponse(error_body(503, "ServiceUnavailableException", message), status_code=503, headers=headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # a backstop behind ``guard.RequestGuard`` (which handles the app's own failures): the server
        # aborts the connection after this, so say so
        logger.exception("internal error on %s %s", request.method, request.url.path)
        return JSONResponse(
            error_body(500, "InternalServerError", f"Internal server error ({type(exc).__name__})"),
            status_code=500,
            headers={"Connection": "close"},
        )
