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
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .._wire.enginerules import SIGNATURE, chain_prefix, signature_trailer
from ._sandbox import DYNAMIC_SQL, Refused

__all__ = ["SIGNATURE", "Rewriter", "sign", "signature_ok"]


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


class Rewriter:
    """Expands the views of one user's SQL texts (``expand``), as that user, through their gateway."""

    def __init__(self, user: Any, key: bytes, chain_conf: Callable[[str, str], None]) -> None:
        self.user = user
        self.key = key
        self._chain_conf = chain_conf  # (catalog name, route uri) -> make it exist in the Connect session

    @property
    def prefix(self) -> str:
        return chain_prefix(self.user.catalog_name)

    def expand(self, query: str) -> Expanded:
        """``query`` with its views expanded and signed, or unchanged when it reads no view of the catalog."""
        from ..catalog._chains import _Client, encode_referenced_by
        from ..catalog._expand import expand
        from ..errors import ViewChainError

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
            )
        except ViewChainError as exc:
            raise Refused("view-chain", "this query", str(exc)) from None
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
