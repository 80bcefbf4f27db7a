"""The small Starlette <-> authlib adapter (authlib ships no Starlette server integration).

``read_form`` decodes an ``application/x-www-form-urlencoded`` body (the only
body the token endpoint accepts) with the standard library, because
Starlette's own form parser needs ``python-multipart``. ``StarletteOAuth2Request``
and ``FormPayload`` present it to authlib's grants and client authentication the
way authlib's Flask/Django integrations do; ``to_response`` turns authlib's
``(status, body, headers)`` triple back into a Starlette response.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any
from urllib.parse import parse_qsl

from authlib.oauth2.rfc6749 import OAuth2Payload, OAuth2Request
from authlib.oauth2.rfc6749.util import extract_basic_authorization
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

MAX_FORM_BYTES = 64 * 1024
FORM_CONTENT_TYPE = "application/x-www-form-urlencoded"


class FormError(ValueError):
    """The request body is not a usable form (wrong content type, too large, undecodable)."""


async def read_form(request: Request) -> list[tuple[str, str]]:
    """The body's form fields in order (empty for an empty body)."""
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise FormError("Request body too large")
    if not body:
        return []
    if content_type != FORM_CONTENT_TYPE:
        raise FormError(f"Request body must be {FORM_CONTENT_TYPE}")
    try:
        return parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=True)
    except (UnicodeDecodeError, ValueError):
        raise FormError("Malformed form body") from None


class FormPayload(OAuth2Payload):
    """authlib's view of the request parameters: the first value of each, plus every value."""

    def __init__(self, pairs: list[tuple[str, str]]):
        self._datalist: dict[str, list[str]] = defaultdict(list)
        for k, v in pairs:
            self._datalist[k].append(v)
        self._data = {k: vs[0] for k, vs in self._datalist.items()}

    @property
    def data(self) -> dict[str, str]:
        return self._data

    @property
    def datalist(self) -> dict[str, list[str]]:
        return self._datalist

    def repeated(self, *, allowed: tuple[str, ...] = ()) -> list[str]:
        """Parameters sent more than once (RFC 6749 §3.2 forbids that), except ``allowed`` ones."""
        return sorted(k for k, vs in self._datalist.items() if len(vs) > 1 and k not in allowed)


def client_address(request: Request) -> str:
    """The caller's address as uvicorn reports it: the socket's peer, or the forwarded client when the peer is
    one of the operator's ``trusted_proxies`` (none by default; uvicorn's own 127.0.0.1 default is not used)."""
    return request.client.host if request.client is not None else "unknown"


class StarletteOAuth2Request(OAuth2Request):
    """An ``OAuth2Request`` built from an already-read Starlette request."""

    def __init__(self, request: Request, pairs: list[tuple[str, str]]):
        # authlib checks the URI: plain http is refused unless loopback (or AUTHLIB_INSECURE_TRANSPORT)
        super().__init__(method=request.method, uri=str(request.url), headers=request.headers)
        self.payload = FormPayload(pairs)
        self._query = dict(request.query_params)
        self.address = client_address(request)

    @property
    def claimed_client_id(self) -> str:
        """The client id the request names (Basic auth or form), before any authentication; bounded for keys."""
        basic_id, _ = extract_basic_authorization(self.headers)
        return (basic_id or self.payload.data.get("client_id") or "")[:255]

    @property
    def args(self) -> dict[str, str]:
        return self._query

    @property
    def form(self) -> dict[str, str]:
        return self.payload.data

    def __repr__(self) -> str:  # never show parameters (they carry secrets)
        return f"<StarletteOAuth2Request {self.method} grant_type={self.payload.grant_type!r}>"


async def oauth2_request(request: Request) -> StarletteOAuth2Request:
    """Read and wrap a Starlette request for authlib (raises ``FormError`` or authlib's ``InsecureTransportError``)."""
    return StarletteOAuth2Request(request, await read_form(request))


def to_response(status: int, body: Any, headers: list[tuple[str, str]] | dict[str, str] | None) -> Response:
    """authlib's ``(status, body, headers)`` as a Starlette response."""
    hdrs = dict(headers or [])
    hdrs.pop("Content-Type", None)
    if isinstance(body, (dict, list)):
        return JSONResponse(body, status_code=status, headers=hdrs)
    return Response(body or b"", status_code=status, headers=hdrs)


def oauth_error(error: str, description: str, status: int = 400) -> JSONResponse:
    """An RFC 6749 §5.2 error response (for failures before authlib gets the request)."""
    return JSONResponse(
        {"error": error, "error_description": description},
        status_code=status,
        headers={"Cache-Control": "no-store", "Pragma": "no-cache"},
    )
