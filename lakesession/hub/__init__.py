"""JupyterHub entry point: notebooks on a hub act as the hub user on the catalog.

In ``jupyterhub_config.py``::

    import lakesession.hub
    lakesession.hub.configure(c, catalog_uri="https://catalog.example.com",
                              issuer="https://idp.example.com/realms/data",
                              engine="sc://engine.internal:15002/;use_ssl=true")  # optional

sets the spawner hook and roles (see ``configure``); ``engine`` (the platform's trusted engine,
``lakesession engine``) reaches the servers as ``LAKESESSION_ENGINE``. In the single-user server,
``lakesession.spark()`` / ``lakesession.connect()`` with nothing else configured
then finds ``LAKESESSION_IDENTITY=jupyterhub`` and uses ``identity_from_env()``:
a ``JupyterHubToken`` that starts from the token the hook passed and re-reads the
user's ``auth_state`` from the hub API before it expires.

Logging in: oauthenticator's ``GenericOAuthenticator`` (authorization code + PKCE,
which the reference catalog's embedded issuer and Keycloak support; ``oidc_login(c, issuer=...)`` sets it
up from the issuer's discovery document, groups included; ``configure`` adds
``refresh_user_hook`` so tokens are refreshed ahead of expiry), or
``lakesession.hub.authenticator.DeviceCodeAuthenticator``, which logs users in
with an issuer's device authorization grant (RFC 8628) and refreshes their
tokens in ``auth_state``.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

from .. import _settings
from ..identity import IdentityError, JupyterHubToken
from ._discovery import discover, oidc_login
from ._oauth import refresh_user_hook
from ._spawn import (
    ACCESS_TOKEN_VAR,
    ENGINE_VAR,
    EXPIRES_AT_VAR,
    IDENTITY_JUPYTERHUB,
    IDENTITY_VAR,
    ISSUER_VAR,
    PRINCIPAL_CLAIM_VAR,
    ROLE_SCOPES,
    SERVER_SCOPES,
    TOKEN_VARS,
    URI_VAR,
    WAREHOUSE_VAR,
    auth_state_hook,
    chain_hooks,
    configure,
    merge_roles,
    spawn_environment,
    token_environment,
)

__all__ = [
    "ACCESS_TOKEN_VAR",
    "ENGINE_VAR",
    "EXPIRES_AT_VAR",
    "IDENTITY_JUPYTERHUB",
    "IDENTITY_VAR",
    "ISSUER_VAR",
    "PRINCIPAL_CLAIM_VAR",
    "ROLE_SCOPES",
    "SERVER_SCOPES",
    "TOKEN_VARS",
    "URI_VAR",
    "WAREHOUSE_VAR",
    "auth_state_hook",
    "chain_hooks",
    "configure",
    "discover",
    "hub_identity",
    "identity_from_env",
    "merge_roles",
    "oidc_login",
    "refresh_user_hook",
    "spawn_environment",
    "token_environment",
]


def hub_identity(*, issuer: str | None = None, environ: MutableMapping[str, str] | None = None) -> JupyterHubToken:
    """The hub user's token source inside a single-user server (raises ``IdentityError`` outside one).

    Takes the initial access token the spawner hook passed (``LAKESESSION_HUB_ACCESS_TOKEN``) and
    removes it from ``environ`` (default ``os.environ``) so that processes started later — the
    Spark JVM, shell commands — do not inherit it.
    """
    env = os.environ if environ is None else environ
    initial = env.pop(ACCESS_TOKEN_VAR, None) or None
    raw_expiry = env.pop(EXPIRES_AT_VAR, None)
    try:
        expires_at = float(raw_expiry) if raw_expiry else None
    except ValueError:
        expires_at = None
    return JupyterHubToken(
        api_url=env.get("JUPYTERHUB_API_URL"),
        user=env.get("JUPYTERHUB_USER"),
        api_token=env.get("JUPYTERHUB_API_TOKEN"),
        issuer=issuer or _settings.from_environment(env).get("issuer"),
        initial_token=initial,
        initial_expires_at=expires_at,
        principal_claim=env.get(PRINCIPAL_CLAIM_VAR) or "sub",
    )


def identity_from_env(
    kind: str | None = None, *, issuer: str | None = None, environ: MutableMapping[str, str] | None = None
) -> JupyterHubToken | None:
    """``hub_identity()`` when ``kind`` (default: ``$LAKESESSION_IDENTITY``, which ``configure``'s
    spawner sets) is ``"jupyterhub"``; ``None`` when neither is set (other identities apply)."""
    env = os.environ if environ is None else environ
    kind = (kind or _settings.from_environment(env).get("identity") or "").strip().lower()
    if not kind:
        return None
    if kind != IDENTITY_JUPYTERHUB:
        raise IdentityError(
            f"identity {kind!r} ({IDENTITY_VAR}) is not one lakesession knows: use {IDENTITY_JUPYTERHUB!r}, or unset it"
        )
    return hub_identity(issuer=issuer, environ=env)
