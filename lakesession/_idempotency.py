"""Client-side ``Idempotency-Key`` rules shared by the pyiceberg client and the gateway.

Why: a mutation whose answer was lost (dropped connection, catalog restarted after saving it) can
only be retried safely with the key of the first attempt: a catalog that supports keys (it
advertises ``idempotency-key-lifetime`` in ``/v1/config``) then answers the stored outcome instead
of applying it again. Without support, a lost mutation is never retried (the caller decides).
"""

from __future__ import annotations

import json
import os
import time
import uuid

HEADER = "Idempotency-Key"
LIFETIME_FIELD = "idempotency-key-lifetime"
RETRY_STATUSES = frozenset({502, 503, 504})  # never a final outcome for a keyed request (5xx are not stored)
RETRY_WINDOW = 60.0  # seconds a keyed mutation is retried for (well inside the key's lifetime)
_NOT_MUTATIONS = ("/metrics", "/oauth/tokens", "/sign")  # reports, tokens and signatures change nothing


def new_key() -> str:
    """A UUIDv7 (RFC 9562: 48-bit Unix milliseconds, version, variant, random bits), as the spec asks."""
    value = ((time.time_ns() // 1_000_000) & ((1 << 48) - 1)) << 80 | int.from_bytes(os.urandom(10), "big")
    value = (value & ~(0xF << 76)) | (0x7 << 76)
    value = (value & ~(0x3 << 62)) | (0x2 << 62)
    return str(uuid.UUID(int=value))


def is_mutation(method: str, path: str) -> bool:
    """Whether ``method path`` is a catalog mutation (the spec's endpoints taking ``Idempotency-Key``)."""
    path = path.split("?", 1)[0].rstrip("/")
    return method.upper() in ("POST", "DELETE") and "/v1/" in path and not path.endswith(_NOT_MUTATIONS)


def advertises_keys(config_body: bytes | str) -> bool:
    """Whether a ``/v1/config`` answer says the catalog honours keys (the spec: the lifetime's presence)."""
    try:
        doc = json.loads(config_body)
    except ValueError:
        return False
    return isinstance(doc, dict) and isinstance(doc.get(LIFETIME_FIELD), str)


def backoff(attempt: int, retry_after: str | None = None) -> float:
    """Seconds before retry ``attempt`` (1-based): the server's Retry-After if sensible, else 0.2 s doubling to 2 s."""
    if retry_after:
        try:
            return max(0.05, min(float(retry_after), 5.0))
        except ValueError:
            pass
    return min(0.2 * 2 ** (attempt - 1), 2.0)
