"""Trusted engines: which callers may send ``referenced-by`` view chains and write the view owner property.

``ServerSettings.trusted_engines`` names them; ``viewsecurity`` gives the trust its effect (DEFINER views)
and re-exports these names.

* Rules: ``{"principal": NAME | [NAME…]}`` matches a token whose principal, or whose current actor's
  principal name (the outermost ``act``'s principal claim: ``act.sub`` by default), is NAME.
  ``{"issuer": ISS?, "audience": AUD | [AUD…]?, "subject": SUB | [SUB…]?}``: ``iss`` must equal
  ``issuer`` when given; ``sub``, or the current actor's ``sub`` (under the same issuer), equal to
  a subject matches; an ``aud`` containing an audience matches **only a token without ``act``**:
  in a token exchange the requester names the audience (RFC 8693), so a user exchanging her own
  token could ask for the engine's. A delegated token is trusted only by a rule naming its actor.
  A rule without principal, audience or subject never matches.
* **A trusted engine acting for a user** (``lakesession engine``): the engine exchanges the user's
  token at the issuer (RFC 8693) for one whose ``sub`` is the user and whose ``act.sub`` is the engine.
  Trust goes by who *acts*: the current actor is the outermost ``act`` (a nested ``act`` is history,
  RFC 8693 §4.1), so a token the engine minted for alice and alice re-exchanged is alice acting, not
  the engine. The principal (every privilege check, the user in effect, ``ctx.principal``) stays the
  user; the audit records name the actor beside it (``RequestContext.audit``).
* **An engine recognised by the token's authorized party** (Keycloak's standard token exchange, v2):
  ``{"issuer": ISS, "authorized_party": CLIENT | [CLIENT…]}``. Keycloak's exchanged token names the user
  (``sub``, the user's ``sid``) and the requesting client only in ``azp``: it carries **no** ``act``. Such a
  rule matches a token of exactly that ``iss`` (required: an issuer-less rule never matches), without
  ``act``, whose ``azp`` is the engine's client, and that is not the engine client's own service-account
  token (a principal or ``preferred_username`` of ``service-account-<client>``, or a ``client_id`` claim:
  Keycloak's marks of a client-credentials token; ``service_account`` names another). ``azp`` is who
  *asked* for the token, so the rule is only as strong as the issuer's client configuration: the engine's
  client must be confidential (its secret the engine's alone) with no user-facing flow (standard, implicit,
  direct-access grants, device): else a user could sign in *through* the engine's client and get
  ``azp`` = engine without the engine (``docs/how-to/keycloak.md``). The engine then acts for the user as
  with ``act``: every check stays the user's, the audit names the client as the actor.
* A rule that matches every token this catalog accepts (its own audience, or an empty rule) is refused
  at start-up unless the catalog is explicitly ``single_user`` with at most one principal besides the
  built-in admin: in a multi-user catalog a user's own process (their notebook's Spark) must never be a
  trusted engine, or any user could act as any view's owner.

Imports only the settings: the server checks the rules (``check_trust_configuration``) before it starts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from .claims import claim_at
from .settings import ServerSettings


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, Iterable):
        return [str(v) for v in value]
    return [str(value)]


def has_actor(claims: dict[str, Any]) -> bool:
    """Whether someone acts for the token's subject (token exchange, RFC 8693): an ``act`` claim, of any value."""
    return claims.get("act") is not None


def current_actor(claims: dict[str, Any], claim: str = "sub") -> str | None:
    """The current actor's ``claim`` (``sub``, or the catalog's principal claim): the *outermost* ``act`` only.

    RFC 8693 §4.1: a nested ``act`` records earlier actors (history); only the outermost one acts now."""
    act = claims.get("act")
    value = claim_at(act, claim) if isinstance(act, dict) else None  # a claim path, as for the principal
    return value if isinstance(value, str) and value else None


def _party_rule_matches(rule: dict[str, Any], claims: dict[str, Any], principal: str | None) -> bool:
    """An ``authorized_party`` rule (see the module docstring): the issuer's token for a user, asked for by
    the engine's client (``azp``), never one with ``act`` nor the engine client's own service-account token."""
    parties = _as_list(rule.get("authorized_party"))
    issuer = rule.get("issuer")
    azp = claims.get("azp")
    if not parties or not isinstance(issuer, str) or claims.get("iss") != issuer or has_actor(claims):
        return False
    if not isinstance(azp, str) or azp not in parties:
        return False
    own = set(_as_list(rule.get("service_account"))) | {f"service-account-{azp}"}
    if principal in own or claims.get("preferred_username") in own or claims.get("client_id") is not None:
        return False
    return True


def engine_party(claims: dict[str, Any], settings: ServerSettings, principal: str | None = None) -> str | None:
    """The engine client acting for the token's subject by an ``authorized_party`` rule (its ``azp``), else None."""
    for rule in settings.trusted_engines or ():
        if isinstance(rule, dict) and "authorized_party" in rule and _party_rule_matches(rule, claims, principal):
            return str(claims["azp"])
    return None


def acting_engine(claims: dict[str, Any], settings: ServerSettings, principal: str | None = None) -> str | None:
    """Who acts for the token's subject: the outermost ``act``'s ``sub`` (RFC 8693), else the engine client an
    ``authorized_party`` rule recognises (Keycloak's exchange names it only in ``azp``), else None."""
    act = claims.get("act")
    sub = act.get("sub") if isinstance(act, dict) else None
    if isinstance(sub, str):
        return sub
    return engine_party(claims, settings, principal)


def is_trusted(claims: dict[str, Any], principal: str | None, settings: ServerSettings) -> bool:
    """Whether the caller (its token claims / principal name) matches a trusted-engine rule.

    A delegated token (token exchange: ``act``) is trusted for who *acts*: a ``principal`` rule matches the
    token's principal or its current actor's principal name (the outermost ``act``'s principal claim), a
    ``subject`` rule its ``sub`` or the current actor's ``sub``; an ``audience`` rule never matches a delegated
    token (whoever asks for an exchange names the audience, so it says nothing about the actor).
    """
    actor_name = current_actor(claims, settings.principal_claim)
    for rule in settings.trusted_engines or ():
        if not isinstance(rule, dict):
            continue
        if "principal" in rule:
            names = _as_list(rule["principal"])
            if any(n is not None and n in names for n in (principal, actor_name)):
                return True
            continue
        if "authorized_party" in rule:
            if _party_rule_matches(rule, claims, principal):
                return True
            continue
        if _issuer_rule_matches(rule, claims):
            return True
    return False


def _issuer_rule_matches(rule: dict[str, Any], claims: dict[str, Any]) -> bool:
    audiences = _as_list(rule.get("audience", rule.get("audiences")))
    subjects = _as_list(rule.get("subject", rule.get("subjects")))
    if not audiences and not subjects:
        return False
    issuer = rule.get("issuer")
    if issuer is not None and claims.get("iss") != issuer:
        return False
    sub = claims.get("sub")
    if sub is not None and sub in subjects:
        return True
    if has_actor(claims):
        act = claims["act"]
        actor_iss = act.get("iss", claims.get("iss")) if isinstance(act, dict) else None
        actor_sub = current_actor(claims)
        return actor_sub is not None and actor_sub in subjects and (issuer is None or actor_iss == issuer)
    return any(a in _as_list(claims.get("aud")) for a in audiences)


class TrustConfigurationError(ValueError):
    """The trusted-engine rules would make every caller a trusted engine in a multi-user catalog."""


def matches_every_token(rule: Any, settings: ServerSettings) -> bool:
    """Whether ``rule`` is met (or meant to be met) by any token this catalog accepts: an empty rule, or
    one whose audience is the catalog's own (every accepted token carries it) under the catalog's issuer."""
    if not isinstance(rule, dict) or "principal" in rule or "authorized_party" in rule:
        return False
    audiences = _as_list(rule.get("audience", rule.get("audiences")))
    subjects = _as_list(rule.get("subject", rule.get("subjects")))
    issuer = rule.get("issuer")
    if issuer is not None and issuer != settings.effective_issuer_url:
        return False
    return (not audiences and not subjects) or settings.audience in audiences


def check_trust_configuration(settings: ServerSettings, principals: Iterable[str]) -> None:
    """Refuse to start with a trust rule that matches every token unless the catalog is single-user.

    A trusted engine may send ``referenced-by`` (run views as their DEFINER) and set the view owner
    property; a user's own process (a notebook's Spark) is under the user's control, so if every
    token were trusted, any user could read whatever any view owner can. Only a single-user catalog
    (the embedded default: one demo user, who owns everything anyway) may trust its own engine.
    """
    for rule in settings.trusted_engines or ():
        if isinstance(rule, dict) and "authorized_party" in rule and not isinstance(rule.get("issuer"), str):
            raise TrustConfigurationError(
                f"trusted_engines rule {rule!r} names an authorized_party without an issuer: azp is the client that "
                "asked for a token, which means something only at one issuer. Add issuer: <the issuer URL>."
            )
        if (
            isinstance(rule, dict)
            and "authorized_party" in rule
            and settings.audience in _as_list(rule.get("authorized_party"))
        ):
            raise TrustConfigurationError(
                f"trusted_engines rule {rule!r} names the catalog's own audience {settings.audience!r} as the "
                "engine's client: name the engine's own confidential client (e.g. authorized_party: engine)."
            )
    broad = [r for r in settings.trusted_engines or () if matches_every_token(r, settings)]
    if not broad:
        return
    if not settings.single_user:
        raise TrustConfigurationError(
            f"trusted_engines rule {broad[0]!r} matches every token of this catalog (audience "
            f"{settings.audience!r}), so every user would be a trusted engine and could act as any view's "
            "owner. Name the engines instead: {'principal': NAME}, or {'issuer': ISS, 'audience': AUD} with "
            "an audience only the engine's tokens carry. (A single-user catalog may pass single_user=True.)"
        )
    users = sorted(set(principals))
    if len(users) > 1:
        raise TrustConfigurationError(
            f"single_user=True, but the catalog has {len(users)} principals ({', '.join(users[:5])}): "
            f"trusted_engines rule {broad[0]!r} would make each of them a trusted engine. "
            "Drop single_user and name the trusted engines."
        )


class _Request(Protocol):
    """What the two checks below read of a request's context (``context.RequestContext``, which imports this
    module: a structural type keeps the import one-way)."""

    @property
    def claims(self) -> dict[str, Any]: ...

    @property
    def principal(self) -> Any: ...

    @property
    def services(self) -> Any: ...


def caller_trusted(ctx: _Request) -> bool:
    """Whether the request's caller (its token) is a trusted engine."""
    return is_trusted(ctx.claims, ctx.principal.name, ctx.services.settings)


def acting_for_user(ctx: _Request) -> bool:
    """Whether someone (an engine) acts for the request's principal: an ``act`` claim, or an engine client an
    ``authorized_party`` rule recognises (the owner-property rules then hold it to that user's name)."""
    return has_actor(ctx.claims) or engine_party(ctx.claims, ctx.services.settings, ctx.principal.name) is not None
