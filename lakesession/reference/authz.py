"""RBAC in the style of Apache Polaris: privileges granted to roles on securables, inherited downward.

A securable is the catalog, a namespace, a table, a view or a registered storage location (a raw
``s3://`` prefix, ``storage_locations``). A grant on a namespace covers its child namespaces and
every table and view inside them; a grant on the catalog covers every location too, but only
``LOCATION_*`` privileges reach locations (``CATALOG_MANAGE_CONTENT`` does not imply them: raw
data is granted explicitly).
Privileges imply weaker ones (``TABLE_WRITE_DATA`` ⊃ ``TABLE_READ_DATA`` ⊃
``TABLE_READ_PROPERTIES``; ``CATALOG_MANAGE_CONTENT`` ⊃ every content privilege).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from .errors import BadRequest
from .nskeys import parse_path_text, path_text


class Privilege(enum.StrEnum):
    CATALOG_MANAGE_ACCESS = "CATALOG_MANAGE_ACCESS"
    CATALOG_MANAGE_CONTENT = "CATALOG_MANAGE_CONTENT"
    NAMESPACE_CREATE = "NAMESPACE_CREATE"
    NAMESPACE_LIST = "NAMESPACE_LIST"
    NAMESPACE_READ_PROPERTIES = "NAMESPACE_READ_PROPERTIES"
    NAMESPACE_WRITE_PROPERTIES = "NAMESPACE_WRITE_PROPERTIES"
    NAMESPACE_DROP = "NAMESPACE_DROP"
    TABLE_CREATE = "TABLE_CREATE"
    TABLE_LIST = "TABLE_LIST"
    TABLE_READ_PROPERTIES = "TABLE_READ_PROPERTIES"
    TABLE_WRITE_PROPERTIES = "TABLE_WRITE_PROPERTIES"
    TABLE_READ_DATA = "TABLE_READ_DATA"
    TABLE_WRITE_DATA = "TABLE_WRITE_DATA"
    TABLE_DROP = "TABLE_DROP"
    VIEW_CREATE = "VIEW_CREATE"
    VIEW_LIST = "VIEW_LIST"
    VIEW_READ = "VIEW_READ"
    VIEW_WRITE_PROPERTIES = "VIEW_WRITE_PROPERTIES"
    VIEW_DROP = "VIEW_DROP"
    # raw storage locations (``location s3://bucket/prefix/``): credentials for the prefix, read or read-write
    LOCATION_READ = "LOCATION_READ"
    LOCATION_WRITE = "LOCATION_WRITE"
    # act for other principals through token exchange (RFC 8693); granted on the catalog only, implied by nothing
    TOKEN_EXCHANGE = "TOKEN_EXCHANGE"


P = Privilege

# Direct implications; closed transitively below.
_DIRECT: dict[Privilege, set[Privilege]] = {
    P.TABLE_WRITE_DATA: {P.TABLE_READ_DATA, P.TABLE_WRITE_PROPERTIES},
    P.TABLE_READ_DATA: {P.TABLE_READ_PROPERTIES},
    P.TABLE_WRITE_PROPERTIES: {P.TABLE_READ_PROPERTIES},
    P.VIEW_WRITE_PROPERTIES: {P.VIEW_READ},
    P.NAMESPACE_WRITE_PROPERTIES: {P.NAMESPACE_READ_PROPERTIES},
    # Seeing anything inside a namespace lets one read the namespace's own properties.
    P.NAMESPACE_LIST: {P.NAMESPACE_READ_PROPERTIES},
    P.TABLE_LIST: {P.NAMESPACE_READ_PROPERTIES},
    P.VIEW_LIST: {P.NAMESPACE_READ_PROPERTIES},
    P.TABLE_READ_PROPERTIES: {P.NAMESPACE_READ_PROPERTIES},
    P.VIEW_READ: {P.NAMESPACE_READ_PROPERTIES},
    P.LOCATION_WRITE: {P.LOCATION_READ},
    P.CATALOG_MANAGE_CONTENT: {
        p
        for p in Privilege
        if p
        not in (P.CATALOG_MANAGE_ACCESS, P.CATALOG_MANAGE_CONTENT, P.TOKEN_EXCHANGE, P.LOCATION_READ, P.LOCATION_WRITE)
    },
}


def _closure() -> dict[Privilege, frozenset[Privilege]]:
    out: dict[Privilege, frozenset[Privilege]] = {}
    for p in Privilege:
        seen, todo = {p}, [p]
        while todo:
            for q in _DIRECT.get(todo.pop(), ()):
                if q not in seen:
                    seen.add(q)
                    todo.append(q)
        out[p] = frozenset(seen)
    return out


IMPLIES: dict[Privilege, frozenset[Privilege]] = _closure()


def expand(privileges: Iterable[Privilege]) -> frozenset[Privilege]:
    """Every privilege held given the granted ones."""
    out: set[Privilege] = set()
    for p in privileges:
        out |= IMPLIES[p]
    return frozenset(out)


def parse_privilege(value: str) -> Privilege:
    try:
        return Privilege(value.strip().upper())
    except ValueError:
        raise BadRequest(
            f"Unknown privilege {value!r}; expected one of {', '.join(p.value for p in Privilege)}"
        ) from None


SECURABLE_KINDS = ("catalog", "namespace", "table", "view", "location")
LOCATION_PRIVILEGES = frozenset({P.LOCATION_READ, P.LOCATION_WRITE})
LOCATION_SCHEMES = ("s3://", "s3a://", "s3n://")


def normalize_location(url: str) -> str:
    """``s3a://b/raw`` -> ``s3://b/raw/``: one spelling per prefix (grants, index rows, credentials)."""
    url = url.strip()
    for scheme in LOCATION_SCHEMES[1:]:
        if url.startswith(scheme):
            url = "s3://" + url[len(scheme) :]
    return url.rstrip("/") + "/"


@dataclass(frozen=True, order=True)
class Securable:
    """``catalog`` | ``namespace a.b`` | ``table a.b.t`` | ``view a.b.v`` (path includes the object name);
    ``table ["a.b", "t"]`` when a part contains '.' (``nskeys.path_text``)."""

    kind: str
    path: tuple[str, ...] = ()

    @classmethod
    def catalog(cls) -> Securable:
        return cls("catalog", ())

    @classmethod
    def namespace(cls, ns: tuple[str, ...]) -> Securable:
        return cls("namespace", tuple(ns))

    @classmethod
    def table(cls, ns: tuple[str, ...], name: str) -> Securable:
        return cls("table", (*ns, name))

    @classmethod
    def view(cls, ns: tuple[str, ...], name: str) -> Securable:
        return cls("view", (*ns, name))

    @classmethod
    def location(cls, url: str) -> Securable:
        return cls("location", (normalize_location(url),))

    @classmethod
    def parse(cls, text: str) -> Securable:
        """Parse ``"table sales.orders"``, or the list form ``'table ["a.b", "orders"]'`` that names
        levels containing '.' (what ``str()`` gives for them: the two forms never collide)."""
        kind, _, name = text.strip().partition(" ")
        kind, name = kind.lower(), name.strip()
        if kind not in SECURABLE_KINDS:
            raise BadRequest(
                f"Unknown securable {text!r}: expected 'catalog', 'namespace NS', 'table NS.T', 'view NS.V' "
                "or 'location s3://bucket/prefix/'"
            )
        if kind == "location":
            if not name.startswith(LOCATION_SCHEMES) or len(name.split("://", 1)[1].strip("/").split("/")) < 2:
                raise BadRequest(
                    f"Securable {text!r} needs an s3 prefix below a bucket, e.g. 'location s3://raw-bucket/landing/'"
                )
            return cls.location(name)
        if kind == "catalog":
            if name:
                raise BadRequest(f"Securable 'catalog' takes no name, got {text!r}")
            return cls.catalog()
        parts = parse_path_text(name)
        if not parts or any(not p for p in parts):
            raise BadRequest(
                f"Securable {text!r} needs a dotted name, e.g. '{kind} sales{'' if kind == 'namespace' else '.orders'}'"
                f" (or a JSON list when a level contains '.', e.g. '{kind} [\"a.b\", \"orders\"]')"
            )
        if kind in ("table", "view") and len(parts) < 2:
            raise BadRequest(f"Securable {text!r} needs a namespace and a name, e.g. '{kind} sales.orders'")
        return cls(kind, parts)

    def __str__(self) -> str:
        if self.kind == "location":
            return f"location {self.path[0]}"
        return self.kind if self.kind == "catalog" else f"{self.kind} {path_text(self.path)}"

    def ancestors(self) -> list[Securable]:
        """The catalog, every enclosing namespace, then this securable itself (a location: the catalog, itself)."""
        if self.kind == "location":
            return [Securable.catalog(), self]
        ns_len = len(self.path) - (1 if self.kind in ("table", "view") else 0)
        out = [Securable.catalog()]
        out += [Securable.namespace(self.path[:i]) for i in range(1, ns_len + 1)]
        if self.kind in ("table", "view"):
            out.append(self)
        return out if self.kind != "catalog" else [self]

    def covers(self, other: Securable) -> bool:
        """True if a grant on ``self`` applies to ``other`` (inheritance downward)."""
        return self in other.ancestors()


@dataclass(frozen=True)
class Grant:
    role: str
    privilege: Privilege
    on: Securable

    def as_dict(self) -> dict[str, str]:
        return {"role": self.role, "privilege": self.privilege.value, "on": str(self.on)}


def check_grant_shape(privilege: Privilege, on: Securable) -> None:
    """``BadRequest`` for a privilege the securable cannot take (checked without any state, so the bootstrap
    file is refused before a start creates anything, with the words the management API uses)."""
    if privilege is P.TOKEN_EXCHANGE and on.kind != "catalog":
        raise BadRequest("TOKEN_EXCHANGE is granted on 'catalog' only (it lets a principal act for any other)")
    if on.kind == "location" and privilege not in LOCATION_PRIVILEGES:
        raise BadRequest(f"A storage location takes LOCATION_READ or LOCATION_WRITE only, not {privilege.value}")
    if privilege in LOCATION_PRIVILEGES and on.kind not in ("location", "catalog"):
        raise BadRequest(f"{privilege.value} is granted on 'location s3://bucket/prefix/' or 'catalog' only")


def allowed(grants: Iterable[Grant], privilege: Privilege, target: Securable) -> bool:
    """Whether any grant covers ``target`` with a privilege implying ``privilege``."""
    chain = set(target.ancestors())
    return any(g.on in chain and privilege in IMPLIES[g.privilege] for g in grants)
