"""Signing keys and JWT access-token checks (joserfc does the cryptography).

The embedded issuer signs with one asymmetric key (ES256 on P-256 by default,
RS256 if a persisted RSA JWK is supplied). The key is kept as a private JWK file
(mode 0600) when a path is given, so tokens survive restarts.

``check_access_token`` is shared by the embedded issuer and ``RemoteVerifier``:
signature, ``iss``, ``aud``, ``exp``/``nbf``/``iat`` with leeway, ``typ``. Every
failure is a ``NotAuthorized`` with a short reason that never echoes the token.
The checks themselves live in ``lakesession._wire.jwks`` (a trusted engine applies
the same ones without importing the server); this module maps its ``TokenRejected``
to ``NotAuthorized``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

from joserfc.jwk import ECKey, Key, KeySet, RSAKey, import_key

from ..._wire import jwks
from ..._wire.jwks import ACCESS_TOKEN_TYPES, ASYMMETRIC_ALGORITHMS, LEEWAY_SECONDS, PLAIN_JWT_TYPES
from ..errors import NotAuthorized

__all__ = [
    "ACCESS_TOKEN_TYPES",
    "ASYMMETRIC_ALGORITHMS",
    "LEEWAY_SECONDS",
    "PLAIN_JWT_TYPES",
    "check_access_token",
    "load_or_create_signing_key",
    "public_jwks",
    "token_header",
]

logger = logging.getLogger(__name__)


def _algorithm_of(key: Key) -> str:
    if isinstance(key, ECKey):
        return {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}[key.curve_name]
    if isinstance(key, RSAKey):
        return "RS256"
    raise ValueError(f"Unsupported signing key type {key.key_type!r}: use an EC or RSA JWK")


def load_or_create_signing_key(path: Path | None) -> tuple[Key, str]:
    """The private signing key and its JWS algorithm; generated (and persisted at ``path``) if absent."""
    if path is not None and path.exists():
        mode = path.stat().st_mode & 0o777
        if mode & 0o077:
            logger.warning("signing key file %s had permissions %o; tightening to 0600", path, mode)
            os.chmod(path, 0o600)
        key = import_key(json.loads(path.read_text()))
        if not key.is_private:
            raise ValueError(f"Signing key file {path} holds a public key; a private JWK is required")
        alg = _algorithm_of(key)
        key.ensure_kid()
        return key, alg
    key = ECKey.generate_key("P-256", {"alg": "ES256", "use": "sig"}, private=True, auto_kid=True)
    if path is not None:
        _write_private(path, key)
        logger.info("generated a new ES256 signing key (kid %s) at %s", key.kid, path)
    return key, "ES256"


def _write_private(path: Path, key: Key) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(key.as_dict(private=True), fh)
    os.replace(tmp, path)


def public_jwks(key: Key, alg: str) -> dict[str, Any]:
    """The JWKS document (public parts only) advertising ``key`` with its ``kid``, ``alg`` and ``use``."""
    return dict(KeySet([key]).as_dict(private=False, alg=alg, use="sig"))


def token_header(token: str) -> dict[str, Any]:
    """The unverified JOSE header of a compact JWS (for ``kid``/``typ`` routing only)."""
    try:
        return jwks.token_header(token)
    except jwks.TokenRejected as exc:
        raise NotAuthorized(str(exc)) from None


def check_access_token(
    token: str,
    keys: KeySet,
    *,
    issuer: str,
    audience: str,
    algorithms: Collection[str],
    allowed_types: Collection[str | None],
    leeway: int = LEEWAY_SECONDS,
) -> dict[str, Any]:
    """Verify a JWT access token's signature and claims; return its claims or raise ``NotAuthorized``."""
    try:
        return jwks.check_access_token(
            token,
            keys,
            issuer=issuer,
            audience=audience,
            algorithms=algorithms,
            allowed_types=allowed_types,
            leeway=leeway,
        )
    except jwks.TokenRejected as exc:
        raise NotAuthorized(str(exc)) from None
