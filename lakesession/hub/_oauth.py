"""``refresh_user_hook`` for oauthenticator (e.g. ``GenericOAuthenticator``): refresh ahead of expiry.

oauthenticator's own ``refresh_user`` refreshes only once the access token has
*failed* (its userinfo request answered 4xx), so a single-user server re-reading
``auth_state`` shortly before expiry would get the old token and then a gap.
This hook refreshes once less than a margin of the token is left (like
``DeviceCodeAuthenticator``), one refresh per user at a time — refresh tokens
rotate, and a reused one revokes the whole login — and saves the new
``auth_state`` before anyone can read the spent refresh token. It also records
``issued_at``/``expires_at`` there, which ``auth_state_hook`` passes on.

A refreshed user who is no longer allowed (``check_blocked_users``/``check_allowed``: e.g. removed at the IdP
from a group in ``allowed_groups``) is not refreshed: JupyterHub checks ``allowed_groups`` at login only, so
without this the hub would keep fetching fresh tokens for them, and their kernels would keep acting as them,
for as long as their IdP session lives. Their last token then runs out within its lifetime.

oauthenticator's ``auth_state`` layout is used as is: ``access_token``,
``refresh_token``, ``token_response`` (with ``expires_in``), ``id_token``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import weakref
from typing import Any

from ..identity._claims import claim_number, unverified_claims

logger = logging.getLogger("lakesession.hub")

_locks: weakref.WeakKeyDictionary[Any, dict[str, asyncio.Lock]] = weakref.WeakKeyDictionary()


def token_times(auth_state: dict[str, Any]) -> tuple[float | None, float | None]:
    """(issued_at, expires_at) of the access token: recorded ones, else the JWT's ``iat``/``exp``."""
    issued, expires = auth_state.get("issued_at"), auth_state.get("expires_at")
    if isinstance(expires, (int, float)) and not isinstance(expires, bool):
        return (float(issued) if isinstance(issued, (int, float)) else None), float(expires)
    claims = unverified_claims(auth_state.get("access_token"))
    return claim_number(claims, "iat"), claim_number(claims, "exp")


def refresh_margin(authenticator: Any, issued_at: float | None, expires_at: float) -> float:
    """``auth_refresh_age + 60`` s, at most half the token's lifetime (so short tokens are not always refreshed)."""
    margin = float(getattr(authenticator, "auth_refresh_age", 0) or 0) + 60.0
    if issued_at is not None and expires_at > issued_at:
        margin = min(margin, (expires_at - issued_at) / 2)
    return margin


async def refresh_user_hook(authenticator: Any, user: Any, auth_state: dict[str, Any] | None) -> Any:
    """``c.OAuthenticator.refresh_user_hook``: ``True`` while the token is fresh, a new auth model once refreshed,
    ``False`` when the issuer refuses the refresh token, ``None`` (oauthenticator's default) without tokens."""
    if not isinstance(auth_state, dict) or not auth_state.get("access_token") or not auth_state.get("refresh_token"):
        return None
    issued, expires = token_times(auth_state)
    if expires is None:
        return None  # opaque token of unknown lifetime: oauthenticator's userinfo check decides
    if expires - time.time() > refresh_margin(authenticator, issued, expires):
        return True
    lock = _locks.setdefault(authenticator, {}).setdefault(user.name, asyncio.Lock())
    async with lock:
        state = await user.get_auth_state()
        if not isinstance(state, dict) or not state.get("refresh_token"):
            return False
        issued, expires = token_times(state)
        left = (expires - time.time()) if expires is not None else 0.0
        if expires is not None and left > refresh_margin(authenticator, issued, expires):
            return True  # refreshed by a concurrent request while we waited
        return await _refresh(authenticator, user, state, left)


async def _refresh(authenticator: Any, user: Any, state: dict[str, Any], left: float) -> Any:
    from tornado.httpclient import HTTPClientError
    from tornado.web import HTTPError

    refresh_token = state["refresh_token"]
    params = authenticator.build_refresh_token_request_params(refresh_token)
    try:
        token_info = await authenticator.get_token_info(None, params)
    except (HTTPClientError, HTTPError) as exc:
        code = getattr(exc, "code", None) or getattr(exc, "status_code", 0)
        if 400 <= int(code or 0) < 500:
            authenticator.log.warning(
                "the issuer refused to refresh the tokens of %s (HTTP %s); they must log in again", user.name, code
            )
            return False
        authenticator.log.warning("cannot refresh the tokens of %s now (HTTP %s); keeping them", user.name, code)
        return left > 0
    except (TimeoutError, OSError) as exc:
        authenticator.log.warning(
            "cannot refresh the tokens of %s now (%s); keeping them", user.name, type(exc).__name__
        )
        return left > 0
    if not token_info.get("refresh_token"):
        token_info["refresh_token"] = refresh_token
    model = await authenticator._token_to_auth_model(token_info)
    if not await _still_allowed(authenticator, model):
        authenticator.log.warning(
            "%s is no longer allowed by the hub's authenticator (blocked, or no longer in allowed_groups at the "
            "identity provider): their tokens are not refreshed; they must log in again",
            user.name,
        )
        return False
    new_state = dict(model.get("auth_state") or {})
    now = time.time()
    expires_in = token_info.get("expires_in")
    if isinstance(expires_in, (int, float)) and not isinstance(expires_in, bool):
        new_state["issued_at"], new_state["expires_at"] = now, now + float(expires_in)
    model["auth_state"] = new_state
    await user.save_auth_state(new_state)  # inside the lock: no one may use the spent refresh token
    authenticator.log.info(
        "refreshed the access token of %s (expires in %.0f s)",
        user.name,
        new_state["expires_at"] - now if "expires_at" in new_state else float("nan"),
    )
    return model


async def _still_allowed(authenticator: Any, model: dict[str, Any]) -> bool:
    """What JupyterHub asks at login (``check_blocked_users`` then ``check_allowed``), asked again at refresh."""
    from tornado.web import HTTPError

    name = model.get("name")
    if not isinstance(name, str) or not name:
        return False
    for check in ("check_blocked_users", "check_allowed"):
        method = getattr(authenticator, check, None)
        if method is None:
            continue
        try:
            verdict = method(name, model)
            if inspect.isawaitable(verdict):
                verdict = await verdict
        except HTTPError:  # oauthenticator refuses some users by raising 403
            return False
        if not verdict:
            return False
    return True
