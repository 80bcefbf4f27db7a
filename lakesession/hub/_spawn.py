"""Hooks and roles for ``jupyterhub_config.py``: hand each single-user server what lakesession needs.

The server gets the catalog URI, the issuer, the platform's trusted engine (if any)
and the user's current access token in its environment (``auth_state_hook``), and
its API token gets the scopes to re-read the user's ``auth_state`` later, so that
``lakesession.spark()`` in a notebook acts as the hub user and picks up the tokens
the hub refreshes.

Nothing here imports JupyterHub: the hooks are plain callables taking the
spawner, and ``configure`` only writes into the traitlets ``Config`` object ``c``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

logger = logging.getLogger("lakesession.hub")

# what the single-user server's environment carries (names, never values, appear in logs)
URI_VAR = "LAKESESSION_URI"
WAREHOUSE_VAR = "LAKESESSION_WAREHOUSE"
ISSUER_VAR = "LAKESESSION_ISSUER"
IDENTITY_VAR = "LAKESESSION_IDENTITY"
ENGINE_VAR = "LAKESESSION_ENGINE"
PRINCIPAL_CLAIM_VAR = "LAKESESSION_PRINCIPAL_CLAIM"
IDENTITY_JUPYTERHUB = "jupyterhub"
ACCESS_TOKEN_VAR = "LAKESESSION_HUB_ACCESS_TOKEN"
EXPIRES_AT_VAR = "LAKESESSION_HUB_TOKEN_EXPIRES_AT"
TOKEN_VARS = (ACCESS_TOKEN_VAR, EXPIRES_AT_VAR)

#: Scopes the single-user server's API token needs to read its own user's ``auth_state``
#: (``GET /hub/api/users/{name}``). A token never has more than its owner, so the ``user``
#: role needs ``admin:auth_state!user`` as well (``self`` does not include it).
SERVER_SCOPES = ("admin:auth_state!user", "read:users!user")
DEFAULT_ROLE_SCOPES = {
    "user": ("self",),
    "server": ("users:activity!user", "access:servers!server"),
}
#: role name -> scopes lakesession adds to it
ROLE_SCOPES: dict[str, tuple[str, ...]] = {"user": ("admin:auth_state!user",), "server": SERVER_SCOPES}


def spawn_environment(
    catalog_uri: str,
    *,
    issuer: str | None = None,
    warehouse: str | None = None,
    engine: str | None = None,
    principal_claim: str | None = None,
) -> dict[str, str]:
    """The static part of the server's environment: where the catalog is, that the identity is the hub's, and
    where the platform's trusted engine is (``engine``, checked here: a bad or plaintext off-loopback address
    fails when the hub starts, not in every user's kernel); ``principal_claim``: the claim the kernel shows
    as the user's name (the catalog's ``principal_claim``)."""
    env = {URI_VAR: catalog_uri.rstrip("/"), IDENTITY_VAR: IDENTITY_JUPYTERHUB}
    if issuer:
        env[ISSUER_VAR] = issuer.rstrip("/")
    if principal_claim:
        env[PRINCIPAL_CLAIM_VAR] = principal_claim
    if warehouse:
        env[WAREHOUSE_VAR] = warehouse
    if engine:
        from .._engineclient import check_engine_url  # the client's own rule (sc://, use_ssl off loopback)

        env[ENGINE_VAR] = check_engine_url(engine.strip())
    return env


def token_environment(
    auth_state: Mapping[str, Any] | None, *, access_token_key: str = "access_token", expires_at_key: str = "expires_at"
) -> dict[str, str]:
    """The user's current access token (and its expiry, when known) from ``auth_state``, as variables."""
    if not isinstance(auth_state, Mapping):
        return {}
    token = auth_state.get(access_token_key)
    if not isinstance(token, str) or not token:
        return {}
    env = {ACCESS_TOKEN_VAR: token}
    expires = auth_state.get(expires_at_key)
    if isinstance(expires, (int, float)) and not isinstance(expires, bool):
        env[EXPIRES_AT_VAR] = repr(float(expires))
    return env


def auth_state_hook(spawner: Any, auth_state: Mapping[str, Any] | None) -> None:
    """``c.Spawner.auth_state_hook``: put the user's current access token into the server's environment.

    Only the access token (and ``expires_at``) is passed, never the refresh token: the hub stays
    the single party that refreshes (refresh tokens rotate; two refreshers would revoke the login).
    The server re-reads newer tokens from the hub API (``JupyterHubToken``). Runs before every
    spawn; with ``Authenticator.refresh_pre_spawn`` the token is fresh at that moment.
    """
    env = {k: v for k, v in dict(spawner.environment).items() if k not in TOKEN_VARS}
    tokens = token_environment(auth_state)
    env.update(tokens)
    spawner.environment = env
    log = getattr(spawner, "log", None) or logger
    name = getattr(getattr(spawner, "user", None), "name", "?")
    if tokens:
        log.debug("passing the access token of hub user %r to the server's environment", name)
    else:
        log.warning(
            "hub user %r has no access token in auth_state: the server will ask the hub API for it "
            "(enable Authenticator.enable_auth_state and log in again)",
            name,
        )


def chain_hooks(*hooks: Callable[..., Any] | None) -> Callable[..., Any]:
    """One hook calling each given hook in order (awaiting coroutines), for hooks set before ours."""
    present = [h for h in hooks if h is not None]

    async def chained(*args: Any) -> None:
        import inspect

        for hook in present:
            result = hook(*args)
            if inspect.isawaitable(result):
                await result

    chained.hooks = tuple(present)  # type: ignore[attr-defined]
    return chained


def merge_roles(existing: Any, additions: Mapping[str, tuple[str, ...]] = ROLE_SCOPES) -> list[dict[str, Any]]:
    """``load_roles`` with ``additions`` (role name -> scopes) added: to the role's scopes when ``existing``
    defines it, else to JupyterHub's default scopes of that role."""
    roles = [dict(r) for r in (existing if isinstance(existing, (list, tuple)) else [])]
    by_name = {r.get("name"): r for r in roles}
    for name, extra in additions.items():
        role = by_name.get(name)
        if role is None:
            role = {"name": name}
            roles.append(role)
        scopes = list(role.get("scopes") or DEFAULT_ROLE_SCOPES.get(name, ()))
        role["scopes"] = scopes + [s for s in extra if s not in scopes]
    return roles


def _get(section: Any, name: str) -> Any:
    """A value set in a traitlets config section, or None (unset values are lazy placeholders)."""
    return section.get(name)


def configure(
    c: Any,
    *,
    catalog_uri: str,
    issuer: str | None = None,
    warehouse: str | None = None,
    engine: str | None = None,
    principal_claim: str | None = None,
    auth_refresh_age: int | None = 60,
    refresh_pre_spawn: bool = True,
) -> None:
    """Set up ``jupyterhub_config.py``'s ``c`` so that notebooks act as the hub user on the catalog.

    * ``Spawner.environment``: ``LAKESESSION_URI``, ``LAKESESSION_IDENTITY=jupyterhub``,
      ``LAKESESSION_ISSUER``, ``LAKESESSION_WAREHOUSE``, ``LAKESESSION_ENGINE`` and
      ``LAKESESSION_PRINCIPAL_CLAIM`` (when given: the claim naming the user, shown in the kernel — the
      catalog's ``principal_claim``, e.g. ``preferred_username`` with Keycloak), merged
      into what is set. ``engine`` is the platform's trusted engine (``lakesession engine``), e.g.
      ``sc://engine.internal:15002/;use_ssl=true``: ``Session.sql()`` in a notebook runs queries over
      DEFINER views there. It is checked here (a ``ConfigError`` for anything but an ``sc://`` URL, for one
      carrying ``token=``/``user_id=``, or for plaintext off loopback);
    * ``Spawner.auth_state_hook``: the user's current access token (chained after an existing hook);
    * ``JupyterHub.load_roles``: ``admin:auth_state!user`` on the ``user`` role and
      ``admin:auth_state!user`` + ``read:users!user`` on the ``server`` role (merged);
    * ``OAuthenticator.refresh_user_hook`` (unless set): oauthenticator refreshes tokens ahead of
      expiry, one refresh per user at a time (``lakesession.hub.refresh_user_hook``);
    * ``Authenticator.enable_auth_state`` (needs ``JUPYTERHUB_CRYPT_KEY``), ``refresh_pre_spawn``
      and ``auth_refresh_age`` (``None`` leaves it alone): the hub refreshes tokens on requests —
      including the server's own re-reads — once the last refresh is older than this.

    The authenticator must keep the user's tokens in ``auth_state`` (``access_token``, ideally
    ``expires_at``; JWT ``exp`` otherwise) and refresh them in ``refresh_user``, e.g.
    ``lakesession.hub.authenticator.DeviceCodeAuthenticator`` or oauthenticator's ``GenericOAuthenticator``
    (``oidc_login`` sets the latter up from the issuer's discovery document).
    """
    c.Spawner.environment = {
        **(_get(c.Spawner, "environment") or {}),
        **spawn_environment(
            catalog_uri, issuer=issuer, warehouse=warehouse, engine=engine, principal_claim=principal_claim
        ),
    }
    existing = _get(c.Spawner, "auth_state_hook")
    c.Spawner.auth_state_hook = (
        auth_state_hook if existing in (None, auth_state_hook) else chain_hooks(existing, auth_state_hook)
    )
    c.JupyterHub.load_roles = merge_roles(_get(c.JupyterHub, "load_roles"))
    if _get(c.OAuthenticator, "refresh_user_hook") is None:  # oauthenticator >= 17.3 (GenericOAuthenticator etc.)
        from ._oauth import refresh_user_hook

        c.OAuthenticator.refresh_user_hook = refresh_user_hook
    c.Authenticator.enable_auth_state = True
    c.Authenticator.refresh_pre_spawn = refresh_pre_spawn
    if auth_refresh_age is not None:
        c.Authenticator.auth_refresh_age = int(auth_refresh_age)
