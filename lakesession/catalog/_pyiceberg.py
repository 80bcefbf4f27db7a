"""pyiceberg's RestCatalog with the session's token source as its AuthManager.

pyiceberg asks its AuthManager for a header on every request, so tokens the
identity layer refreshes are picked up without rebuilding the catalog.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.rest.auth import AuthManager
from pyiceberg.exceptions import RESTError
from requests import Session
from typing_extensions import override

from ..errors import CatalogUnreachableError
from ._refusals import config_refusal
from ._retry import IdempotentAdapter, KeySupport


class _Source(Protocol):
    def token(self) -> str: ...


class TokenSourceAuthManager(AuthManager):
    """A pyiceberg ``AuthManager`` backed by a lakesession token source."""

    def __init__(self, source: _Source):
        self._source = source

    @override
    def auth_header(self) -> str | None:
        token = self._source.token()
        return f"Bearer {token}" if token else None  # no identity (identity='none'): no header

    def __repr__(self) -> str:
        return "TokenSourceAuthManager(***)"


class IdempotentRestCatalog(RestCatalog):
    """pyiceberg's RestCatalog whose mutations carry an ``Idempotency-Key`` and are retried with it
    after a dropped connection (``_retry``): a commit the catalog saved is never applied twice."""

    def __init__(self, name: str, **properties: Any):
        self.key_support = KeySupport()  # before super().__init__: it fetches /v1/config through our session
        super().__init__(name, **properties)

    @override
    def _create_session(self) -> Session:
        session = super()._create_session()
        adapter = IdempotentAdapter(self.key_support)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        return session


def rest_catalog(
    name: str, uri: str, source: _Source, *, warehouse: str | None = None, **properties: Any
) -> IdempotentRestCatalog:
    props: dict[str, Any] = {
        "uri": uri,
        "auth": {
            "type": "custom",
            "impl": f"{TokenSourceAuthManager.__module__}.{TokenSourceAuthManager.__qualname__}",
            "custom": {"source": source},
        },
        **properties,
    }
    if warehouse:
        props["warehouse"] = warehouse
    try:
        return IdempotentRestCatalog(name, **props)  # fetches /v1/config
    except requests.ConnectionError as exc:  # the first call of this catalog found nothing there: a wrong uri=
        raise CatalogUnreachableError(uri, _why(exc)) from None
    except RESTError as exc:  # and its subclasses (Nessie's 500 for an unknown warehouse)
        refused = config_refusal(exc, uri=uri, warehouse=warehouse)
        if refused is None:
            raise
        raise refused from None


def _why(exc: requests.ConnectionError) -> str:
    """The innermost reason of a ``requests`` connection failure (urllib3 wraps it twice), without the URL."""
    text = str(exc)
    for marker in ("Failed to establish a new connection: ", "Caused by "):
        if marker in text:
            text = text.split(marker, 1)[1]
    return re.sub(r"[\x27\")\s]+$", "", text).strip() or type(exc).__name__
