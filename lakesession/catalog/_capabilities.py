"""What a catalog offers, as its ``/v1/config`` said, and one ``CapabilityError`` when asked for more.

Catalogs differ: Polaris 1.4 and SeaweedFS offer no remote signing (Polaris answers 400 "Unsupported
access delegation mode", SeaweedFS vends credentials anyway), SeaweedFS has no ``/credentials``,
Polaris serves it without listing it. pyiceberg surfaces each difference in its own words
(``BadRequestError``, a missing key); the user gets one ``CapabilityError`` naming what was asked,
what the catalog's ``/v1/config`` answered, and what to do instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import CapabilityError

if TYPE_CHECKING:
    from pyiceberg.catalog.rest import RestCatalog

REMOTE_SIGNING = "remote signing"
GRANTS = "grants"
SIGNING_KEYS = ("s3.remote-signing-enabled", "signer.uri", "signer.endpoint", "s3.signer.uri", "s3.signer.endpoint")
_SHOWN_KEYS = ("prefix", *SIGNING_KEYS)
_CREDENTIALS_SUFFIX = "/credentials"


def config_answer(catalog: RestCatalog) -> dict[str, Any]:
    """The parts of the catalog's ``/v1/config`` answer that say what it offers (secret-free): the endpoints
    it lists and its signing keys (pyiceberg merged defaults and overrides into ``properties``)."""
    endpoints = sorted(str(e) for e in getattr(catalog, "_supported_endpoints", ()) or ())
    props = {k: str(v) for k, v in (catalog.properties or {}).items() if k in _SHOWN_KEYS}
    return {"endpoints": endpoints, **props}


def describe(answer: dict[str, Any]) -> str:
    """One phrase for ``answer``: how many endpoints, whether ``/credentials`` is listed, the signing keys."""
    endpoints = answer.get("endpoints") or []
    creds = any(str(e).endswith(_CREDENTIALS_SUFFIX) for e in endpoints)
    signing = {k: v for k, v in answer.items() if k in SIGNING_KEYS}
    keys = ", ".join(f"{k}={v}" for k, v in signing.items()) if signing else "no s3.remote-signing-enabled or signer"
    return (
        f"its /v1/config lists {len(endpoints)} endpoints ({'with' if creds else 'no'} …/credentials) and sets {keys}"
    )


def remote_signing_unavailable(
    catalog: RestCatalog, uri: str, table: str, detail: str | None = None
) -> CapabilityError:
    """The catalog at ``uri`` refused (or ignored) a remote-signing load of ``table``."""
    answer = config_answer(catalog)
    said = f" (its answer for table {table}: {detail})" if detail else f" (table {table} came back without it)"
    return CapabilityError(
        f"The catalog at {uri} does not offer remote signing{said}; {describe(answer)}. "
        "Fix: use access='vended-credentials' (the default), or ask the catalog's operator to enable remote signing.",
        REMOTE_SIGNING,
        answer,
        status=400 if detail else None,
    )


def grants_unavailable(catalog: RestCatalog | None, uri: str, status: int) -> CapabilityError:
    """The catalog at ``uri`` has no grants endpoint (``/management/v1/me/grants`` answered ``status``)."""
    answer = config_answer(catalog) if catalog is not None else {}
    said = f"; {describe(answer)}" if answer else ""
    return CapabilityError(
        f"The catalog at {uri} offers no grants endpoint (GET /management/v1/me/grants answered {status}: it is "
        f"not part of the Iceberg REST spec){said}. Fix: ask the catalog's operator what you are granted, or call "
        "session.grants() without strict=True (one row saying 'unknown').",
        GRANTS,
        answer,
        status=status,
    )
