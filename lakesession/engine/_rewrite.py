"""View expansion on the engine: a user's query over DEFINER views, made runnable as that user.

Iceberg's Spark runtime does not send ``referenced-by`` yet, so the engine does what
``Session.sql`` does in a notebook (``lakesession.catalog._expand``): each view the query reads
becomes its SQL, and each table below a view is read through a chain-scoped catalog
(``<catalog>__chain_<id>``) of the user's gateway, whose loads carry the chain. On the engine the
chain is honoured (the engine is a trusted engine), so those catalogs can read what the view's
owner may read: they must only ever be reached through the view's own SQL. Three locks keep
them there:

* a user may never name them (``_sandbox``: any request mentioning the prefix is refused);
* every expanded text is **signed** (HMAC-SHA-256 with a key only the engine and its JVM hold,
  ``SIGNATURE`` appended as a comment): the JVM's parser refuses SQL that names an internal
  catalog unless its signature verifies — so a view body, a CTAS or a MERGE the JVM resolves by
  itself cannot reach them, and a signed text cannot be edited (its WHERE dropped);
* the expansion is checked: the final SQL may name internal catalogs exactly as often as the
  expansion pinned tables to them (a view body written to name one is refused).

A statement is expanded once (``ExpansionCache``): ``spark.sql()`` sends its text, ``collect()`` sends it
again, an analysis (schema, explain) a third time. The cache changes no authorization: every table below a
view is still loaded through its chain route, where the catalog checks the whole chain (the user's VIEW_READ
included) on each load; what it keeps is the view's SQL, for at most ``ttl`` seconds.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .._wire.enginerules import SIGNATURE, chain_prefix, signature_trailer
from ._sandbox import DYNAMIC_SQL, Refused

__all__ = ["SIGNATURE", "CatalogRefusal", "ExpansionCache", "Rewriter", "sign", "signature_ok"]


def sign(text: str, key: bytes) -> str:
    """``text`` with its signature appended (what the JVM's parser verifies)."""
    mac = hmac.new(key, text.encode(), hashlib.sha256).hexdigest()
    return f"{text}{signature_trailer(mac)}"


def signature_ok(signed: str, key: bytes) -> bool:
    """Whether ``signed`` ends with a valid signature of the text before it (the JVM's check, in Python)."""
    m = SIGNATURE.search(signed)
    if m is None:
        return False
    mac = hmac.new(key, signed[: m.start()].encode(), hashlib.sha256).hexdigest()
    return hmac.compare_digest(mac, m.group(1))


@dataclass
class Expanded:
    """One rewritten text: what the user sent, what runs, and the chain catalogs it needs."""

    original: str
    sql: str
    catalogs: dict[str, str] = field(default_factory=dict)  # chain catalog name -> gateway route uri


class CatalogRefusal(Refused):
    """The catalog's own refusal, met while expanding (a name refused as a view and as a table): the front door
    answers it as the catalog's 403 (the client's ``CatalogAccessError``), not as a rule of the engine."""

    def __init__(self, message: str) -> None:
        super().__init__("catalog", message)

    def __str__(self) -> str:
        return self.what


@dataclass
class _Entry:
    expanded: Expanded
    gateway: Any  # the user's gateway that registered its chain routes (a new gateway has none of them)
    where: tuple[str, tuple[str, ...]] | None  # the current catalog/namespace it was resolved in, if it needed one
    expires: float


class ExpansionCache:
    """Expansions by (Connect session, statement text): at most ``size``, each for at most ``ttl`` seconds."""

    def __init__(self, size: int = 1024, ttl: float = 30.0) -> None:
        self.size, self.ttl = size, ttl
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, session_id: str, text: str, user: Any, where: Callable[[], Any] | None) -> Expanded | None:
        with self._lock:
            entry = self._entries.get((session_id, text))
        fresh = entry is not None and entry.expires > time.monotonic() and entry.gateway is user.gateway
        if entry is None or not fresh or (entry.where is not None and (where is None or where() != entry.where)):
            self.misses += 1
            return None
        self.hits += 1
        return entry.expanded

    def put(self, session_id: str, text: str, user: Any, expanded: Expanded, where: Any) -> None:
        entry = _Entry(expanded, user.gateway, where, time.monotonic() + self.ttl)
        with self._lock:
            self._entries[(session_id, text)] = entry
            self._entries.move_to_end((session_id, text))
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)


class Rewriter:
    """Expands the views of one user's SQL texts (``expand``), as that user, through their gateway."""

    def __init__(
        self,
        user: Any,
        key: bytes,
        chain_conf: Callable[[str, str], None],
        *,
        where: Callable[[], tuple[str, tuple[str, ...]]] | None = None,
        cache: ExpansionCache | None = None,
        session_id: str = "",
    ) -> None:
        self.user = user
        self.key = key
        self._chain_conf = chain_conf  # (catalog name, route uri) -> make it exist in the Connect session
        self._where = where  # () -> the session's current catalog and namespace (asked only when a name needs it)
        self._cache = cache
        self._session_id = session_id

    @property
    def prefix(self) -> str:
        return chain_prefix(self.user.catalog_name)

    def expand(self, query: str) -> Expanded:
        """``query`` with its views expanded and signed, or unchanged when it reads no view of the catalog."""
        cached = self._cache.get(self._session_id, query, self.user, self._where) if self._cache else None
        if cached is not None:
            for name, uri in cached.catalogs.items():
                self._chain_conf(name, uri)  # configured already in this session: a set lookup
            return cached
        used: list[tuple[str, tuple[str, ...]]] = []

        def where() -> tuple[str, tuple[str, ...]]:
            assert self._where is not None
            used.append(self._where())
            return used[-1]

        out = self._expand(query, where if self._where is not None else None)
        if self._cache is not None:
            self._cache.put(self._session_id, query, self.user, out, used[0] if used else None)
        return out

    def _expand(self, query: str, where: Callable[[], tuple[str, tuple[str, ...]]] | None) -> Expanded:
        from ..catalog._chains import _Client, encode_referenced_by
        from ..catalog._expand import expand
        from ..errors import CatalogAccessError, ViewChainError

        user = self.user
        props = getattr(user.catalog, "properties", {}) or {}
        separator = str(props.get("namespace-separator", "%1F"))
        client = _Client(user.catalog, user.catalog_uri, str(props.get("prefix", "")), separator)
        pinned: dict[str, str] = {}
        count = [0]

        def chain_catalog(chain: tuple[Any, ...], table: Any) -> str:
            route = user.gateway.chains.register(chain, encode_referenced_by(list(chain), separator), {table})
            name = f"{self.prefix}{route.id}"
            pinned[name] = f"{user.gateway.uri}/chain/{route.id}"
            count[0] += 1
            return name

        try:
            expansion = expand(
                query,
                client=client,
                catalog_name=user.catalog_name,
                current_namespace=None,
                chain_catalog=chain_catalog,
                where=where,
                refuse_unreadable=True,
            )
        except ViewChainError as exc:
            raise Refused("view-chain", "this query", str(exc)) from None
        except CatalogAccessError as exc:
            raise CatalogRefusal(str(exc)) from None
        if not pinned:
            return Expanded(query, query)
        sql = expansion.sql
        if DYNAMIC_SQL.search(sql):
            raise Refused("dynamic-sql", "a view whose SQL builds names at run time")
        named = len(re.findall(re.escape(self.prefix), sql, flags=re.IGNORECASE))
        if named != count[0]:
            raise Refused("internal-catalog", "a view whose SQL names the engine's view-chain catalogs")
        for name, uri in pinned.items():
            self._chain_conf(name, uri)
        return Expanded(query, sign(sql, self.key), pinned)
