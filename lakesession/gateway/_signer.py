"""Remote signing through the gateway: the JVM's S3 signer calls reach the catalog as the user.

With ``s3.remote-signing-enabled``, Iceberg's ``S3V4RestSignerClient`` posts every S3 request to
its signer endpoint with the catalog's bearer token — in the JVM, the per-session secret. Where
that endpoint comes from depends on the Iceberg release (read from its source and jars):

* 1.10/1.11: ``s3.signer.endpoint`` (default ``v1/aws/s3/sign``) resolved against ``s3.signer.uri``
  (default: the catalog ``uri``);
* 1.12: ``signer.endpoint``, else ``rest.remote-signing.endpoint`` — which the REST client itself sets
  on every table FileIO to the table's ``v1/{prefix}/namespaces/{ns}/tables/{t}/sign``, after the
  table config, so a catalog cannot change it — resolved against ``signer.uri``, else the catalog
  ``uri``. ``s3.signer.*`` is ignored: with only those set, 1.12 signed through the gateway's *main*
  route (the catalog's per-table path; Nessie has none there: 404).

Both releases keep one HTTP client (no base URI) and one auth manager per JVM in static fields; the
auth session is cached per bearer token (per session secret here) and the endpoint is per FileIO, so
neither crosses sessions once every release gets an absolute endpoint. So the gateway writes an
absolute ``/sign/{id}`` URL of its own into ``s3.signer.endpoint`` *and* ``signer.endpoint``, one
route per signer target the catalog named, and forwards each call there with the user's token; its
catalog routes refuse signer paths (``signer_path``), so a signer call cannot go anywhere else.
The route is deliberately narrow:

* only ``POST`` to exactly ``/sign/{id}``; ``{id}`` names a signer target the catalog returned in
  a table load of this session — the engine cannot choose the path, so the route reaches no other
  catalog endpoint (extra segments, unknown ids, other methods are refused before any upstream call);
* the target must be on the catalog's own origin: the user's token is never sent anywhere else;
* ``referenced-by`` is the one of the route the table was loaded through (none on the main route),
  as for every other call of that route;
* the body passes unchanged: what may be signed is the catalog's decision (its allowlist, the
  table's location, the user's privilege); its refusals pass through;
* replies say ``Cache-Control: no-store``: Iceberg keeps signatures marked ``private`` for 30 s
  in one cache for the whole JVM, keyed by method and URL only — another session's SparkSession
  (another user) on the same JVM would reuse them, and a read with another ``Range`` would
  reuse a signature covering the first one.

In a remote-signing session the gateway also removes any storage credential a catalog vends anyway,
so the JVM's table IO never holds one.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

import httpx

from ._accesslog import AccessLog, AccessRecord
from ._chains import ChainRoutes, strip_referenced_by, with_referenced_by
from ._upstream import Reply, Upstream, error_reply

__all__ = ["SIGN_PREFIX", "SignerRoute", "SignerRoutes", "forward_sign", "rewrite_signing", "signer_path"]

SIGN_PREFIX = "/sign/"
ENABLED = "s3.remote-signing-enabled"
SIGNER_URI = "s3.signer.uri"  # Iceberg 1.10/1.11
SIGNER_ENDPOINT = "s3.signer.endpoint"
SIGNER_URI_112 = "signer.uri"  # Iceberg 1.12 (deprecated there, still honoured before its per-table default)
SIGNER_ENDPOINT_112 = "signer.endpoint"
DEFAULT_ENDPOINT = "v1/aws/s3/sign"  # Iceberg's S3V4RestSignerClient default
# parts of config keys that carry storage credentials or say where to get them (any FileIO)
_CREDENTIAL_MARKERS = ("access-key", "secret", "session-token", "sas-token", "password", "account-key", "oauth2.token")
MAX_ROUTES = 65_536
# signer paths of the spec and of Iceberg's clients: the per-table one and the legacy S3 signer (and below it)
_SIGNER_PATH = re.compile(r"(/namespaces/[^/]+/tables/[^/]+/sign|/aws/s3/sign(/.*)?)$")


@dataclass(frozen=True)
class SignerRoute:
    """One signer target of the catalog, as a table load of this session named it."""

    id: str
    target: str  # absolute URL of the catalog's signer endpoint (query included)
    object: str  # "table ns.t": for the access log
    chain: str | None  # the chain route the table was loaded through (its id), or None


class SignerRoutes:
    """The signer targets the catalog named so far; ids are stable per (target, chain)."""

    def __init__(self, maximum: int = MAX_ROUTES):
        self._routes: OrderedDict[str, SignerRoute] = OrderedDict()
        self._paths: dict[str, int] = {}  # decoded path of each target -> routes naming it
        self._lock = threading.Lock()
        self._maximum = maximum
        self.ever = False  # has the catalog enabled remote signing for any table yet (it offers signing)

    def register(self, target: str, obj: str, chain: str | None) -> SignerRoute:
        rid = hashlib.sha256(f"{chain or ''}\n{target}".encode()).hexdigest()[:24]
        with self._lock:
            self.ever = True
            route = self._routes.get(rid)
            if route is None:
                route = self._routes[rid] = SignerRoute(rid, target, obj, chain)
                path = _decoded_path(target)
                self._paths[path] = self._paths.get(path, 0) + 1
                while len(self._routes) > self._maximum:
                    _, old = self._routes.popitem(last=False)
                    gone = _decoded_path(old.target)
                    self._paths[gone] -= 1
                    if not self._paths[gone]:
                        del self._paths[gone]
            else:
                self._routes.move_to_end(rid)
            return route

    def get(self, rid: str) -> SignerRoute | None:
        with self._lock:
            return self._routes.get(rid)

    def names_path(self, path: str) -> bool:
        """Whether a signer target the catalog named has this (decoded, upstream) path."""
        with self._lock:
            return _decoded_path(path) in self._paths

    def __len__(self) -> int:
        return len(self._routes)


def _decoded_path(url_or_path: str) -> str:
    try:
        path = httpx.URL(url_or_path).path
    except (httpx.InvalidURL, TypeError):
        path = url_or_path
    return "/" + path.strip("/")


def signer_path(path: str, upstream_base: str, signers: SignerRoutes) -> bool:
    """Whether ``path`` (a catalog path the engine sent to a catalog route, raw) is a signer endpoint: the
    spec's per-table ``…/tables/{t}/sign``, the legacy ``…/aws/s3/sign``, or a target the catalog named.
    Signing goes only through the ``/sign/{id}`` routes the gateway handed out: on a catalog route a
    signer call would pick its own path (and, with Iceberg 1.12's per-table default, miss the catalog's
    real signer: Nessie answers 404 there)."""
    decoded = _decoded_path(path)
    if _SIGNER_PATH.search(decoded):
        return True
    try:
        prefix = httpx.URL(upstream_base).path.rstrip("/")
    except (httpx.InvalidURL, TypeError):
        prefix = ""
    return signers.names_path(prefix + decoded)


def resolve(base: str, endpoint: str) -> str:
    """``endpoint`` against ``base`` as Iceberg's ``RESTUtil.resolveEndpoint`` does (absolute wins)."""
    if endpoint.startswith(("http://", "https://")):
        return endpoint
    return base.rstrip("/") + ("" if endpoint.startswith("/") else "/") + endpoint


def rewrite_signing(
    body: bytes,
    upstream_base: str,
    route_base: str,
    gateway_root: str,
    register: SignerRoutes,
    obj: str,
    chain: str | None,
    *,
    strip_credentials: bool = False,
) -> bytes:
    """A table result whose signer settings point at the gateway's ``/sign/{id}`` routes; with
    ``strip_credentials`` (a remote-signing session) without any storage credential either."""
    signing = b"remote-signing-enabled" in body
    if not signing and not (strip_credentials and (b"access-key-id" in body or b"storage-credentials" in body)):
        return body
    try:
        doc = json.loads(body)
    except ValueError:
        return body
    if not isinstance(doc, dict) or "metadata" not in doc:
        return body
    config = doc.get("config")
    config = config if isinstance(config, dict) else {}
    holders = [config] + [c.get("config") or {} for c in doc.get("storage-credentials") or [] if isinstance(c, dict)]
    for holder in holders:
        if str(holder.get(ENABLED, "")).lower() != "true":
            continue
        uri = _first(holder, config, SIGNER_URI, SIGNER_URI_112) or upstream_base
        endpoint = _first(holder, config, SIGNER_ENDPOINT, SIGNER_ENDPOINT_112) or DEFAULT_ENDPOINT
        target = resolve(str(uri), str(endpoint))
        route = register.register(target, obj, chain)
        own = f"{gateway_root}{SIGN_PREFIX}{route.id}"  # absolute: whatever base URI a release picks, this wins
        holder[SIGNER_URI] = route_base
        holder[SIGNER_ENDPOINT] = own
        holder[SIGNER_ENDPOINT_112] = own
    if strip_credentials:
        doc.pop("storage-credentials", None)
        for key in [k for k in config if is_credential_key(k)]:
            del config[key]
        if config:
            doc["config"] = config
    return json.dumps(doc).encode()


def _first(holder: dict[str, object], config: dict[str, object], *keys: str) -> str | None:
    """The first of ``keys`` the holder names, else the table config (a catalog may name either release's)."""
    for source in (holder, config):
        for key in keys:
            value = source.get(key)
            if isinstance(value, str) and value:
                return value
    return None


def is_credential_key(key: str) -> bool:
    """Whether a table config key carries a storage credential (or where to refresh one)."""
    k = key.lower()
    if k.endswith("expires-at-ms"):
        return False
    return "credential" in k or any(m in k for m in _CREDENTIAL_MARKERS)


def forward_sign(
    method: str,
    rid: str,
    query: str,
    req_headers: dict[str, str],
    body: bytes,
    signers: SignerRoutes,
    chains: ChainRoutes,
    upstream: Upstream,
    access_log: AccessLog,
) -> Reply:
    """One call on ``/sign/{rid}``: refused unless it is exactly a route of ``signers`` on the catalog's
    origin, else forwarded there as the user (with the route's view chain, if any) and logged."""
    if method != "POST":
        return error_reply(405, "BadRequestException", f"Method {method} is not allowed on a signer route (POST)")
    route = signers.get(rid) if rid and "/" not in rid and not query else None
    if route is None:
        return error_reply(
            403,
            "ForbiddenException",
            "Unknown signer route: signer routes are exactly the /sign/{id} the gateway returned in a table load",
        )
    if not upstream.same_origin(route.target):
        return error_reply(
            403,
            "ForbiddenException",
            f"The catalog named a signer for {route.object} off its own origin: "
            "lakesession sends the user's token only to the catalog",
        )
    chain = chains.get(route.chain) if route.chain else None
    if route.chain and chain is None:
        return error_reply(403, "ForbiddenException", "Unknown view-chain catalog for this signer route")
    url = httpx.URL(route.target)
    q = url.query.decode("latin-1")
    q = with_referenced_by(q, chain.referenced_by) if chain else strip_referenced_by(q)
    url = url.copy_with(query=q.encode("latin-1") or None)
    headers = {k: v for k, v in req_headers.items() if k in ("content-type", "accept", "x-request-id")}
    started = time.monotonic()
    status, content, out_headers = upstream.send("POST", url, url.path, headers, body)
    out_headers = {**out_headers, "cache-control": "no-store"}  # never reused (see the module docstring)
    access_log.add(
        AccessRecord(
            time=time.time(),
            action="sign_request",
            object=route.object,
            status=status,
            duration_ms=round((time.monotonic() - started) * 1000, 2),
            request_id=out_headers.get("x-request-id"),
            via="upstream",
            chain=chain.display if chain else None,
        )
    )
    return status, content, out_headers


NO_SIGNING_MARKER = "does not offer remote signing"


def config_endpoints(config_body: bytes) -> list[str]:
    """The endpoints a ``/v1/config`` answer lists (empty when it lists none)."""
    try:
        endpoints = json.loads(config_body).get("endpoints")
    except (ValueError, AttributeError):
        return []
    return [str(e) for e in endpoints] if isinstance(endpoints, list) else []


def refuse_unsigned(
    content: bytes, upstream: str, obj: str, endpoints: list[str] | None, signing_seen: bool
) -> Reply | None:
    """A remote-signing session's load of an S3 table from a catalog that shows no sign of remote signing
    (SeaweedFS ignores the request; it vends nothing, or credentials the gateway strips): a 400 naming what
    the catalog offers, instead of a table the JVM cannot read (no credentials, no signer). None when this
    load is signed, the catalog signed an earlier one or lists a sign endpoint (then a missing signer is a
    matter of privilege, the catalog's to say), or the table is not on S3 (a ``file://`` warehouse)."""
    if b"remote-signing-enabled" in content or signing_seen or any("/sign" in e for e in endpoints or []):
        return None
    try:
        doc = json.loads(content)
        location = str(doc.get("metadata-location") or doc["metadata"].get("location") or "")
    except (ValueError, KeyError, AttributeError, TypeError):
        return None
    if not location.startswith(("s3://", "s3a://", "s3n://")):
        return None
    vended = bool(doc.get("storage-credentials")) or any("access-key-id" in k for k in (doc.get("config") or {}))
    listed = f"its /v1/config lists {len(endpoints)} endpoints" if endpoints else "its /v1/config lists no endpoints"
    creds = "with" if any(e.endswith("/credentials") for e in endpoints or []) else "no"
    message = (
        f"The catalog at {upstream} {NO_SIGNING_MARKER}: it answered a remote-signing load of {obj} "
        f"{'with vended credentials' if vended else 'without signing settings'} ({listed}, {creds} …/credentials, "
        "and sets no s3.remote-signing-enabled). "
        "Fix: lakesession.connect(..., access='vended-credentials') (the default), or ask the catalog's operator."
    )
    return error_reply(400, "BadRequestException", message)
