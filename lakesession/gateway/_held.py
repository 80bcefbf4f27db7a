"""What the gateway's path routes hold: one credential for a prefix, and the spelling rules both route modules share.

Split out of ``_paths`` so that ``_unions`` (bucket keys for S3A) and ``_paths`` (credentials by path) use one
definition of a held credential and of a prefix, without importing each other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ._credcache import required_life

SCHEMES = ("s3://", "s3a://", "s3n://")
CREDENTIAL_KEYS = ("s3.access-key-id", "s3.secret-access-key", "s3.session-token", "s3.session-token-expires-at-ms")
JSON = {"content-type": "application/json"}


def canonical(url: str) -> str:
    """``s3a://b/k`` -> ``s3://b/k``: one spelling for prefix matching."""
    for scheme in SCHEMES[1:]:
        if url.startswith(scheme):
            return "s3://" + url[len(scheme) :]
    return url


def as_prefix(url: str) -> str:
    return canonical(url).rstrip("/") + "/"


@dataclass(frozen=True)
class Held:
    """A credential the gateway holds for ``prefix`` (canonical, ends with ``/``) in ``mode``."""

    prefix: str
    mode: str
    config: dict[str, str]
    fetched_at: float
    expires_at: float

    def remaining(self, now: float) -> float:
        return self.expires_at - now

    def usable(self, now: float, min_valid: float) -> bool:
        return self.remaining(now) >= required_life(self.expires_at - self.fetched_at, min_valid)


def credential_config(body: bytes, prefix: str) -> dict[str, str] | None:
    """The config of the storage credential covering ``prefix`` (the longest matching one)."""
    try:
        creds = json.loads(body).get("storage-credentials") or []
    except ValueError:
        return None
    matching = [c for c in creds if isinstance(c, dict) and prefix.startswith(canonical(str(c.get("prefix", ""))))]
    if not matching:
        return None
    best = max(matching, key=lambda c: len(str(c.get("prefix", ""))))
    config = {k: v for k, v in (best.get("config") or {}).items() if isinstance(v, str)}
    return config if all(k in config for k in CREDENTIAL_KEYS[:2]) else None
