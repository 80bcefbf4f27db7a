"""``oidc_login``: oauthenticator's ``GenericOAuthenticator`` set up from an OIDC issuer's discovery document.

A hub and a catalog that trust ONE issuer (e.g. a Keycloak realm) must agree on it exactly; typing
``authorize_url``/``token_url``/``userdata_url`` by hand invites a second, slightly different one (another
realm, another host name). ``oidc_login`` reads ``{issuer}/.well-known/openid-configuration`` once when the hub
loads its config, checks that the document names the same ``issuer`` (OpenID Connect Discovery 1.0 §4.3, the
mix-up defence) and that the issuer does PKCE with ``S256``, and writes the endpoints, PKCE, the username claim
and group handling into ``c.GenericOAuthenticator``. Nothing here imports JupyterHub or oauthenticator.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import httpx

from ..errors import ConfigError

GENERIC_OAUTHENTICATOR = "oauthenticator.generic.GenericOAuthenticator"
DISCOVERY_PATH = "/.well-known/openid-configuration"
REQUIRED = ("authorization_endpoint", "token_endpoint", "userinfo_endpoint")


def discover(issuer: str, *, timeout: float = 30.0, http_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The issuer's discovery document, checked: it names ``issuer`` itself and the three endpoints a hub
    login needs. Raises ``ConfigError`` (with the fix) when it cannot be read or does not fit."""
    issuer = issuer.rstrip("/")
    if not issuer.startswith(("https://", "http://")):
        raise ConfigError(
            f"issuer {issuer!r} is not an http(s) URL: pass the realm's URL, e.g. https://sso/realms/lake"
        )
    url = issuer + DISCOVERY_PATH
    try:
        resp = httpx.get(url, timeout=timeout, follow_redirects=False, **(http_options or {}))
    except httpx.HTTPError as exc:
        raise ConfigError(f"cannot read {url} ({type(exc).__name__}): is the issuer URL right and reachable?") from None
    if resp.status_code != 200:
        raise ConfigError(
            f"{url} answered HTTP {resp.status_code}: check the issuer URL (Keycloak: https://<host>/realms/<realm>)"
        )
    try:
        doc = resp.json()
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise ConfigError(f"{url} is not a JSON discovery document: check the issuer URL")
    named = str(doc.get("issuer") or "").rstrip("/")
    if named != issuer:
        raise ConfigError(
            f"{url} names issuer {named or '(none)'!r}, not {issuer!r}: the hub, the catalog and the IdP must use "
            "the very same issuer URL (Keycloak: set its --hostname to the URL users reach it at)"
        )
    missing = [k for k in REQUIRED if not isinstance(doc.get(k), str) or not doc[k]]
    if missing:
        raise ConfigError(f"{url} lacks {', '.join(missing)}: the issuer must support the authorization code flow")
    methods = doc.get("code_challenge_methods_supported")
    if isinstance(methods, list) and "S256" not in methods:
        raise ConfigError(f"{url} does not list PKCE S256 in code_challenge_methods_supported: the hub needs it")
    return doc


def oidc_login(
    c: Any,
    *,
    issuer: str,
    client_id: str = "jupyterhub",
    client_secret: str | None = None,
    username_claim: str = "preferred_username",
    groups_claim: str | None = "groups",
    allowed_groups: Iterable[str] = (),
    admin_groups: Iterable[str] = (),
    scope: Iterable[str] = ("openid", "profile", "email"),
    callback_url: str | None = None,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """Make ``c``'s authenticator oauthenticator's ``GenericOAuthenticator`` at ``issuer``; returns the discovery
    document.

    * ``authorize_url``/``token_url``/``userdata_url`` from the discovery document (``discover`` checks it);
    * authorization code + PKCE ``S256`` (``enable_pkce``), the client's secret sent by HTTP basic auth
      (``client_secret``: ``None`` leaves oauthenticator's default, ``$OAUTH_CLIENT_SECRET``);
    * ``username_claim``: the userinfo claim naming the hub user (Keycloak: ``preferred_username``; its
      ``sub`` is a UUID);
    * ``groups_claim`` (``None``: groups unused): the hub's groups follow the IdP's on each login and refresh
      (``manage_groups``, from ``auth_state['oauth_user'][groups_claim]``); ``allowed_groups`` may log in,
      ``admin_groups`` are hub admins. With neither ``allowed_groups`` nor another ``allowed_*``/``allow_all``
      setting JupyterHub lets nobody in.

    Call ``configure`` too (catalog, spawner hook, token refresh); both may come in either order.
    """
    doc = discover(issuer, timeout=timeout)
    c.JupyterHub.authenticator_class = GENERIC_OAUTHENTICATOR
    g = c.GenericOAuthenticator
    g.authorize_url = doc["authorization_endpoint"]
    g.token_url = doc["token_endpoint"]
    g.userdata_url = doc["userinfo_endpoint"]
    g.client_id = client_id
    if client_secret is not None:
        g.client_secret = client_secret
    g.basic_auth = True
    g.enable_pkce = True
    g.username_claim = username_claim
    g.scope = list(scope)
    if callback_url:
        g.oauth_callback_url = callback_url
    if groups_claim:
        g.auth_state_groups_key = f"oauth_user.{groups_claim}"
        g.manage_groups = True
    if allowed := sorted(set(allowed_groups)):
        if not groups_claim:
            raise ConfigError("allowed_groups needs groups_claim (the claim carrying the user's groups)")
        g.allowed_groups = set(allowed)
    if admins := sorted(set(admin_groups)):
        if not groups_claim:
            raise ConfigError("admin_groups needs groups_claim (the claim carrying the user's groups)")
        g.admin_groups = set(admins)
    return doc
