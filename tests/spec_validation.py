"""Record what the catalog answers and validate every answer against the official Iceberg REST spec.

    recorder = SpecRecorder()
    handle = start(wrap_app=recorder.wrap)
    ...  # drive the catalog (pyiceberg, httpx, ...)
    assert recorder.validate_all() == []

``wrap`` is a pure ASGI middleware: it records every ``/v1/...`` exchange (method, raw path,
query string, request headers and body, response status, headers and full body, however many
``http.response.body`` messages it is streamed in) and never changes what flows through.
``validate_all`` checks each recorded response with openapi-core against the spec shipped in
the package (``lakesession/reference/spec/rest-catalog-open-api.yaml``): the operation must
exist, the status must be documented for it (exactly, as a ``4XX``-style range or ``default``),
the content type must be one the spec lists and the body must match the schema. Requests
that address no operation of the spec (another ``{prefix}``, an unknown path or method) must
be refused with an ``IcebergErrorResponse``. The few places where the spec file contradicts
itself are corrected, narrowly and with the reason, in ``_patch_spec_quirks``.

Errors read ``METHOD /path?query -> status: what is wrong at which JSON location``.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError as SchemaValidationError
from jsonschema.exceptions import best_match
from openapi_core import Config, OpenAPI
from openapi_core.templating.paths.exceptions import OperationNotFound, PathNotFound
from openapi_core.testing import MockRequest, MockResponse

from lakesession.reference.openapi import SPEC_PATH, official_spec

if not SPEC_PATH.is_file():  # loud at import (collection), never a silent skip of the conformance checks
    raise FileNotFoundError(
        f"the official Iceberg REST spec is missing: {SPEC_PATH}. Restore it from the repository "
        "(it ships in the package: lakesession/reference/spec/rest-catalog-open-api.yaml)."
    )

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]

HOST_URL = "http://catalog.invalid"


@dataclass
class Exchange:
    """One recorded request/response pair."""

    method: str
    path: str  # as sent on the wire (percent-encoded), e.g. /v1/lakesession/namespaces/a%1Fb
    query_string: str
    request_headers: list[tuple[str, str]]
    request_body: bytes = b""
    status: int = 0
    response_headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    complete: bool = False

    def header(self, name: str) -> str | None:
        name = name.lower()
        return next((v for k, v in self.response_headers if k == name), None)

    def __str__(self) -> str:
        q = f"?{self.query_string}" if self.query_string else ""
        return f"{self.method} {self.path}{q} -> {self.status}"


# --------------------------------------------------------------------------------------------
# The spec, prepared once per process.
# --------------------------------------------------------------------------------------------


def _patch_spec_quirks(spec: dict[str, Any]) -> dict[str, Any]:
    """Narrow, documented corrections of the spec file itself (never of what the server sends).

    Each entry fixes a place where the YAML contradicts its own examples, its prose or the RFC
    it cites, so that a response that is right by the spec's intent is not reported as wrong.
    Everything else the server sends must match the YAML as written.
    """
    # One fixed server for every recorded request (the spec's servers are templates).
    spec["servers"] = [{"url": HOST_URL}]

    # Quirk 1: the view endpoints' error responses (and the UnsupportedOperationResponse
    # component) use the bare `ErrorModel` as their schema, while their own examples
    # (NoSuchViewError, ...), every other endpoint and the description of
    # `IcebergErrorResponse` ("JSON wrapper for all error responses (non-2xx)") wrap it as
    # {"error": ErrorModel}; Iceberg Java's ErrorResponseParser only accepts the wrapper.
    # Same bug as apache/iceberg#8914 fixed for the other endpoints; see also #10571.
    # Narrow fix: only error statuses whose JSON schema is exactly `$ref: ErrorModel`.
    def wrap_error_model(code: str, response: dict[str, Any]) -> None:
        if not (code[:1] in "45" and (code.upper().endswith("XX") or code.isdigit())):
            return
        media = (response.get("content") or {}).get("application/json") or {}
        if media.get("schema") == {"$ref": "#/components/schemas/ErrorModel"}:
            media["schema"] = {"$ref": "#/components/schemas/IcebergErrorResponse"}

    for item in spec["paths"].values():
        for _method, op in item.items():
            if isinstance(op, dict) and "responses" in op:
                for code, response in op["responses"].items():
                    wrap_error_model(str(code), response)
    wrap_error_model("406", spec["components"]["responses"]["UnsupportedOperationResponse"])

    # Quirk 2: `OAuthTokenResponse.token_type` is an enum of lower-case names, but it cites
    # RFC 6749 §7.1, and RFC 6749 §5.1 says the token_type "value is case insensitive"; RFC 6750
    # itself spells it "Bearer" (what OAuth servers, including the embedded issuer, send).
    # Narrow fix: also accept the capitalised spelling of the same three values.
    token_type = spec["components"]["schemas"]["OAuthTokenResponse"]["properties"]["token_type"]
    token_type["enum"] = list(dict.fromkeys([*token_type["enum"], "Bearer", "BEARER", "Mac", "MAC"]))

    # Quirk 3: `viewExists` (HEAD .../views/{view}) is the only secured operation without a 403
    # response, although `tableExists` and `namespaceExists` have one and the OAuth2 security
    # scheme says "For unauthorized requests, services should return an appropriate 401 or 403
    # response". Narrow fix: give viewExists the same ForbiddenResponse as tableExists.
    view_exists = spec["paths"]["/v1/{prefix}/namespaces/{namespace}/views/{view}"]["head"]["responses"]
    view_exists.setdefault("403", {"$ref": "#/components/responses/ForbiddenResponse"})

    # Quirk 4: `PrimitiveTypeValue` (a field's `initial-default`/`write-default`, format v3) is a
    # `oneOf` of alternatives that overlap by construction: Integer/Long/Float/Double values are all
    # JSON numbers, String/UUID/Date/Time/Timestamp*/Fixed/Binary/Decimal values all JSON strings, so
    # no default value (not even the spec's own examples, e.g. 34) is valid under exactly one. Which
    # alternative applies is fixed by the field's `type`, not by the value. Narrow fix: `anyOf`.
    primitive = spec["components"]["schemas"]["PrimitiveTypeValue"]
    primitive["anyOf"] = primitive.pop("oneOf")
    return spec


@functools.lru_cache(maxsize=1)
def _error_validator() -> Draft202012Validator:
    """`IcebergErrorResponse`, for answers to requests that are no operation of the spec."""
    schemas = official_spec()["components"]["schemas"]
    return Draft202012Validator(
        {"$ref": "#/components/schemas/IcebergErrorResponse", "components": {"schemas": schemas}}
    )


@functools.lru_cache(maxsize=1)
def _openapi() -> OpenAPI:
    spec = _patch_spec_quirks(official_spec())
    # Skip openapi-core's ~2 s spec check: test_fuzz validates the merged document that embeds it.
    return OpenAPI.from_dict(spec, config=Config(spec_validator_cls=None))


# --------------------------------------------------------------------------------------------
# Recording.
# --------------------------------------------------------------------------------------------


def _decode_headers(raw: Any) -> list[tuple[str, str]]:
    return [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in raw or ()]


class SpecRecorder:
    """ASGI middleware recording ``/v1/...`` exchanges, and their validation against the spec."""

    def __init__(
        self, path_prefix: str = "/v1/", catalog_prefix: str | None = None, extension_paths: list[str] | None = None
    ):
        self.path_prefix = path_prefix
        #: The REST ``{prefix}`` this server serves (read from the wrapped app when not given);
        #: requests under any other prefix address no operation of the spec.
        self.catalog_prefix = catalog_prefix
        #: Path templates the app serves under ``/v1`` beyond the Iceberg spec (e.g. the legacy
        #: ``/v1/aws/s3/sign``), read from the wrapped app when not given. The official spec says
        #: nothing about them: only their error bodies are checked (``IcebergErrorResponse``).
        self.extension_paths = extension_paths
        self._lock = threading.Lock()
        self._exchanges: list[Exchange] = []
        self._validated: dict[int, list[str]] = {}  # id(exchange) -> its errors (validated once)

    # -- recording ----------------------------------------------------------------------------

    def wrap(self, app: ASGIApp) -> ASGIApp:
        recorder = self
        if self.catalog_prefix is None:
            services = getattr(getattr(app, "state", None), "services", None)
            self.catalog_prefix = getattr(getattr(services, "settings", None), "catalog_name", None)
        if self.extension_paths is None:
            self.extension_paths = _extension_paths(app, self.path_prefix)

        async def recording_app(scope: Scope, receive: Any, send: Any) -> None:
            if scope.get("type") != "http" or not scope.get("path", "").startswith(recorder.path_prefix):
                await app(scope, receive, send)
                return
            raw_path = scope.get("raw_path")
            path = raw_path.decode("latin-1") if raw_path else quote(scope["path"])
            ex = Exchange(
                method=scope["method"],
                path=path.split("?", 1)[0],
                query_string=(scope.get("query_string") or b"").decode("latin-1"),
                request_headers=_decode_headers(scope.get("headers")),
            )
            req_chunks: list[bytes] = []
            resp_chunks: list[bytes] = []

            async def recording_receive() -> Message:
                message = await receive()
                if message.get("type") == "http.request":
                    req_chunks.append(message.get("body", b""))
                return message

            async def recording_send(message: Message) -> None:
                kind = message.get("type")
                if kind == "http.response.start":
                    ex.status = message["status"]
                    ex.response_headers = _decode_headers(message.get("headers"))
                elif kind == "http.response.body":
                    resp_chunks.append(message.get("body", b""))
                    if not message.get("more_body", False):
                        ex.complete = True
                await send(message)

            try:
                await app(scope, recording_receive, recording_send)
            finally:
                ex.request_body = b"".join(req_chunks)
                ex.body = b"".join(resp_chunks)
                if ex.status:
                    with recorder._lock:
                        recorder._exchanges.append(ex)

        return recording_app

    @property
    def exchanges(self) -> list[Exchange]:
        with self._lock:
            return list(self._exchanges)

    @property
    def recorded(self) -> int:
        with self._lock:
            return len(self._exchanges)

    def clear(self) -> None:
        with self._lock:
            self._exchanges.clear()
            self._validated.clear()

    # -- validation ---------------------------------------------------------------------------

    def validate_all(self) -> list[str]:
        """One readable line per invalid response (empty when everything conforms)."""
        errors: list[str] = []
        for ex in self.exchanges:
            key = id(ex)
            found = self._validated.get(key)
            if found is None:
                found = self._validated[key] = validate_exchange(
                    ex, catalog_prefix=self.catalog_prefix, extensions=_templates(tuple(self.extension_paths or ()))
                )
            errors.extend(found)
        return errors


def _extension_paths(app: Any, path_prefix: str) -> list[str]:
    """Templates of the operations ``app`` documents under ``path_prefix`` that the spec lacks."""
    if not hasattr(app, "openapi_schema") or not hasattr(app, "routes"):
        return []  # not a FastAPI app: nothing to learn
    from lakesession.reference.openapi import spec_openapi

    official = set(official_spec()["paths"])
    return sorted(p for p in spec_openapi(app)["paths"] if p.startswith(path_prefix) and p not in official)


@functools.lru_cache(maxsize=16)
def _templates(paths: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile("^" + re.sub(r"\\\{[^/]*?\\\}", "[^/]+", re.escape(p)) + "$") for p in paths)


def _content_type(ex: Exchange) -> str:
    ct = ex.header("content-type")
    if ct:
        return ct.lower()
    return "application/json" if ex.body else ""


def _first_message(exc: BaseException) -> str:
    """The most specific message openapi-core has, with a JSON-pointer-ish location, kept short."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        schema_errors = [
            e for e in getattr(current, "schema_errors", None) or () if isinstance(e, SchemaValidationError)
        ]
        if schema_errors:
            err = best_match(schema_errors)
            where = "/".join(str(p) for p in err.absolute_path) or "(body)"
            via = "/".join(str(p) for p in err.absolute_schema_path)
            return _short(f"{type(current).__name__} at {where}: {err.message} [schema: {via}]")
        nxt = current.__cause__ or current.__context__
        if nxt is None:
            return _short(f"{type(current).__name__}: {current}")
        current = nxt
    return _short(f"{type(exc).__name__}: {exc}")


def _short(s: str, limit: int = 400) -> str:
    s = " ".join(s.split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


_UNPREFIXED = ("/v1/config", "/v1/oauth/")


def _outside_the_spec(ex: Exchange, why: str, statuses: set[int] | range) -> list[str]:
    """A request that is no operation of the spec must fail plainly: an expected 4xx, an error body."""
    if ex.status not in statuses:
        return [f"{ex}: {why}, so it must be refused ({_statuses(statuses)}), not answered {ex.status}"]
    if ex.method == "HEAD" and not ex.body:
        return []
    try:
        body = json.loads(ex.body)
    except ValueError:
        return [f"{ex}: {why}; the error body is not JSON"]
    err = best_match(_error_validator().iter_errors(body))
    if err is not None:
        where = "/".join(str(p) for p in err.absolute_path) or "(body)"
        return [_short(f"{ex}: {why}; the error body is no IcebergErrorResponse: at {where}: {err.message}")]
    return []


def _statuses(statuses: set[int] | range) -> str:
    if isinstance(statuses, range):
        return f"{statuses.start}-{statuses.stop - 1}"
    return "/".join(str(s) for s in sorted(statuses))


def validate_exchange(
    ex: Exchange, catalog_prefix: str | None = None, extensions: tuple[re.Pattern[str], ...] = ()
) -> list[str]:
    """Errors of one exchange against the spec (empty list when it conforms).

    Requests that address no operation of the spec (another ``{prefix}``, an unknown path or
    method, e.g. from a fuzzer) cannot be checked against an operation; they must be refused
    with 404/405 (any 4xx for a foreign prefix) and an ``IcebergErrorResponse`` body. Paths
    in ``extensions`` (served by the app beyond the spec) only need error bodies of that shape.
    """
    if not ex.complete:
        return [f"{ex}: response body was never completed (more_body never went False)"]
    if ex.status in (204, 304) and ex.body:
        return [f"{ex}: a {ex.status} response must not have a body, got {len(ex.body)} bytes"]
    ct = _content_type(ex)
    if ex.body and ct.startswith("application/json"):
        try:
            json.loads(ex.body)
        except ValueError as e:
            return [f"{ex}: body is not valid JSON ({e})"]
    if any(t.match(ex.path) for t in extensions):
        if ex.status < 400:
            return []
        return _outside_the_spec(ex, "an extension of this server", range(400, 600))
    if catalog_prefix is not None and not ex.path.startswith(_UNPREFIXED):
        segment = ex.path[len("/v1/") :].split("/", 1)[0]
        if segment != catalog_prefix:
            return _outside_the_spec(
                ex, f"prefix {segment!r} is not this catalog's ({catalog_prefix!r})", range(400, 500)
            )
    request = MockRequest(
        HOST_URL,
        ex.method,
        ex.path,
        args=dict(parse_qsl(ex.query_string, keep_blank_values=True)),
        headers=dict(ex.request_headers),
        data=ex.request_body,
        content_type=next((v for k, v in ex.request_headers if k == "content-type"), "application/json"),
    )
    response = MockResponse(ex.body, status_code=ex.status, headers=dict(ex.response_headers), content_type=ct)
    for err in _openapi().iter_response_errors(request, response):
        if isinstance(err, PathNotFound):
            return _outside_the_spec(ex, "the spec has no such path", {404, 405})
        if isinstance(err, OperationNotFound):
            return _outside_the_spec(ex, f"the spec has no {ex.method} operation on this path", {404, 405})
        return [f"{ex}: {_first_message(err)}"]  # the first message is the readable one
    return []
