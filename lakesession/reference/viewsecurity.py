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
caller ``referenced-by`` is ignored (debug log) and the caller alone is checked on the target; if
that denies, the 403's one-line message (same ``Principal 'x' is not authorized for …`` prefix)
adds that the chain was ignored because the caller is not a trusted engine, and that DEFINER views
are read through one (``lakesession engine``). Without ``referenced-by`` the message is unchanged.

Who is a trusted engine (rules, token exchange, the start-up check) is ``trust``'s business; its
names are re-exported here. A trusted engine acting for a user (``lakesession engine``, RFC 8693)
is trusted for who *acts*, while the principal (every check, the user in effect) stays the user.

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
  case variants. A trusted engine *acting for a user* (a delegated token) may set it only to
  that user's own principal name (else 403 ``ProtectedPropertyModification``): otherwise any user
  could, through the engine, create a DEFINER view "owned" by someone else and read what they can.
  Removing it through the engine stays allowed (the view becomes INVOKER: nobody gains anything).
  The engine calling as itself (no ``act``) may name any principal, as before.
* The owner property may name only an existing principal (400 otherwise), while trusted engines
  give it effect.
* Only the owner changes a DEFINER view's SQL, while trusted engines give the owner effect: a commit
  that adds a view version or makes another one current (a replace, a roll-back) must leave the view
  INVOKER or owned by the caller (the token's principal: the user, when the engine acts for one), who
  already owns it or is named owner by the same commit (which only the engine acting for the caller
  may do, above); else 403 ``ForbiddenException`` naming the view, its owner and the rule. Otherwise
  whoever may replace a view (``VIEW_WRITE_PROPERTIES``) could make it run their SQL as its owner.
  Trino's rule (the replacer of a SECURITY DEFINER view becomes its owner) is had by asking for it in
  the commit, never by the server rewriting the owner: a commit lands as sent, and only trusted engines
  write the owner property. The engine calling as itself is bound too: it owns no one's view.
  Property-only commits keep the rules above.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from fastapi import Request

from .._wire import referenced_by
from .authz import Privilege, Securable
from .errors import BadRequest, Forbidden
from .nskeys import check_level, path_text
from .refby import raw_param
from .trust import TrustConfigurationError as TrustConfigurationError
from .trust import acting_for_user as acting_for_user
from .trust import caller_trusted as caller_trusted
from .trust import check_trust_configuration as check_trust_configuration
from .trust import current_actor as current_actor
from .trust import has_actor as has_actor
from .trust import is_trusted as is_trusted
from .trust import matches_every_token as matches_every_token
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
        ok = ctx.allowed_for(user, Privilege.VIEW_READ, sec)
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
    ok = ctx.allowed_for(user, privilege, target)
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
    ignored = False
    if raw is not None and raw.strip():
        if caller_trusted(ctx):
            chain = parse_referenced_by(raw, ctx.services.settings.namespace_separator)
            if chain:
                return replace(evaluate_chain(ctx, chain, target, privilege, action=action), referenced_by=raw)
        else:
            ignored = True
    authorize_caller(ctx, action, privilege, target, chain_ignored=ignored)
    return EffectiveUser(ctx.principal.name)


def _caller_text(ctx: RequestContext) -> str:
    actor = ctx.actor
    return f"{actor!r} (acting for {ctx.principal.name!r})" if actor is not None else repr(ctx.principal.name)


def authorize_caller(
    ctx: RequestContext, action: str, privilege: Privilege, target: Securable, *, chain_ignored: bool = False
) -> None:
    """``ctx.authorize`` for the caller alone. ``chain_ignored``: the request carried ``referenced-by`` from
    an untrusted caller; a denial then also says why the chain did not count (one line, same prefix)."""
    if not chain_ignored:
        ctx.authorize(action, privilege, target)
        return
    logger.debug("ignoring referenced-by from untrusted caller %s", _caller_text(ctx))
    try:
        ctx.authorize(action, privilege, target)
    except Forbidden as exc:
        raise Forbidden(
            f"{exc.message}; referenced-by was ignored because {_caller_text(ctx)} is not a trusted engine of "
            "this catalog: DEFINER views must be read through a trusted engine (e.g. lakesession engine)"
        ) from None


# ---------------------------------------------------------------- owner property protection
def check_owner_property_change(
    ctx: RequestContext, changes: Mapping[str, str] | Iterable[str], *, removing: bool = False
) -> None:
    """403 ``ProtectedPropertyModification`` when ``changes`` (properties set, with their values, or keys
    removed) touch the owner property and the caller may not: see the module docstring."""
    settings = ctx.services.settings
    if not settings.trusted_engines:
        return
    owner_key = settings.view_owner_property
    touched = [k for k in changes if k.lower() == owner_key.lower()]
    if not touched:
        return
    trusted = caller_trusted(ctx)
    if not trusted:
        why = f"only trusted engines may {'remove' if removing else 'set'} the view owner property {owner_key!r}"
    elif not removing and any(k != owner_key for k in touched):
        why = f"property {touched[0]!r} differs from the owner property {owner_key!r} only in casing"
    elif removing or not acting_for_user(ctx):
        return
    else:  # a trusted engine acting for a user: the view may only run as that user
        user = ctx.principal.name
        values = [changes[k] for k in touched] if isinstance(changes, Mapping) else [None]
        if all(v == user for v in values):
            return
        shown = f"{values[0]!r}" if values[0] is not None else "an unknown value"
        why = (
            f"a trusted engine acting for {user!r} may set the view owner property {owner_key!r} only to that "
            f"user's own principal name ({user!r}), not {shown}"
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


def check_definer_sql_change(ctx: RequestContext, view: Securable, base: ViewMetadata, result: ViewMetadata) -> None:
    """403 when a commit turning ``base`` into ``result`` changes the SQL of a view that would then run as
    someone other than the caller (its DEFINER owner): see the module docstring."""
    settings = ctx.services.settings
    if not settings.trusted_engines:
        return
    owner_key, caller = settings.view_owner_property, ctx.principal.name
    owner = (result.properties or {}).get(owner_key)
    if owner is None or owner == caller:
        return
    added = {v.version_id for v in result.versions} - {v.version_id for v in base.versions}
    if result.current_version_id == base.current_version_id and not added:
        return  # property-only (or location, schema…): the view still runs the SQL its owner left
    before = (base.properties or {}).get(owner_key)
    what = f"DEFINER {view} (owner {before!r})" if before is not None else str(view)
    ctx.audit("replace_view", view, "deny", {"reason": "changes the SQL of a DEFINER view", "owner": owner})
    ctx.flush()
    raise Forbidden(
        f"Principal {caller!r} may not change the SQL of {what}: only the owner of a DEFINER view may change "
        f"its SQL; the replacement would run as {owner!r}"
    )
