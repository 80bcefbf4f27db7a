"""OIDC discovery (``{issuer}/.well-known/openid-configuration``) and ``from_issuer``: pick a flow by config."""

from __future__ import annotations

import threading
from typing import Any, Literal

import httpx

from ..errors import ConfigError
from ._base import TokenSource
from ._device import DeviceCode
from ._errors import IdentityError, TokenRefreshError
from ._flows import ClientCredentials
from ._oauth import DEFAULT_TIMEOUT

WELL_KNOWN = "/.well-known/openid-configuration"
_cache: dict[str, dict[str, Any]] = {}
_lock = threading.Lock()


def discover(issuer_url: str, http: httpx.Client | None = None) -> dict[str, Any]:
    """The issuer's OpenID Provider metadata (``token_endpoint``, ``device_authorization_endpoint``, …).

    Cached per issuer for the life of the process (failures are not cached).
    """
    key = issuer_url.rstrip("/")
    with _lock:
        cached = _cache.get(key)
    if cached is not None:
        return dict(cached)
    url = key + WELL_KNOWN
    client = http or httpx.Client(timeout=DEFAULT_TIMEOUT)
    try:
        resp = client.get(url, headers={"Accept": "application/json"})
    except httpx.TransportError as exc:
        raise TokenRefreshError(
            f"Cannot reach the issuer at {key} ({type(exc).__name__}: {exc}). Check the URL "
            "and the network; retry once the issuer is back."
        ) from None
    finally:
        if http is None:
            client.close()
    if resp.status_code >= 500:
        raise TokenRefreshError(
            f"The issuer at {key} answered HTTP {resp.status_code} for {url}. Retry once the issuer is back."
        )
    try:
        meta = resp.json() if resp.status_code == 200 else None
    except ValueError:
        meta = None
    if not isinstance(meta, dict):
        raise IdentityError(
            f"No OpenID configuration at {url} (HTTP {resp.status_code}). Check the issuer URL: "
            "it is the `iss` of your tokens, e.g. https://idp.example.com/realms/data."
        )
    if str(meta.get("issuer", "")).rstrip("/") != key:
        raise IdentityError(
            f"The OpenID configuration at {url} names issuer {meta.get('issuer')!r}, not {key!r}. "
            "Use exactly the issuer URL it names."
        )
    if not isinstance(meta.get("token_endpoint"), str):
        raise IdentityError(
            f"The OpenID configuration at {url} has no token_endpoint. "
            "Check that this issuer supports OAuth 2.0 token requests."
        )
    with _lock:
        _cache[key] = meta
    return dict(meta)


def from_issuer(
    issuer_url: str,
    *,
    client_id: str,
    client_secret: str | None = None,
    flow: Literal["auto", "device", "client_credentials"] = "auto",
    http: httpx.Client | None = None,
    **kw: Any,
) -> TokenSource:
    """A ``TokenSource`` for ``issuer_url`` (discovered): ``auto`` picks client credentials with a secret,
    else the device flow. ``kw`` go to the source (``scope``, ``audience``, ``on_prompt``, ``cache``, …)."""
    if flow not in ("auto", "device", "client_credentials"):
        raise ConfigError(f"flow must be 'auto', 'device' or 'client_credentials', not {flow!r}")
    meta = discover(issuer_url, http)
    issuer = str(meta["issuer"]).rstrip("/")
    chosen = flow if flow != "auto" else ("client_credentials" if client_secret else "device")
    if chosen == "client_credentials":
        if not client_secret:
            raise IdentityError(
                "The client credentials flow needs client_secret=... Pass it, or use flow='device' to log in as a user."
            )
        return ClientCredentials(meta["token_endpoint"], client_id, client_secret, issuer=issuer, **kw)
    device_url = meta.get("device_authorization_endpoint")
    if not isinstance(device_url, str):
        raise IdentityError(
            f"The issuer at {issuer} offers no device_authorization_endpoint, so the device "
            "login is not possible. Enable the device flow for the client at the issuer, or "
            "use flow='client_credentials' with a client secret."
        )
    methods = meta.get("code_challenge_methods_supported")
    if isinstance(methods, list) and "S256" not in methods:
        kw.setdefault("pkce", False)  # PKCE S256 unless the issuer says it cannot check it (RFC 8414 §2)
    return DeviceCode(device_url, meta["token_endpoint"], client_id, client_secret=client_secret, issuer=issuer, **kw)
