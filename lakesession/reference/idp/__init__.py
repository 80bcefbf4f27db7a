"""The reference catalog's identity layer: the embedded OIDC issuer and token verification.

* ``EmbeddedIssuer``: an OAuth 2.0 / OIDC issuer built on authlib's server
  machinery (client credentials, RFC 8628 device flow, rotating refresh tokens,
  RFC 8693 token exchange), RFC 9068 JWT access tokens signed with joserfc, and
  a FastAPI router (``/.well-known/openid-configuration``, ``/jwks``, ``/token``,
  ``/device_authorization``, ``/device``). It is also the ``TokenVerifier`` for
  its own tokens (in-process keys, no HTTP).
* ``RemoteVerifier``: the ``TokenVerifier`` for an external issuer (discovery +
  cached JWKS, refetched on unknown ``kid``, rate-limited).
"""

from ._issuer import APPROVAL_ENDPOINT_KEY, DEFAULT_CLIENT_ID, EmbeddedIssuer
from ._remote import RemoteVerifier

__all__ = ["APPROVAL_ENDPOINT_KEY", "DEFAULT_CLIENT_ID", "EmbeddedIssuer", "RemoteVerifier"]
