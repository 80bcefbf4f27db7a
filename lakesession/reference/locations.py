"""Exclusive storage ownership: an index of the prefixes every table, view and namespace owns.

Why: vended credentials and signatures cover a table's whole prefix. If one object's prefix
could contain, equal or lie inside another's, access to one would be access to the other (a
table created "at" another table's location gets read-write credentials over its data). So
every prefix is owned by exactly one object, and a new or moved one is checked against the
index (``ls_locations``) with two indexed queries:

* ancestors: the candidate's own ancestor prefixes (``s3://b/``, ``s3://b/wh/``, …, itself),
  an equality lookup;
* descendants: ``cand <= prefix < cand[:-1] + '0'`` — prefixes are normalised to end with
  ``/`` (0x2F), and ``0`` (0x30) is the next byte, so the range is exactly "starts with cand"
  in byte order (SQLite's BINARY collation; PostgreSQL gets ``COLLATE "C"``).

Path-boundary safe by construction: ``…/orders/`` never contains ``…/orders_archive/``.

Rules (``_allowed``): nothing shares or nests with another table's or view's prefix; a
namespace's home (its ``location`` property, else ``{warehouse}/{nskeys.path_segment(ns)}``) is never anyone
else's exact prefix; a table or view may lie inside the home of its own namespace or an
ancestor's only; a namespace home may contain only its own descendants' objects. A registered
storage location (``storage_locations``) shares, nests with and contains nothing at all: a grant on
it must never reach a table's data, nor a table's grant a location's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, and_, delete, func, insert, select, union_all, update
from sqlalchemy.exc import IntegrityError

from . import nskeys, store
from .errors import BadRequest

logger = logging.getLogger(__name__)

Namespace = tuple[str, ...]
TABLE, VIEW, NAMESPACE, LOCATION = "table", "view", "namespace", "location"
PATH_PROPERTIES = ("write.data.path", "write.metadata.path", "write.object-storage.path", "write.folder-storage.path")


@dataclass(frozen=True)
class Owner:
    """Who owns a prefix; ``name`` is empty for a namespace."""

    kind: str
    namespace: Namespace
    name: str = ""

    @classmethod
    def table(cls, ns: Namespace, name: str) -> Owner:
        return cls(TABLE, tuple(ns), name)

    @classmethod
    def view(cls, ns: Namespace, name: str) -> Owner:
        return cls(VIEW, tuple(ns), name)

    @classmethod
    def namespace_(cls, ns: Namespace) -> Owner:
        return cls(NAMESPACE, tuple(ns), "")

    @property
    def ns_key(self) -> str:
        return nskeys.key(self.namespace)  # as in pyiceberg's tables here


def normalize(location: str) -> str:
    """``s3://b/wh/t`` and ``s3://b/wh/t/`` -> ``s3://b/wh/t/``."""
    return location.rstrip("/") + "/"


def ancestors(prefix: str) -> list[str]:
    """Every prefix of a normalised ``prefix`` ending in ``/`` after the scheme, itself included."""
    scheme, sep, _ = prefix.partition("://")
    start = len(scheme) + 3 if sep else 0
    out: list[str] = []
    i = prefix.find("/", start)
    while i != -1:
        out.append(prefix[: i + 1])
        i = prefix.find("/", i + 1)
    return out


def path_locations(properties: dict[str, str] | None) -> list[str]:
    """Values of the properties that redirect where a table writes files."""
    return [str(v) for k, v in (properties or {}).items() if k.lower() in PATH_PROPERTIES and v]


def _is_within(inner: Namespace, outer: Namespace) -> bool:
    """``inner`` is ``outer`` or one of its descendants."""
    return inner[: len(outer)] == outer


def _allowed(owner: Owner | None, relation: str, other: Owner) -> bool:
    """May ``owner``'s candidate prefix stand in ``relation`` ("equal", "inside", "contains") to ``other``'s?

    ``owner=None`` is an unidentified object (a view location checked without an owner): it may
    only lie inside namespace homes."""
    if owner == other:
        return True
    if other.kind == LOCATION or (owner is not None and owner.kind == LOCATION):
        return False  # raw locations are islands: nothing inside, around or equal to them
    if other.kind in (TABLE, VIEW):
        # only a namespace home may contain objects, and only those of its own subtree
        return (
            owner is not None
            and owner.kind == NAMESPACE
            and relation == "contains"
            and _is_within(other.namespace, owner.namespace)
        )
    if relation == "equal":
        return False
    if relation == "inside":
        if owner is None:
            return True
        if owner.kind == NAMESPACE:
            return owner.namespace != other.namespace and _is_within(owner.namespace, other.namespace)
        return _is_within(owner.namespace, other.namespace)
    return owner is not None and owner.kind == NAMESPACE and _is_within(other.namespace, owner.namespace)


class LocationIndex:
    """The ``ls_locations`` table of one catalog: check, claim, release and move ownership."""

    def __init__(self, engine: Engine, catalog_name: str, warehouse: str):
        self.engine = engine
        self.catalog_name = catalog_name
        self.root = normalize(warehouse)
        # check-then-insert is one critical section in this process; the primary key on
        # (catalog_name, prefix) catches an exact duplicate from another process
        self._lock = threading.Lock()

    # ------------------------------------------------------------ queries
    def _where_owner(self, owner: Owner) -> Any:
        c = store.locations.c
        return and_(
            c.catalog_name == self.catalog_name,
            c.owner_kind == owner.kind,
            c.owner_namespace == owner.ns_key,
            c.owner_name == owner.name,
        )

    def owner_of(self, path: str) -> tuple[str, Owner] | None:
        """The deepest table, view or registered location prefix containing ``path`` (a file or a prefix)."""
        cand = normalize(path)
        with self.engine.connect() as conn:
            c = store.locations.c
            rows = conn.execute(
                select(c.prefix, c.owner_kind, c.owner_namespace, c.owner_name).where(
                    c.catalog_name == self.catalog_name, c.prefix.in_(ancestors(cand)), c.owner_kind != NAMESPACE
                )
            ).all()
        if not rows:
            return None
        r = max(rows, key=lambda row: len(row[0]))
        return r[0], Owner(r[1], nskeys.from_key(r[2]), r[3])

    def prefixes_of_kind(self, kind: str) -> list[str]:
        with self.engine.connect() as conn:
            c = store.locations.c
            q = select(c.prefix).where(c.catalog_name == self.catalog_name, c.owner_kind == kind).order_by(c.prefix)
            return list(conn.execute(q).scalars())

    def owned(self, owner: Owner) -> set[str]:
        with self.engine.connect() as conn:
            return set(conn.execute(select(store.locations.c.prefix).where(self._where_owner(owner))).scalars())

    def _overlapping(self, conn: Any, cand: str) -> list[tuple[str, Owner]]:
        c = store.locations.c
        cols = (c.prefix, c.owner_kind, c.owner_namespace, c.owner_name)
        up = select(*cols).where(c.catalog_name == self.catalog_name, c.prefix.in_(ancestors(cand)))
        down = select(*cols).where(c.catalog_name == self.catalog_name, c.prefix > cand, c.prefix < cand[:-1] + "0")
        rows = conn.execute(union_all(up, down)).all()
        return [(r[0], Owner(r[1], nskeys.from_key(r[2]), r[3])) for r in rows]

    def _conflict(self, conn: Any, owner: Owner | None, cand: str) -> tuple[str | None, bool]:
        """(why ``cand`` may not be ``owner``'s or None, whether ``owner`` already owns exactly it)."""
        if cand == self.root:
            return "it is the warehouse root", False
        rows = self._overlapping(conn, cand)
        # a table or view in the way is the more useful thing to report than a namespace
        for prefix, other in sorted(rows, key=lambda row: row[1].kind == NAMESPACE):
            relation = "equal" if prefix == cand else "inside" if cand.startswith(prefix) else "contains"
            if not _allowed(owner, relation, other):
                what = {"equal": "is", "inside": "lies inside", "contains": "contains"}[relation]
                # the other object is not named: the caller may not be allowed to know it exists
                return f"it {what} storage owned by another {other.kind}", False
        return None, any(prefix == cand and other == owner for prefix, other in rows)

    def _checked(self, conn: Any, owner: Owner | None, items: Iterable[tuple[str, str]]) -> tuple[list[str], set[str]]:
        """(normalised prefixes, those ``owner`` already owns), or ``BadRequest`` on a conflict."""
        out: list[str] = []
        have: set[str] = set()
        for location, what in items:
            cand = normalize(location)
            reason, owned = self._conflict(conn, owner, cand)
            if reason:
                raise BadRequest(
                    f"Invalid {what} {location!r}: {reason}; every table, view and namespace owns its storage "
                    "exclusively — choose a location of its own (or leave it out for the default)"
                )
            if owned:
                have.add(cand)
            if cand not in out:
                out.append(cand)
        return out, have

    # ------------------------------------------------------------ commands
    def check(self, owner: Owner | None, items: Iterable[tuple[str, str]]) -> list[str]:
        """Normalised prefixes of ``(location, what)`` items, or ``BadRequest`` naming ``what`` if any
        overlaps what another object owns."""
        with self.engine.connect() as conn:
            return self._checked(conn, owner, items)[0]

    def check_file(self, owner: Owner, path: str, what: str) -> None:
        """A single file (a metadata file to adopt) must not lie inside another table's or view's prefix."""
        with self.engine.connect() as conn:
            for prefix, other in self._overlapping(conn, normalize(path.rsplit("/", 1)[0])):
                if other != owner and other.kind in (TABLE, VIEW) and path.startswith(prefix):
                    raise BadRequest(f"Invalid {what} {path!r}: it lies inside storage owned by another {other.kind}")

    @contextmanager
    def claiming(self, owner: Owner, items: Iterable[tuple[str, str]]) -> Iterator[list[str]]:
        """``claim`` for the duration of an operation that makes the object: released again if it fails."""
        added = self.claim(owner, items)
        try:
            yield added
        except BaseException:
            self.release(owner, added)
            raise

    def claim(self, owner: Owner, items: Iterable[tuple[str, str]]) -> list[str]:
        """Check and record ``owner``'s prefixes; returns those newly added (to ``release`` on failure)."""
        items = list(items)
        with self._lock:
            try:
                with self.engine.begin() as conn:
                    prefixes, have = self._checked(conn, owner, items)
                    new = [p for p in prefixes if p not in have]
                    if new:
                        conn.execute(insert(store.locations), [self._row(owner, p) for p in new])
            except IntegrityError:
                what = items[0][1] if items else "location"
                raise BadRequest(
                    f"Invalid {what}: its storage was claimed by another object at the same moment; retry"
                ) from None
        return new

    def release(self, owner: Owner, prefixes: Iterable[str] | None = None) -> None:
        """Forget ``owner``'s prefixes (all of them by default)."""
        where = self._where_owner(owner)
        if prefixes is not None:
            only = [normalize(p) for p in prefixes]
            if not only:
                return
            where = and_(where, store.locations.c.prefix.in_(only))
        with self._lock, self.engine.begin() as conn:
            conn.execute(delete(store.locations).where(where))

    def sync(self, owner: Owner, locations: Iterable[str]) -> None:
        """Make ``owner``'s prefixes exactly ``locations`` (already checked, e.g. claimed before a commit)."""
        want = {normalize(x) for x in locations}
        with self._lock:
            have = self.owned(owner)
            if have - want:
                with self.engine.begin() as conn:
                    conn.execute(
                        delete(store.locations).where(
                            and_(self._where_owner(owner), store.locations.c.prefix.in_(sorted(have - want)))
                        )
                    )
            for p in sorted(want - have):
                try:
                    with self.engine.begin() as conn:
                        conn.execute(insert(store.locations).values(**self._row(owner, p)))
                except IntegrityError:
                    logger.warning("storage prefix %s of %s %s is owned by another object", p, owner.kind, owner.name)

    def move(self, old: Owner, new: Owner) -> None:
        """A rename: the same prefixes, a new owner."""
        with self._lock, self.engine.begin() as conn:
            conn.execute(
                update(store.locations)
                .where(self._where_owner(old))
                .values(owner_kind=new.kind, owner_namespace=new.ns_key, owner_name=new.name)
            )

    def _row(self, owner: Owner, prefix: str) -> dict[str, str]:
        return {
            "catalog_name": self.catalog_name,
            "prefix": prefix,
            "owner_kind": owner.kind,
            "owner_namespace": owner.ns_key,
            "owner_name": owner.name,
        }

    def is_empty(self) -> bool:
        with self.engine.connect() as conn:
            n = conn.execute(
                select(func.count())
                .select_from(store.locations)
                .where(store.locations.c.catalog_name == self.catalog_name)
            ).scalar_one()
        return n == 0

    def backfill(self, owned: Iterable[tuple[Owner, list[str]]]) -> int:
        """Index objects created before the index existed (first prefix wins on a clash)."""
        added = 0
        for owner, locations in owned:
            for p in dict.fromkeys(normalize(x) for x in locations if x):
                try:
                    with self.engine.begin() as conn:
                        conn.execute(insert(store.locations).values(**self._row(owner, p)))
                    added += 1
                except IntegrityError:
                    logger.warning("backfill: %s is already owned; %s %s not indexed there", p, owner.kind, owner.name)
        return added
