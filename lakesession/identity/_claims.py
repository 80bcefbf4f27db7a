"""Reading a JWT's claims WITHOUT verifying it — for display (principal, issuer, expiry) only.

The catalog verifies tokens; the client only needs to show who it acts as.
Opaque (non-JWT) tokens have no readable claims.
"""

from __future__ import annotations

import json
from typing import Any

from joserfc import jws
from joserfc.errors import JoseError


def unverified_claims(token: str | None) -> dict[str, Any]:
    """The payload of a compact JWS as a dict, or ``{}`` for opaque or malformed tokens. NOT verified."""
    if not token or token.count(".") != 2:
        return {}
    try:
        payload = jws.extract_compact(token.encode("ascii")).payload
        claims = json.loads(payload)
    except (JoseError, UnicodeError, ValueError, TypeError):
        return {}
    return claims if isinstance(claims, dict) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def claim_str(claims: dict[str, Any], name: str) -> str | None:
    return _text(claims.get(name))


def claim_number(claims: dict[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)
