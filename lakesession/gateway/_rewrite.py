"""What the gateway changes in catalog answers: URLs back to itself, the JVM's region, refresh endpoint and
assumed key expiry in table configs, and the catalog's namespace separator in paths (pure functions of bytes)."""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

from .._wire.cloudkeys import ADLS_REFRESH, CREDENTIAL_MARKERS, GCS_REFRESH, REFRESH_KEYS, cloud_of, holds_credential

REFRESH_ENDPOINT = "client.refresh-credentials-endpoint"
CREDENTIALS_ENDPOINT = "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials"
JVM_SEPARATOR = "%1F"  # how Iceberg Java (< 1.11) joins namespace levels in a path, always
_SEPARATOR_RE = re.compile("%1F", re.IGNORECASE)
_SAFE_SEPARATOR = re.compile(r"(?:%[0-9A-Fa-f]{2}|[A-Za-z0-9._~-])+")  # never "/", "?" or "%" alone in a path


def default_region() -> str:
    """The region the JVM gets when the catalog names none: the environment's, else us-east-1."""
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def rewrite_table_config(
    body: bytes, upstream_base: str, gateway_base: str, region: str | None = None, refresh_endpoint: str | None = None
) -> bytes:
    """Point every absolute catalog URL in a table's configs (credential refresh endpoint, remote
    signer URI) or a config answer's defaults and overrides (``uri``) at the gateway, so the JVM never
    needs the user's token (relative paths already do).

    A table result without ``client.region`` gets one (the catalog's ``s3.region``, else ``region``):
    Iceberg Java's S3 client cannot start without a region, and catalogs for S3-compatible stores
    (SeaweedFS, MinIO) often advertise none.

    ``refresh_endpoint`` (the gateway's own ``…/credentials`` for this table) is set as the table's
    ``client.refresh-credentials-endpoint`` when vended credentials with an expiry come without one, so
    the JVM refreshes through the gateway even where the catalog has no ``/credentials`` route."""
    urls = upstream_base.encode() in body
    # only for credentials that state their expiry: Iceberg Java's refresh needs one (Nessie 0.99 states none;
    # the JVM then keeps the load's keys, and every query's reload brings fresh ones)
    inject = (
        refresh_endpoint is not None
        and b"refresh-credentials-endpoint" not in body
        and any(m.encode() in body for m in CREDENTIAL_MARKERS)
        and b"expires-at" in body
    )
    if not urls and not inject and (region is None or b'"client.region"' in body):
        return body
    doc = _json_object(body)
    if doc is None:
        return body
    holders = [doc.get("config") or {}] + [c.get("config") or {} for c in doc.get("storage-credentials") or []]
    # a /v1/config answer may name the catalog's own URI (Nessie: overrides.uri): the JVM would leave the gateway
    holders += [h for h in (doc.get("defaults"), doc.get("overrides")) if isinstance(h, dict)]
    changed = False
    for holder in holders if urls else []:
        for key, value in holder.items():
            if isinstance(value, str) and (value == upstream_base or value.startswith(upstream_base + "/")):
                holder[key] = gateway_base + value[len(upstream_base) :]
                changed = True
    if region is not None and "metadata" in doc and not any("client.region" in h for h in holders):
        named = next((h["s3.region"] for h in holders if isinstance(h.get("s3.region"), str)), None)
        doc["config"] = {**(doc.get("config") or {}), "client.region": named or region}
        changed = True
    if inject and "metadata" in doc:
        # each cloud's FileIO reads its own key (Iceberg Java: ADLS and GCS never read the client.* one)
        keys = [REFRESH_ENDPOINT] + [
            k for k, m in ((ADLS_REFRESH, b"adls.sas-token"), (GCS_REFRESH, b"gcs.oauth2")) if m in body
        ]
        doc["config"] = {**(doc.get("config") or {}), **dict.fromkeys(keys, refresh_endpoint)}
        changed = True
    return json.dumps(doc).encode() if changed else body


def credentials_from_table(body: bytes) -> bytes:
    """A LoadCredentialsResponse made from a LoadTableResult (a reload vends fresh credentials on
    catalogs without ``/credentials``): its ``storage-credentials``, else the config's keys for the table."""
    doc = json.loads(body)
    creds = doc.get("storage-credentials") or []
    config = {k: v for k, v in (doc.get("config") or {}).items() if isinstance(v, str) and k not in REFRESH_KEYS}
    if not creds and holds_credential(config):
        creds = [{"prefix": doc["metadata"]["location"], "config": config}]
    return json.dumps({"storage-credentials": creds}).encode()


def stamp_expiry(body: bytes, ttl: float | None) -> bytes:
    """Keys vended with no stated expiry (Nessie 0.99) get ``s3.session-token-expires-at-ms`` = now + ``ttl``,
    the lifetime the session assumes for them: Iceberg Java then refreshes (by reload) ahead of it."""
    if ttl is None or b"access-key-id" not in body or b"expires-at-ms" in body:
        return body
    doc = _json_object(body)
    if doc is None:
        return body
    at = str(int((time.time() + ttl) * 1000))
    for holder in [doc.get("config")] + [c.get("config") for c in doc.get("storage-credentials") or []]:
        if isinstance(holder, dict) and any(str(k).endswith("access-key-id") for k in holder):
            holder["s3.session-token-expires-at-ms"] = at
    return json.dumps(doc).encode()


def namespace_separator(config_body: bytes) -> str:
    """The namespace separator a ``/v1/config`` answer asks for (overrides, then defaults; else ``%1F``)."""
    try:
        config = json.loads(config_body)
        for part in ("overrides", "defaults"):
            value = (config.get(part) or {}).get("namespace-separator")
            if isinstance(value, str) and _SAFE_SEPARATOR.fullmatch(value):
                return value
    except (ValueError, AttributeError):
        pass
    return JVM_SEPARATOR


def with_separator(path: str, separator: str) -> str:
    """``path`` with the namespace levels joined by the catalog's separator instead of ``%1F``.

    Iceberg Java before 1.11 always joins levels with ``%1F``, whatever the catalog's ``/v1/config``
    asks for; Jetty 12 (Apache's REST fixture) refuses ``%1F`` in a path ("Suspicious Path Character",
    400), which breaks multi-level namespaces and the probe before every metadata table. Only the
    namespace segment changes; an encoded ``%`` inside a level (``%25``) never matches.
    """
    segments = path.split("/")
    inner = segments[1:-1]  # the namespace follows a ``namespaces`` segment, and is never the first or last one
    if separator.upper() == JVM_SEPARATOR or "namespaces" not in inner:
        return path
    at = inner.index("namespaces") + 2
    segments[at] = _SEPARATOR_RE.sub(separator, segments[at])
    return "/".join(segments)


def offers_credentials(config_body: bytes) -> bool | None:
    """Whether a ``/v1/config`` answer lists the loadCredentials endpoint (None: it lists no endpoints,
    which per the spec means only the defaults, among which ``/credentials`` is not)."""
    try:
        endpoints = json.loads(config_body).get("endpoints")
    except (ValueError, AttributeError):
        return None
    return CREDENTIALS_ENDPOINT in endpoints if isinstance(endpoints, list) else False


NAMESPACE_EXISTS = "HEAD /v1/{prefix}/namespaces/{namespace}"


def without_namespace_head(body: bytes) -> bytes:
    """A ``/v1/config`` answer without the namespace-exists endpoint: Iceberg Java then asks with a GET (its
    fallback) whose refusal carries the catalog's message, where a refused HEAD has no body and Spark's ``USE``
    reported "Forbidden: Forbidden". Nothing else changes: the GET is the same question, authorized the same."""
    if NAMESPACE_EXISTS.encode() not in body:
        return body
    doc = _json_object(body)
    endpoints = doc.get("endpoints") if doc is not None else None
    if doc is None or not isinstance(endpoints, list):
        return body
    doc["endpoints"] = [e for e in endpoints if e != NAMESPACE_EXISTS]
    return json.dumps(doc).encode()


def _json_object(body: bytes) -> dict[str, Any] | None:
    """``body`` as a JSON object, or None when it is not one (then it passes through unchanged)."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def signing_unsupported(body: bytes) -> str | None:
    """Why a remote-signing session cannot use the table in ``body`` (on ADLS or GCS: signing is S3-only)."""
    doc = _json_object(body)
    location = (
        (doc or {}).get("metadata", {}).get("location") if isinstance((doc or {}).get("metadata"), dict) else None
    )
    cloud = cloud_of(location) if isinstance(location, str) else "other"
    if cloud not in ("adls", "gcs"):
        return None
    return (
        f"Remote signing is S3-only: this table lives on {cloud.upper()} ({location}). Start the session with "
        "access='vended-credentials' (the default): the catalog then vends SAS / OAuth tokens that refresh."
    )
