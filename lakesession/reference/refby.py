"""``referenced-by`` as it arrives: the raw query parameter, and the rule that view chains only read.

A leaf module (it imports only errors), so the request context can refuse chained writes without
importing view security, which imports the context for its types.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_plus

from fastapi import Request

from .._wire.referenced_by import PARAM
from .errors import BadRequest, Forbidden

_SIGN_ROUTE = re.compile(r"^/v1/[^/]+/namespaces/[^/]+/tables/[^/]+/sign$")  # not a commit to a table named "sign"


def raw_param(request: Request, name: str = PARAM) -> str | None:
    """The raw (undecoded) value of a query parameter: ``%2C`` must survive until after splitting."""
    values = [v for k, _, v in (p.partition("=") for p in request.url.query.split("&") if p) if unquote_plus(k) == name]
    if len(values) > 1:
        raise BadRequest(f"Malformed request: {name} given more than once")
    return values[0] if values else None


def refuse_chained_write(request: Request) -> None:
    """A view chain only ever grants reads: a write request (commit, create, drop…) carrying
    ``referenced-by`` is refused outright (403). The signer (POST) checks its own operations."""
    if request.method in ("GET", "HEAD") or _SIGN_ROUTE.match(request.url.path):
        return
    raw = raw_param(request)
    if raw is not None and raw.strip():
        raise Forbidden(
            "Access through a view chain is read-only: send this request without referenced-by "
            "(as a principal that holds the privilege itself)"
        )
