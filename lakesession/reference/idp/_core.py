"""What the grants need from the issuer, as a protocol: ``_grants`` depends on this, never on ``_issuer``.

``EmbeddedIssuer`` (``_issuer``) builds the OAuth server from ``_grants`` and satisfies
``IssuerCore``; keeping the contract here makes the dependency one-way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from joserfc.jwk import Key
    from sqlalchemy import Engine

    from ..directory import Directory
    from ..settings import ServerSettings
    from ._devices import DeviceStore
    from ._state import RefreshTokenStore


class IssuerCore(Protocol):
    """The issuer's settings, stores and key, as the grants and token generator use them."""

    settings: ServerSettings
    directory: Directory
    engine: Engine
    key: Key
    alg: str
    refresh_store: RefreshTokenStore
    devices: DeviceStore
    authcodes: Any  # _authcode.AuthCodeStore (typed loosely: _authcode imports this module)

    def verify(self, token: str) -> dict[str, Any]:
        """Claims of a valid access token minted by this issuer (``NotAuthorized`` otherwise)."""
        ...
