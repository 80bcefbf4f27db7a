"""The user's identity: one ``TokenSource`` interface for every way of getting their access token.

* ``DeviceCode`` — log in once in a browser (RFC 8628), then rotating refresh tokens;
* ``ClientCredentials`` — a service principal's own token;
* ``TokenExchange`` — act for another source's subject (RFC 8693, ``act`` claim);
* ``JupyterHubToken`` — the hub user's SSO token from their ``auth_state``;
* ``StaticToken`` — a token handed over as is;
* ``Anonymous`` — no identity at all, for a catalog without authentication.

``from_issuer`` picks a flow from the issuer's OIDC discovery document.
Every source refreshes ahead of expiry with a single request in flight, keeps
serving a still-valid token while the issuer is down, and never shows a secret
in a repr, log line or exception message. ``TokenCache`` (opt-in) keeps tokens
in a 0600 JSON file so the next process starts logged in.
"""

from ..errors import LakesessionError
from ._base import TokenSource
from ._cache import TokenCache, default_cache_path
from ._device import DeviceCode, DevicePrompt
from ._discovery import discover, from_issuer
from ._errors import (
    DeviceFlowError,
    IdentityError,
    LoginRequiredError,
    ScopeError,
    SignInBusyError,
    TokenRefreshError,
)
from ._flows import Anonymous, ClientCredentials, StaticToken, TokenExchange
from ._jupyterhub import JupyterHubToken

__all__ = [
    "Anonymous",
    "ClientCredentials",
    "DeviceCode",
    "DeviceFlowError",
    "DevicePrompt",
    "IdentityError",
    "JupyterHubToken",
    "LakesessionError",
    "LoginRequiredError",
    "ScopeError",
    "SignInBusyError",
    "StaticToken",
    "TokenCache",
    "TokenExchange",
    "TokenRefreshError",
    "TokenSource",
    "default_cache_path",
    "discover",
    "from_issuer",
]
