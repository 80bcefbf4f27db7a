"""View security: DEFINER/INVOKER views and the ``referenced-by`` view chain (Lakekeeper's model).

When a query engine loads a table (or view, or a table's credentials) *through* views, it
passes the chain in the ``referenced-by`` query parameter, outermost view first. If the
caller is a **trusted engine** (``ServerSettings.trusted_engines``) the chain is walked:

* the *user in effect* starts as the caller;
* every view is checked for ``VIEW_READ`` as the user in effect;
* a view whose owner property (``ServerSettings.view_owner_property``, default
  ``trino.run-as-owner``) is set is a DEFINER view: from there on the user in effect is its
  owner (execution is *delegated*); a view without it is INVOKER and changes nothing;
* every link is verified, never taken on trust: each view after the first, and then the target,
  must be read by the previous view's SQL (``viewsql.reads``: sqlglot in the view's dialect,
  unqualified names in its default catalog and namespace) — else 403;
* the target is checked for the route's privilege as the user in effect; a chain only ever
  grants reading (``READ_PRIVILEGES``): credentials vended through it are read-only, the signer
  signs no write through it, and any write request carrying ``referenced-by`` is refused.

All checks are computed, audited one record per step, then decided at once: any denial is a
403 naming the failed step (never anything about the target's metadata). From an untrusted
caller ``referenced-by`` is ignored (debug log) and the caller alone is checked on the target.

Decisions made here:

* A view of the chain that does not exist answers 403 (``ForbiddenException``, "not found or
  not authorized"), not 404: the chain may be evaluated as another principal (a DEFINER
  owner), so a 404 would reveal to the caller what only the owner may see.
* A DEFINER owner that names no principal of the directory answers 403 ``ForbiddenException``
  with a message naming the view and the owner (a server-side configuration problem the
  caller cannot fix by changing the request, so not a 400).
* The owner property is protected only while trusted engines are configured (as in
  Lakekeeper): without them it has no effect. Setting or removing it, under any casing, is a
  403 ``ProtectedPropertyModification`` for untrusted callers; trusted engines may set only the
  exact configured key (a case variant would be silently ignored by engines) but may remove
  case variants.
* A trust rule that matches every token this catalog accepts (its own audience, or an empty
  rule) is refused at start-up unless the catalog is explicitly ``single_user`` with at most one
  principal besides the built-in admin: in a multi-user catalog a user's own process (their
  notebook's Spark) must never be a trusted engine, or any user could act as any view's owner.
* The owner property may name only an existing principal (400 otherwise), while trusted engines
  give it effect.
* Trust rules: ``{"principal": NAME}`` (the caller's principal name, for the embedded issuer)
  or ``{"issuer": ISS?, "audience": AUD | [AUD…]?, "subject": SUB | [SUB…]?}``: ``iss`` must
  equal ``issuer`` when given, and ``aud`` must contain one of the audiences or ``sub`` equal
  one of the subjects. A rule without principal, audience or subject never matches.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from fastapi import Request

from .._wire import referenced_by
from .authz import Privilege, Securable
from .errors import BadRequest, Forbidden
from .nskeys import check_level, path_text
from .refby import raw_param
from .settings import ServerSettings
from .viewsql import reads_at

if TYPE_CHECKING:
    from pyiceberg.view.metadata import ViewMetadata

    from .context import RequestContext

logger = logging.getLogger(__name__)

MAX_CHAIN = 10
TOO_MANY = "TooManyViewsInChainException"
PROTECTED = "ProtectedPropertyModification"

ViewId = tuple[tuple[str, ...], str]
# What a view chain may grant: reading. Anything else through referenced-by is refused (403).
READ_PRIVILEGES = frozenset({Privilege.VIEW_READ, Privilege.TABLE_READ_DATA, Privilege.TABLE_READ_PROPERTIES})


@dataclass(frozen=True)
class EffectiveUser:
    """The principal whose privileges decided the target (and pick the vending mode)."""

    name: str
    delegated: bool = False
    chain: list[str] = field(default_factory=list)
    referenced_by: str | None = None  # the raw chain as received, for endpoints advertised to the engine

    def detail(self) -> dict[str, Any]:
        """Audit detail for issuances made on behalf of this user (empty without a chain)."""
        if not self.chain:
            return {}
        return {"delegated": self.delegated, "chain": list(self.chain), "user_in_effect": self.name}


# ---------------------------------------------------------------- parsing
def _bad_level(level: str) -> bool:
    try:
        check_level(level)  # '.' inside a level is fine: the separator, not dots, splits levels
    except BadRequest:
        return True
    return False


def parse_referenced_by(raw: str, separator: str = "%1F") -> list[ViewId]:
    """Parse the *raw* (still percent-encoded) ``referenced-by`` value into ``[(namespace, view), …]``.

    Split on ``,`` first, then percent-decode each identifier (so ``%2C`` is a comma inside a
    name), then split on the namespace separator; its last occurrence separates the view name.
    More than ``MAX_CHAIN`` views → 400 ``TooManyViewsInChainException``; malformed → 400.
    """
    if raw is None or not raw.strip():
        return []
    count = raw.count(",") + 1
    if count > MAX_CHAIN:
        raise BadRequest(f"Too many views in referenced-by: {count} (at most {MAX_CHAIN})", type=TOO_MANY)
    try:
        chain = referenced_by.decode(raw, separator)
    except referenced_by.MalformedReferencedBy as exc:
        raise BadRequest(f"Malformed referenced-by: {exc}") from None
    for i, (ns, name) in enumerate(chain, 1):
        if any(_bad_level(level) for level in ns):
            raise BadRequest(f"Malformed referenced-by: view {i} has an invalid namespace level")
        if not name or not name.strip() or not name.isprintable() or len(name) > 255 or "/" in name:
            raise BadRequest(f"Malformed referenced-by: view {i} has an invalid view name")
    return chain


# ---------------------------------------------------------------- trust
def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, Iterable):
        return [str(v) for v in value]
    return [str(value)]


def is_trusted(claims: dict[str, Any], principal: str | None, settings: ServerSettings) -> bool:
    """Whether the caller (its token claims / principal name) matches a trusted-engine rule."""
    for rule in settings.trusted_engines or ():
        if not isinstance(rule, dict):
            continue
        if "principal" in rule:
            if principal is not None and principal in _as_list(rule["principal"]):
                return True
            continue
        audiences = _as_list(rule.get("audience", rule.get("audiences")))
        subjects = _as_list(rule.get("subject", rule.get("subjects")))
        if not audiences and not subjects:
            continue
        issuer = rule.get("issuer")
        if issuer is not None and claims.get("iss") != issuer:
            continue
        aud = _as_list(claims.get("aud"))
        if any(a in aud for a in audiences) or (claims.get("sub") is not None and claims.get("sub") in subjects):
            return True
    return False


class TrustConfigurationError(ValueError):
    """The trusted-engine rules would make every caller a trusted engine in a multi-user catalog."""


def matches_every_token(rule: Any, settings: ServerSettings) -> bool:
    """Whether ``rule`` is met (or meant to be met) by any token this catalog accepts: an empty rule, or
    one whose audience is the catalog's own (every accepted token carries it) under the catalog's issuer."""
    if not isinstance(rule, dict) or "principal" in rule:
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


def caller_trusted(ctx: RequestContext) -> bool:
    return is_trusted(ctx.claims, ctx.principal.name, ctx.services.settings)


# ---------------------------------------------------------------- chain evaluation
def _view_name(view: ViewId) -> str:
    return path_text((*view[0], view[1]))


def _view(ctx: RequestContext, view: ViewId) -> tuple[str, ViewMetadata] | None:
    """(metadata location, metadata) of a view, or None."""
    from .viewstore import ViewStore  # pyiceberg: not imported by the server's start (check_trust_configuration)

    return ViewStore(ctx.services).get(*view)


def _target_ident(target: Securable) -> ViewId:
    return tuple(target.path[:-1]), target.path[-1]


def evaluate_chain(
    ctx: RequestContext, chain: list[ViewId], target: Securable, privilege: Privilege, *, action: str = "load"
) -> EffectiveUser:
    """Check every view of ``chain`` and then ``target`` for the right user, audit each step, and
    decide all at once (403 naming the first failed step). Returns the user in effect on the target."""
    settings = ctx.services.settings
    directory = ctx.services.directory
    owner_key = settings.view_owner_property
    names = [_view_name(v) for v in chain]
    user, delegated = ctx.principal.name, False
    failures: list[str] = []
    previous: tuple[str, ViewMetadata] | None = None  # the view whose SQL must read the next object
    for i, view in enumerate(chain, 1):
        sec = Securable.view(*view)
        ok = directory.is_allowed(user, Privilege.VIEW_READ, sec)
        found = _view(ctx, view)
        props = None if found is None else dict(found[1].properties or {})
        detail: dict[str, Any] = {
            "privilege": Privilege.VIEW_READ.value,
            "step": i,
            "delegated": delegated,
            "chain": names,
            "user_in_effect": user,
        }
        owner = props.get(owner_key) if props is not None else None
        if props is None:
            ok = False
            detail["reason"] = "view not found"
        if not ok:  # one message for "missing" and "denied": no existence leak
            failures.append(f"step {i} (view {names[i - 1]}): VIEW_READ denied for {user!r} or view not found")
        elif i > 1 and not _links(ctx, previous, view):
            ok = False
            detail["reason"] = "not read by the previous view"
            failures.append(f"step {i} (view {names[i - 1]}): not read by the SQL of view {names[i - 2]}")
        if owner is not None:
            detail["security"], detail["owner"] = "definer", owner
        elif props is not None:
            detail["security"] = "invoker"
        unresolved = owner is not None and (not owner.strip() or directory.get_principal(owner) is None)
        if unresolved:
            detail["reason"] = "owner does not resolve to a principal"
        ctx.audit(action, sec, "allow" if ok and not unresolved else "deny", detail)
        if unresolved:
            if ok:  # only someone allowed to read the view learns who its owner is
                failures.append(
                    f"step {i} (view {names[i - 1]}): DEFINER owner {owner!r} "
                    f"does not resolve to a principal of this catalog"
                )
            return _deny(ctx, action, failures)
        if owner is not None:
            user, delegated = owner, True
        previous = found
    ok = directory.is_allowed(user, privilege, target)
    target_detail: dict[str, Any] = {
        "privilege": privilege.value,
        "step": len(chain) + 1,
        "delegated": delegated,
        "chain": names,
        "user_in_effect": user,
    }
    if ok and privilege not in READ_PRIVILEGES:
        ok = False
        target_detail["reason"] = "read-only through a view chain"
        failures.append(f"target {target}: access through a view chain is read-only ({privilege.value} refused)")
    elif ok and chain and not _links(ctx, previous, _target_ident(target)):
        ok = False
        target_detail["reason"] = "not read by the last view"
        failures.append(f"target {target}: not read by the SQL of view {names[-1]}")
    elif not ok:
        failures.append(f"target {target}: {user!r} lacks {privilege.value}")
    ctx.audit(action, target, "allow" if ok else "deny", target_detail)
    if failures:
        _deny(ctx, action, failures)
    return EffectiveUser(user, delegated, names)


def _links(ctx: RequestContext, view: tuple[str, ViewMetadata] | None, ident: ViewId) -> bool:
    """Whether ``view``'s SQL reads ``ident`` (a chain link the server verifies, never takes on trust)."""
    return view is not None and ident in reads_at(*view, ctx.services.settings.catalog_name)


def _deny(ctx: RequestContext, action: str, failures: list[str]) -> EffectiveUser:
    ctx.flush()
    raise Forbidden(
        f"Principal {ctx.principal.name!r} is not authorized for {action} through the view chain: "
        + "; ".join(failures)
    )


def authorize_target(
    ctx: RequestContext, request: Request, action: str, privilege: Privilege, target: Securable
) -> EffectiveUser:
    """The route's authorization step: the view chain from a trusted caller, else the caller alone."""
    raw = raw_param(request)
    if raw is not None and raw.strip():
        if caller_trusted(ctx):
            chain = parse_referenced_by(raw, ctx.services.settings.namespace_separator)
            if chain:
                return replace(evaluate_chain(ctx, chain, target, privilege, action=action), referenced_by=raw)
        else:
            logger.debug("ignoring referenced-by from untrusted caller %r", ctx.principal.name)
    ctx.authorize(action, privilege, target)
    return EffectiveUser(ctx.principal.name)


# ---------------------------------------------------------------- owner property protection
def check_owner_property_change(ctx: RequestContext, keys: Iterable[str], *, removing: bool = False) -> None:
    """403 ``ProtectedPropertyModification`` when ``keys`` (set or removed) touch the owner property
    and the caller may not: see the module docstring."""
    settings = ctx.services.settings
    if not settings.trusted_engines:
        return
    owner_key = settings.view_owner_property
    touched = [k for k in keys if k.lower() == owner_key.lower()]
    if not touched:
        return
    trusted = caller_trusted(ctx)
    if trusted and (removing or all(k == owner_key for k in touched)):
        return
    why = (
        f"only trusted engines may {'remove' if removing else 'set'} the view owner property {owner_key!r}"
        if not trusted
        else f"property {touched[0]!r} differs from the owner property {owner_key!r} only in casing"
    )
    raise Forbidden(f"Protected property modification: {why}", type=PROTECTED)


def check_owner_value(ctx: RequestContext, properties: dict[str, str]) -> None:
    """400 when the owner property (while trusted engines give it effect) names no principal."""
    settings = ctx.services.settings
    if not settings.trusted_engines or settings.view_owner_property not in properties:
        return
    owner = properties[settings.view_owner_property]
    if not owner or not owner.strip() or ctx.services.directory.get_principal(owner) is None:
        raise BadRequest(
            f"View owner property {settings.view_owner_property!r} must name a principal of this catalog; "
            f"{owner!r} is none. Use an existing principal's name."
        )
