"""Client-side view chain resolution: which user the catalog checks at every step of a view's lineage.

``chain_tree(catalog, "db.v1", ...)`` loads the view, parses its SQL with sqlglot (in the view's
dialect), finds the tables and views it reads, and follows them — sending the chain walked so
far in the ``referenced-by`` query parameter (outermost view first), exactly as a query engine
does. The catalog (when it trusts this client as an engine) then evaluates DEFINER/INVOKER
security along the chain, so every node of the returned ``ChainNode`` tree carries the
catalog's own decision (``allow``/``deny``/``missing``) for that step. Leaf tables are loaded
(metadata only, ``snapshots=refs``): no data file is ever read.

The *user in effect* starts as the token's principal (``sub``) and switches to a DEFINER
view's owner (view property ``trino.run-as-owner``) for everything below that view.

Limits, by design of the REST protocol:

* A catalog answers 403 for both "denied" and "does not exist" once a chain is involved, and
  loadView/loadTable are the only probes. A reference that is refused both as a view and as a
  table is reported with ``kind="unknown"``.
* From an untrusted client the catalog ignores ``referenced-by``: every decision is then the
  caller's own (the tree still shows who *would* be in effect).
* References with a catalog part that is neither one of ``catalog_names`` nor the view's
  ``default-catalog`` are leaves of kind ``external`` (not followed, no decision).
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import sqlglot

from .._wire import referenced_by, viewsql
from .._wire.referenced_by import DEFAULT_SEPARATOR, ViewId
from ..errors import ViewChainError

if TYPE_CHECKING:
    from pyiceberg.catalog.rest import RestCatalog

__all__ = [
    "ENGINE_HINT",
    "ChainNode",
    "ViewChainError",
    "chain_hint",
    "chain_tree",
    "encode_referenced_by",
    "refusal_note",
]

OWNER_PROPERTY = "trino.run-as-owner"
MAX_DEPTH = 10
ENGINE_HINT = "read the view through the platform's trusted engine: lakesession.connect(..., engine='sc://…'), then session.sql(...)"


# ---------------------------------------------------------------- referenced-by
def encode_referenced_by(chain: list[ViewId], separator: str = DEFAULT_SEPARATOR) -> str:
    """The raw ``referenced-by`` value for ``chain`` (``[(namespace, view), …]``, outermost first);
    the codec is the catalog's own (``lakesession._wire.referenced_by``)."""
    try:
        return referenced_by.encode(chain, separator)
    except referenced_by.MalformedReferencedBy as exc:
        raise ViewChainError(
            f"View chain cannot be sent: {exc}. Qualify the view or set the view's default-namespace."
        ) from exc


# ---------------------------------------------------------------- the tree
@dataclass
class ChainNode:
    """One step of a view chain: a view, a table, or a reference into another catalog.

    ``user_in_effect`` is the principal the catalog checks for this node; ``decision`` is the
    catalog's answer when this node is loaded through the chain above it.
    """

    object: str
    kind: str  # "view" | "table" | "external" | "unknown"
    security: str | None  # "DEFINER" | "INVOKER" | None (not a view / not readable)
    owner: str | None
    user_in_effect: str
    decision: str | None  # "allow" | "deny" | "missing" | None (external: not asked)
    children: list[ChainNode] = field(default_factory=list)
    note: str | None = None

    def walk(self, depth: int = 0) -> Iterable[tuple[int, ChainNode]]:
        yield depth, self
        for child in self.children:
            yield from child.walk(depth + 1)

    def to_rows(self) -> list[dict[str, Any]]:
        """The tree depth-first as flat dicts (``depth``, ``parent`` and the node's fields) for a DataFrame."""
        rows: list[dict[str, Any]] = []
        parents: list[str] = []
        for depth, node in self.walk():
            del parents[depth:]
            rows.append(
                {
                    "depth": depth,
                    "object": node.object,
                    "kind": node.kind,
                    "security": node.security,
                    "owner": node.owner,
                    "user_in_effect": node.user_in_effect,
                    "decision": node.decision,
                    "parent": parents[-1] if parents else None,
                    "note": node.note,
                }
            )
            parents.append(node.object)
        return rows

    def _label(self) -> str:
        bits = [self.kind]
        if self.security:
            bits.append(self.security + (f" owner={self.owner}" if self.owner else ""))
        bits.append(f"as {self.user_in_effect}")
        bits.append(self.decision or "not checked")
        return f"{self.object} [{', '.join(bits)}]" + (f" — {self.note}" if self.note else "")

    def __repr__(self) -> str:
        return "\n".join("  " * depth + ("└─ " if depth else "") + node._label() for depth, node in self.walk())

    def _html_item(self) -> str:
        e = html.escape
        colors = {"allow": "#2e7d32", "deny": "#c62828", "missing": "#6d4c41"}
        badge = (
            '<span style="background:{};color:#fff;border-radius:3px;padding:0 4px;'
            'margin-left:4px;font-size:85%">{}</span>'
        )
        out = f"<code>{e(self.object)}</code>" + badge.format("#455a64", e(self.kind))
        if self.security:
            sec = self.security + (f" · owner {self.owner}" if self.owner else "")
            out += badge.format("#6a1b9a" if self.security == "DEFINER" else "#1565c0", e(sec))
        out += badge.format("#37474f", e(f"as {self.user_in_effect}"))
        out += badge.format(colors.get(self.decision or "", "#9e9e9e"), e(self.decision or "not checked"))
        if self.note:
            out += f' <small style="color:#666">{e(self.note)}</small>'
        if self.children:
            out += "<ul>" + "".join(f"<li>{c._html_item()}</li>" for c in self.children) + "</ul>"
        return out

    def _repr_html_(self) -> str:
        return f'<ul class="lakesession-chain"><li>{self._html_item()}</li></ul>'


# ---------------------------------------------------------------- helpers
def principal_of(token: str) -> str:
    """The ``sub`` of a JWT, read WITHOUT verification (display only); ``"?"`` for opaque tokens."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        sub = claims.get("sub") if isinstance(claims, dict) else None
    except (IndexError, ValueError, TypeError, UnicodeError, AttributeError):
        sub = None
    return sub if isinstance(sub, str) and sub else "?"


def _dotted(ident: ViewId) -> str:
    """For messages: ``ns.view``, or the JSON list when a part contains '.' (``["a.b", "v"]``)."""
    parts = (*ident[0], ident[1])
    return json.dumps(list(parts), ensure_ascii=False) if any("." in p for p in parts) else ".".join(parts)


def _pick_sql(version: dict[str, Any]) -> tuple[str, str]:
    reps = [r for r in version.get("representations") or [] if r.get("type") == "sql" and r.get("sql")]
    if not reps:
        raise ViewChainError("The view has no SQL representation. Recreate it with an engine that stores its SQL.")
    for pick in (
        lambda r: (r.get("dialect") or "").lower() == "spark",
        lambda r: viewsql.dialect(r.get("dialect")) == (r.get("dialect") or "").lower(),
        lambda r: True,
    ):
        rep = next((r for r in reps if pick(r)), None)
        if rep is not None:
            return rep["sql"], viewsql.dialect(rep.get("dialect"))
    raise AssertionError("unreachable")


def references(sql: str, dialect: str) -> list[list[str]]:
    """The identifiers (as lists of parts) of the tables/views ``sql`` reads, in order, CTE names excluded."""
    try:
        return viewsql.references(sql, dialect)
    except sqlglot.errors.SqlglotError as exc:
        raise ViewChainError(
            f"Cannot parse the view's SQL ({dialect}): {exc}. Check the view's representation dialect."
        ) from exc


def current_version(metadata: dict[str, Any], display: str) -> dict[str, Any]:
    """The view metadata's current version (raises when the metadata has none)."""
    current = metadata.get("current-version-id")
    version = next((v for v in metadata.get("versions") or [] if v.get("version-id") == current), None)
    if version is None:
        raise ViewChainError(f"View {display} has no current version in its metadata. Ask the catalog operator.")
    return version


def _classify(parts: list[str], version: dict[str, Any], local: set[str]) -> tuple[ViewId | None, str]:
    """``(identifier in this catalog or None if external, display name)``."""
    try:
        found = viewsql.resolve(parts, version.get("default-namespace") or (), version.get("default-catalog"), local)
    except viewsql.UnqualifiedReference:
        raise ViewChainError(
            f"Unqualified reference {parts[0]!r} in a view without a default-namespace. "
            f"Qualify it in the view's SQL or set the view's default-namespace."
        ) from None
    return found, ".".join((*found[0], found[1]) if found else parts)


class _Client:
    def __init__(self, catalog: RestCatalog, uri: str, prefix: str, separator: str):
        self.catalog, self.separator = catalog, separator
        self.base = f"{uri.rstrip('/')}/v1/" + (f"{quote(prefix.strip('/'), safe='')}/" if prefix else "")

    def _url(self, kind: str, ident: ViewId, chain: list[ViewId], extra: str = "") -> str:
        ns = quote(referenced_by.separator(self.separator).join(ident[0]), safe="")
        url = f"{self.base}namespaces/{ns}/{kind}/{quote(ident[1], safe='')}"
        query = [
            q for q in (extra, f"referenced-by={encode_referenced_by(chain, self.separator)}" if chain else "") if q
        ]
        return url + ("?" + "&".join(query) if query else "")

    def get(self, kind: str, ident: ViewId, chain: list[ViewId]) -> tuple[int, Any]:
        url = self._url(kind, ident, chain, "snapshots=refs" if kind == "tables" else "")
        response = self.catalog._session.get(url)
        try:
            body = response.json()
        except ValueError:
            body = {}
        if response.status_code in (200, 403, 404):
            return response.status_code, body
        message = (body.get("error") or {}).get("message") if isinstance(body, dict) else None
        hint = {
            401: " Your token was rejected: log in again.",
            400: " The catalog rejected the chain (too many views, or a malformed identifier).",
        }
        raise ViewChainError(
            f"Loading {kind[:-1]} {_dotted(ident)} answered {response.status_code}: "
            f"{message or response.text[:200]}.{hint.get(response.status_code, ' Retry, or ask the catalog operator.')}"
        )


def _message(body: Any) -> str | None:
    return (body.get("error") or {}).get("message") if isinstance(body, dict) else None


# ---------------------------------------------------------------- resolution
def chain_tree(
    catalog: RestCatalog,
    name: str | Sequence[str],
    *,
    token: Callable[[], str],
    uri: str,
    prefix: str | None = None,
    max_depth: int = MAX_DEPTH,
    separator: str | None = None,
    owner_property: str = OWNER_PROPERTY,
    catalog_names: Iterable[str] = (),
    engine: str | None = None,
) -> ChainNode:
    """Resolve the view (or table) ``name`` into its chain tree, with the catalog's decision per node.

    Args:
        catalog: The session's RestCatalog (acting as the user); its HTTP session does the loads.
        name: ``namespace.view`` (dotted; multi-level namespaces allowed), or a tuple/list of levels
            and the name (``("a.b", "v")``) when a level contains '.'.
        token: Returns the user's current access token (its ``sub`` is the first user in effect).
        uri: The catalog's base URI.
        prefix: The catalog's path prefix (``/v1/config`` override ``prefix``); default: the
            RestCatalog's ``prefix`` property.
        max_depth: Most views in one chain (the spec's limit is 10).
        separator: Namespace separator (``namespace-separator`` from the config; default ``%1F``).
        owner_property: The view property whose presence makes a view DEFINER.
        catalog_names: Names this catalog goes by in view SQL (e.g. the Spark catalog name);
            other catalog qualifiers become ``external`` leaves.
        engine: The session's trusted engine (``sc://…``), if it has one: a refusal because this client
            is no trusted engine then says to run the query there, not to get an engine.

    Raises:
        ViewChainError: a cycle, a chain deeper than ``max_depth``, unparsable SQL, or an
            unexpected answer from the catalog.
    """
    props = getattr(catalog, "properties", {}) or {}
    if prefix is None:
        prefix = props.get("prefix", "")
    if separator is None:
        separator = props.get("namespace-separator", DEFAULT_SEPARATOR)
    client = _Client(catalog, uri, prefix or "", separator)
    local = {n.lower() for n in catalog_names}
    levels = tuple(name.split(".")) if isinstance(name, str) else tuple(name)
    if len(levels) < 2:
        raise ViewChainError(f"{name!r} is not qualified: pass it as namespace.view (e.g. 'db.{name}').")
    ident: ViewId = (levels[:-1], levels[-1])
    display = name if isinstance(name, str) else _dotted(ident)
    hint = engine_hint(engine)
    return _node(client, ident, display, [], principal_of(token()), max_depth, owner_property, local, hint)


def _node(
    client: _Client,
    ident: ViewId,
    display: str,
    chain: list[ViewId],
    user: str,
    max_depth: int,
    owner_property: str,
    local: set[str],
    hint: str = ENGINE_HINT,
) -> ChainNode:
    if ident in chain:
        cycle = " → ".join(_dotted(v) for v in [*chain[chain.index(ident) :], ident])
        raise ViewChainError(
            f"View cycle: {cycle}. A view must not read itself, directly or through other "
            f"views: replace one of them (CREATE OR REPLACE VIEW) to break the cycle."
        )
    status, body = client.get("views", ident, chain)
    if status == 200:
        return _view_node(client, ident, display, chain, user, body, max_depth, owner_property, local, hint)
    view_status, view_body = status, body
    status, body = client.get("tables", ident, chain)
    if status == 200:
        return ChainNode(display, "table", None, None, user, "allow")
    if status == 404 and view_status == 404:
        return ChainNode(display, "table", None, None, user, "missing", note="no such view or table")
    if status == 404:  # view refused, table absent: a view
        return ChainNode(display, "view", None, None, user, "deny", note=_message(view_body))
    if view_status == 404:
        return ChainNode(display, "table", None, None, user, "deny", note=_message(body))
    note = refusal_note(chain, user, view_body, body, hint=hint)
    return ChainNode(display, "unknown", None, None, user, "deny", note=note)


def chain_hint(message: str) -> str:
    """``message`` (a catalog's 403) with what to do when it says the view chain was ignored: an untrusted
    client should use the trusted engine; an engine the catalog does not trust needs its operator."""
    if "referenced-by was ignored" not in message or "Fix:" in message:
        return message
    if "(acting for" in message:
        return f"{message}. Fix: the catalog's operator must declare this engine in trusted_engines"
    return f"{message}. Fix: {ENGINE_HINT}"


def engine_hint(engine: str | None) -> str:
    """What to do when this client is no trusted engine: get one, or (a session that has one) use it."""
    if engine is None:
        return ENGINE_HINT
    return f"this session's trusted engine ({engine}) is one: session.sql(...) runs queries over the view there"


def refusal_note(chain: Sequence[ViewId], user: str, *bodies: Any, hint: str = ENGINE_HINT) -> str:
    """Why a reference below ``chain`` was refused, from the catalog's messages: this client not being a
    trusted engine (its ``referenced-by`` ignored), a grant the user in effect lacks, or neither said."""
    messages = [m for m in (_message(b) for b in bodies) if m]
    said = " ".join(messages)
    if "referenced-by was ignored" in said:
        return (
            f"refused: this client is not a trusted engine of the catalog, so it checked you instead of {user!r} "
            f"(the view's owner); {hint}"
        )
    lacks = next((m for m in messages if " lacks " in m), None)
    if lacks is not None:
        return f"refused: {lacks.split(': ', 1)[-1]} (the grant is missing for the user in effect, {user!r})"
    if chain:
        return (
            f"refused as a view and as a table; as {user!r} through the chain — if this client is not a trusted "
            f"engine the catalog checked you instead (some catalogs ignore the chain silently): {hint}"
        )
    return "refused both as a view and as a table (the catalog does not say which it is)"


def _view_node(
    client: _Client,
    ident: ViewId,
    display: str,
    chain: list[ViewId],
    user: str,
    body: Any,
    max_depth: int,
    owner_property: str,
    local: set[str],
    hint: str = ENGINE_HINT,
) -> ChainNode:
    metadata = body.get("metadata") or {}
    props = metadata.get("properties") or {}
    owner = props.get(owner_property)
    node = ChainNode(display, "view", "DEFINER" if owner is not None else "INVOKER", owner, user, "allow")
    path = [*chain, ident]
    if len(path) > max_depth:
        raise ViewChainError(
            f"View chain deeper than {max_depth}: {' → '.join(_dotted(v) for v in path)}. "
            f"Catalogs refuse longer referenced-by chains: flatten some of the views."
        )
    version = current_version(metadata, display)
    sql, dialect = _pick_sql(version)
    below = owner if owner is not None else user
    for parts in references(sql, dialect):
        child, child_display = _classify(parts, version, local)
        if child is None:
            node.children.append(
                ChainNode(child_display, "external", None, None, below, None, note="in another catalog: not followed")
            )
            continue
        node.children.append(_node(client, child, child_display, path, below, max_depth, owner_property, local, hint))
    return node
