"""``Session.sql``'s view expansion: each view read becomes its SQL, each table below it a chain-scoped catalog.

Apart from ``session.py`` so that what a Session is stays short (``lakesession.session`` imports this module
lazily; this one names ``Session`` in annotations only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._wire.enginerules import chain_prefix

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..session import Session


def catalog_prop(session: Session, key: str, default: str) -> str:
    """A property the catalog's ``/v1/config`` gave pyiceberg (prefix, namespace separator)."""
    return str((getattr(session.catalog, "properties", {}) or {}).get(key, default))


def expanded_sql(session: Session, spark: SparkSession, query: str) -> str:
    """``query`` with the views it reads expanded, their tables routed through chain-scoped catalogs."""
    from .. import _sparkbind
    from ..catalog._chains import _Client
    from ..catalog._expand import expand, unquoted

    client = _Client(
        session.catalog,
        session.uri,
        catalog_prop(session, "prefix", ""),
        catalog_prop(session, "namespace-separator", "%1F"),
    )
    current = None
    _sparkbind.activate(spark)  # the catalog API resolves through the thread's active session
    if spark.catalog.currentCatalog() == session.catalog_name:
        current = unquoted(spark.catalog.currentDatabase())  # `a.b` for a level containing '.'

    def chain_catalog(chain: tuple[Any, ...], table: Any) -> str:
        return _chain_catalog(session, chain, table)

    expansion = expand(
        query,
        client=client,
        catalog_name=session.catalog_name,
        current_namespace=current,
        chain_catalog=chain_catalog,
    )
    return str(expansion.sql)


def _chain_catalog(session: Session, chain: tuple[Any, ...], table: Any) -> str:
    """The Spark catalog serving ``table`` through view ``chain`` (registered on first use)."""
    from ..catalog._chains import encode_referenced_by
    from .session import catalog_conf

    gw = session.gateway
    route = gw.chains.register(
        chain, encode_referenced_by(list(chain), catalog_prop(session, "namespace-separator", "%1F")), {table}
    )
    name = f"{chain_prefix(session.catalog_name)}{route.id}"
    with session._lock:
        if name not in session._chain_catalogs:
            spark = session.spark()
            conf = catalog_conf(name, f"{gw.uri}/chain/{route.id}", gw.secret, session.warehouse, session.access)
            for key, value in conf.items():
                spark.conf.set(key, value)
            session._chain_catalogs.add(name)
    return name
