"""Which SparkSession a ``Session`` gets: one identity per Spark catalog.

Spark caches catalog plugins by name in each SparkSession's ``CatalogManager``; ``spark.conf.set``
does not rebind a catalog already loaded. Re-pointing a shared SparkSession's ``lake`` catalog at
a second user's gateway therefore does nothing, and that user reads as the first. So:

* the first Session of a process with no Spark running creates it (jars, master, static conf);
* every later Session (another identity, or the same one again) gets its own ``newSession()`` of
  the running SparkContext: a fresh ``CatalogManager`` whose catalog is bound to *its* gateway
  (loaded at once, while that session is active: Spark reads a catalog's settings from the active
  session's conf when it first loads it);
  Other SparkSessions — the one user code already holds, another Session's — are never
  re-pointed: their catalogs and their ``spark.sql.defaultCatalog`` stay as they were;
* with Spark Connect the second binding of a server gets a new server-side session (``create()``);
* closing a Session stops its gateway, so its SparkSession's catalog fails fast from then on
  (connection refused) and can never act for anyone else; the SparkContext lakesession started
  stops with the last Session using it.
"""

from __future__ import annotations

import json
import logging
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)


class SparkRegistry:
    """The process-wide Spark state lakesession keeps, in one place and weakly keyed by Session.

    A Session collected without ``close()`` simply drops out (an ``id()`` could be reused by another
    object after collection, a weak reference cannot). One instance per process, ``REGISTRY``.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holders: weakref.WeakSet[Any] = weakref.WeakSet()  # Sessions on the running local SparkContext
        self.created: Any = None  # the SparkSession lakesession created (its SparkContext is lakesession's to stop)
        self.remote_bound: dict[str, weakref.WeakSet[Any]] = {}  # Spark Connect URL -> Sessions bound to it

    def release(self, holder: object) -> None:
        """``holder`` no longer uses Spark; stop the SparkContext lakesession started if nobody else does."""
        with self.lock:
            for bound in self.remote_bound.values():
                bound.discard(holder)
            if holder not in self.holders:
                return
            self.holders.discard(holder)
            if not self.holders and self.created is not None:
                created, self.created = self.created, None
                created.stop()


REGISTRY = SparkRegistry()


def bind(
    holder: object,
    catalog_name: str,
    catalog_conf: Callable[[], Mapping[str, str]],
    *,
    jars: Any,
    spark_conf: Mapping[str, str],
    master: str | None,
    remote: str | None,
    comet: bool = False,
    warmups: frozenset[str] = frozenset(("classcache", "catalog")),
    warehouse: str | None = None,
    clouds: frozenset[str] | None = None,
    raw_paths: Callable[[], bool] | None = None,
) -> SparkSession:
    """A SparkSession of its own for ``holder`` whose ``catalog_name`` catalog is ``catalog_conf()``.

    ``catalog_conf`` is called once Spark is up (the JVM starts first; the gateway it names may still
    be starting meanwhile), and registered as runtime SQL conf of that session alone. ``warmups``:
    which of ``classcache`` and ``catalog`` a JVM launched here uses (``_spark._plan.WARMUPS``). ``warehouse``
    (with ``spark_conf``) tells which cloud bundles a JVM launched here needs, besides ``clouds`` asked for
    (``versions.clouds_for``). ``raw_paths`` tells (once the jars are resolved) whether the catalog offers
    credentials by path: then a JVM launched here gets S3A for raw ``s3a://`` paths (``_spark._rawpaths``)."""
    from pyspark import SparkContext

    from ._spark.session import base_conf, build_spark

    with REGISTRY.lock:
        if remote is not None:
            bound = REGISTRY.remote_bound.setdefault(remote, weakref.WeakSet())
            if bound:  # the process's Connect session already acts for another Session: a server-side one of its own
                spark = _connect_session(remote, catalog_name, catalog_conf(), spark_conf)
            else:
                spark, _ = build_spark({**base_conf(catalog_name, None), **_static(spark_conf)}, remote=remote)
                _register(spark, catalog_name, catalog_conf(), spark_conf)
            bound.add(holder)
            return spark
        if SparkContext._active_spark_context is not None:
            if comet:
                _check_running_comet(SparkContext._active_spark_context)
            _check_running_clouds(SparkContext._active_spark_context, warehouse, spark_conf, clouds)
            _check_running_sealed(SparkContext._active_spark_context)
            spark = _child(catalog_name, catalog_conf(), spark_conf)
        else:
            from ._spark.comet import one_class_path
            from ._spark.jars import resolve_jars
            from ._spark.versions import clouds_for

            clouds = clouds_for(warehouse, spark_conf, clouds)
            jar_set = resolve_jars(jars, clouds=clouds)
            spark, created = build_spark(
                one_class_path(
                    {
                        **base_conf(catalog_name, jar_set),
                        **_static(spark_conf),
                        **_comet_launch(comet, spark_conf, clouds, jar_set, raw_paths),
                    }
                ),
                master=master,
                classcache="classcache" in warmups,
                user_conf=spark_conf,
            )
            from pyspark import __version__

            preload = created and "catalog" in warmups
            if preload and first_query_loads_catalog(__version__):
                _warm_catalog_classes(spark, catalog_name, catalog_conf())
            _register(spark, catalog_name, catalog_conf(), spark_conf)
            if created:
                REGISTRY.created = spark
            if (
                preload
            ):  # Spark 3.5: beside the first query, which waits for it; Spark 4: before the first catalog query
                _preload(spark, catalog_name)
        REGISTRY.holders.add(holder)
        return spark


def first_query_loads_catalog(spark_version: str) -> bool:
    """Whether Spark ``spark_version``'s first query, even ``SELECT 1``, loads the default catalog.

    Spark 3.5's optimizer evaluates the current namespace for every query (``ReplaceCurrentLike``),
    which loads the current catalog (Iceberg: ``GET /v1/config``); Spark 4 does so only when a query
    asks for it (``current_database()``).
    """
    return int(spark_version.split(".")[0]) < 4


def catalog_can_wait(remote: str | None) -> bool:
    """Whether ``bind`` launches a local JVM, so that an embedded catalog's start may wait until it is up.

    Started together, each competes with the other for CPU whenever the cores are few (the JVM's launch
    is the start's critical path); begun as the JVM comes up (``catalog_conf`` is called then), the catalog is ready by the time Spark 3.5's preload asks for it (its first query
    loads the default catalog: ``first_query_loads_catalog``; ``_warm_catalog_classes`` spends the
    wait loading Iceberg's classes). Otherwise the catalog is on the way to the first query at once:
    a running SparkContext (``_child`` loads the new session's catalog at once), or a Connect channel
    (which launches no JVM here to compete with).
    """
    if remote is not None:
        return False
    from pyspark import SparkContext

    return SparkContext._active_spark_context is None


def _preload(spark: SparkSession, catalog_name: str) -> None:
    """Load the default catalog now, on a JVM thread of its own, where the first query would load it anyway.

    Spark 3.5's first query (``first_query_loads_catalog``) stops in its optimizer until Iceberg's catalog
    has initialized (class loading, ``GET /v1/config``); begun here, that overlaps the query's parsing
    and analysis instead (``CatalogManager.catalog`` is synchronized: the query then takes the loaded
    plugin). Spark 4's first query needs no catalog, but its first *catalog* query would spend ~1 s
    (cold JVM: Iceberg's REST client, HTTP and JSON classes) initializing one: begun here, that happens
    while the user's notebook is still on its first cells (``benchmarks/session_start.py``, first
    catalog query). The session is made active on that thread first: Spark reads a catalog's settings
    from the active session's conf. A failure is the first query's to report: it loads the catalog again.
    """
    jvm: Any = spark._jvm
    jsession = spark._jsparkSession

    def load() -> None:
        try:
            jvm.org.apache.spark.sql.SparkSession.setActiveSession(jsession)
            jsession.sessionState().catalogManager().catalog(catalog_name)
        except Exception as exc:  # the JVM's message may quote a URL or a conf; the type is enough here
            logger.debug(
                "preloading catalog %s failed (%s); the first query loads it", catalog_name, type(exc).__name__
            )
        try:
            warm_table_classes(jvm)
        except Exception as exc:  # only a head start for the first table the user touches
            logger.debug("warming Iceberg's table metadata classes failed (%s)", type(exc).__name__)

    threading.Thread(target=load, name="lakesession-catalog-preload", daemon=True).start()


# a table's metadata as a catalog sends it (no snapshot): what every load or create of a table parses
_METADATA = json.dumps(
    {
        "format-version": 2,
        "table-uuid": "00000000-0000-4000-8000-000000000000",
        "location": "s3://lakesession-warm-up/t",
        "last-sequence-number": 0,
        "last-updated-ms": 0,
        "last-column-id": 2,
        "current-schema-id": 0,
        "schemas": [
            {
                "type": "struct",
                "schema-id": 0,
                "fields": [
                    {"id": 1, "name": "id", "required": False, "type": "long"},
                    {"id": 2, "name": "name", "required": False, "type": "string"},
                ],
            }
        ],
        "default-spec-id": 0,
        "partition-specs": [
            {"spec-id": 0, "fields": [{"name": "id", "transform": "identity", "source-id": 1, "field-id": 1000}]}
        ],
        "last-partition-id": 1000,
        "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}],
        "properties": {},
        "current-snapshot-id": -1,
        "refs": {},
        "snapshots": [],
        "statistics": [],
        "snapshot-log": [],
        "metadata-log": [],
    }
)


def warm_table_classes(jvm: Any) -> str:
    """Parse (and write back) a table's metadata in the JVM: no catalog call, no I/O, just the classes.

    The first table a cold JVM loads or creates spends ~0.25 s (more on a busy machine) in Iceberg's
    metadata parser (schemas, partition specs, sort orders, Jackson) before the second costs ~10 ms;
    ``_preload`` spends it in the background instead. Returns the parsed location (the tests' check that
    this Iceberg still parses it)."""
    metadata = jvm.org.apache.iceberg.TableMetadataParser.fromJson(_METADATA)
    jvm.org.apache.iceberg.TableMetadataParser.toJson(metadata)
    return str(metadata.location())


def _warm_catalog_classes(spark: SparkSession, catalog_name: str, catalog_conf: Mapping[str, str]) -> None:
    """Initialize a throwaway copy of the catalog on a JVM thread while the session's state is built.

    A cold JVM spends ~1 s loading Iceberg's REST client, TLS and JSON classes the first time a REST
    catalog initializes; Spark 3.5's first query waits for that (``first_query_loads_catalog``). Here it
    overlaps the ~0.5 s in which the main thread builds the session's state (which ``_preload`` needs
    first), on another core if one is free; the session's own catalog then loads warm. The copy is closed at once.
    """
    jvm: Any = spark._jvm
    prefix = f"spark.sql.catalog.{catalog_name}."
    props = jvm.java.util.HashMap()
    for key, value in catalog_conf.items():
        if key.startswith(prefix):
            props.put(key[len(prefix) :], value)
    hadoop_conf = spark._jsc.hadoopConfiguration()

    def warm() -> None:
        try:
            jvm.org.apache.iceberg.CatalogUtil.buildIcebergCatalog(catalog_name, props, hadoop_conf).close()
        except Exception as exc:  # only a head start: the session's catalog reports its own failures
            logger.debug("warming catalog %s failed (%s)", catalog_name, type(exc).__name__)

    threading.Thread(target=warm, name="lakesession-catalog-warm", daemon=True).start()


def _comet_launch(
    comet: bool,
    spark_conf: Mapping[str, str],
    clouds: frozenset[str] = frozenset(),
    jar_set: Any = None,
    raw_paths: Callable[[], bool] | None = None,
) -> dict[str, str]:
    """Comet's jars and settings for a JVM launched here (``comet=True``), or just lakesession's provider
    and the raw-path jars when the user's own ``spark_conf`` already loads Comet, or when the catalog offers
    credentials by path (``raw_paths``; ``_spark._rawpaths``)."""
    from ._spark import comet as _comet

    if not comet and not _comet.names_comet(spark_conf):
        from ._spark import _rawpaths

        return _rawpaths.launch_conf(jar_set, spark_conf, clouds, raw_paths)
    from ._spark.jars import detect_spark

    info = detect_spark()
    jars = _comet.resolve(info.minor, info.scala, info.version, comet=comet, clouds=clouds)
    return _comet.launch_conf(jars, spark_conf)


def _check_running_comet(sc: Any) -> None:
    """``comet=True`` on a running SparkContext: its JVM must already have loaded Comet (a plugin is static)."""
    from ._spark.comet import PLUGIN
    from .errors import ConfigError

    if PLUGIN not in (sc.getConf().get("spark.plugins") or ""):
        raise ConfigError(
            "comet=True, but Spark is already running without Comet (spark.plugins is static): close the "
            "Session that started Spark (or stop the SparkContext), then start again with comet=True"
        )


def _check_running_clouds(
    sc: Any, warehouse: str | None, spark_conf: Mapping[str, str], clouds: frozenset[str] | None
) -> None:
    """A running JVM lacking a cloud bundle this session needs: say so now, not as a NoClassDefFoundError later."""
    from ._spark.versions import CLOUD_BUNDLES, clouds_for

    conf = sc.getConf()
    loaded = f"{conf.get('spark.jars') or ''},{conf.get('spark.driver.extraClassPath') or ''}"
    missing = [
        CLOUD_BUNDLES[c][0]
        for c in sorted(clouds_for(warehouse, spark_conf, clouds))
        if CLOUD_BUNDLES[c][0] not in loaded
    ]
    if missing:
        logger.warning(
            "Spark is already running without %s: this session's %s tables will fail to load. Fix: close the "
            "Session that started Spark (or stop the SparkContext), then start the first one with clouds=[...]",
            ", ".join(missing),
            "/".join(m.split("-")[1] for m in missing),
        )


def _check_running_sealed(sc: Any) -> None:
    """A SparkContext lakesession did not start, without ``spark.authenticate``: say what it exposes, once."""
    global _warned_unsealed
    if _warned_unsealed or REGISTRY.created is not None:
        return
    if (sc.getConf().get("spark.authenticate") or "false").lower() != "true":
        _warned_unsealed = True
        logger.warning(
            "lakesession: the running Spark was started without spark.authenticate: its BlockManager hands this "
            "session's vended storage keys (in Iceberg's broadcasts) to anyone who connects. Fix: stop it and let "
            "lakesession.spark() start Spark (sealed), or start it with spark.authenticate=true"
        )


_warned_unsealed = False


def comet_conf(
    comet: bool, catalog_name: str, gateway: Any, spark_conf: Mapping[str, str], *, storage_credentials: bool = True
) -> dict[str, str]:
    """The runtime conf wiring lakesession's credential providers (Comet's, S3A's) to this session's gateway, or nothing.

    ``storage_credentials=False`` (``access="remote-signing"``: the session holds no storage credential at all) wires
    no S3A provider for raw paths, even in a JVM another session gave S3A."""
    from ._spark import comet as _comet

    if not comet and not _comet.names_comet(spark_conf):
        if not storage_credentials:
            return {}
        from ._spark import _rawpaths

        return _rawpaths.runtime_conf(catalog_name, gateway, spark_conf)
    conf = _comet.session_conf(catalog_name, gateway.uri, gateway.secret, spark_conf)
    return conf | _comet.store_conf(gateway.uri, gateway.secret, spark_conf)


def _static(spark_conf: Mapping[str, str]) -> dict[str, str]:
    """The launch conf: the user's settings but their catalog keys, which follow the catalog at runtime."""
    return {k: v for k, v in spark_conf.items() if not k.startswith("spark.sql.catalog.")}


def _register(
    spark: SparkSession, catalog_name: str, catalog_conf: Mapping[str, str], spark_conf: Mapping[str, str]
) -> None:
    """The catalog as runtime SQL conf (catalogs load lazily, at first use), then the user's catalog keys."""
    for key, value in {**catalog_conf, **{k: v for k, v in spark_conf.items() if k not in _static(spark_conf)}}.items():
        spark.conf.set(key, value)


def activate(spark: SparkSession) -> None:
    """Make ``spark`` the JVM's active session on this thread (classic Spark; Connect has no JVM here).

    Spark resolves the current catalog through the thread's *active* session's conf (``SQLConf.get``), and
    pyspark leaves whichever session last ran ``createDataFrame`` active for good: another Session's catalog
    API calls (``spark.catalog.currentCatalog()``) would then load that session's catalog, perhaps through a
    gateway already closed. pyspark's own ``createDataFrame`` does the same before its work."""
    jsession = getattr(spark, "_jsparkSession", None)
    jvm = getattr(spark, "_jvm", None)
    if jsession is not None and jvm is not None:
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(jsession)


def release(holder: object) -> None:
    """``holder`` no longer uses Spark (``REGISTRY.release``)."""
    REGISTRY.release(holder)


def _apply(
    spark: SparkSession, catalog_name: str, catalog_conf: Mapping[str, str], spark_conf: Mapping[str, str]
) -> None:
    """Bind ``catalog_name`` on ``spark`` alone (runtime SQL conf) and make it that session's default."""
    prefix = f"spark.sql.catalog.{catalog_name}"
    for key, value in {**catalog_conf, "spark.sql.defaultCatalog": catalog_name}.items():
        spark.conf.set(key, value)
    for key, value in spark_conf.items():  # static keys are fixed by the running context
        if key.startswith("spark.sql.catalog.") or spark.conf.isModifiable(key):
            spark.conf.set(key, value)
    # the SparkContext's conf may carry another Session's catalog of the same name: drop what we did not set
    inherited = [k for k, _ in spark.sparkContext.getConf().getAll() if k.startswith(prefix + ".")]
    for key in inherited:
        if key not in catalog_conf and key not in spark_conf:
            spark.conf.unset(key)


def _child(catalog_name: str, catalog_conf: Mapping[str, str], spark_conf: Mapping[str, str]) -> SparkSession:
    from pyspark.sql import SparkSession

    from ._spark.errors import install_error_conversion

    base = SparkSession._instantiatedSession
    if base is None or base._sc._jsc is None:
        base = SparkSession.builder.getOrCreate()  # no options: nothing of the running session changes
    spark = base.newSession()
    _apply(spark, catalog_name, catalog_conf, spark_conf)
    install_error_conversion()
    # Spark loads a catalog plugin with the conf of the thread's *active* session (SQLConf.get), which is
    # not this one: a first touch outside spark.sql (spark.catalog.currentCatalog(), …) would bind the
    # catalog to the default session's settings. Load it now, inside spark.sql, where this session is active.
    spark.sql("SHOW CURRENT NAMESPACE").collect()
    return spark


def _connect_session(
    remote: str, catalog_name: str, catalog_conf: Mapping[str, str], spark_conf: Mapping[str, str]
) -> SparkSession:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(remote).create()
    for key, value in {**catalog_conf, "spark.sql.defaultCatalog": catalog_name}.items():
        spark.conf.set(key, value)
    for key, value in spark_conf.items():
        if key.startswith("spark.sql.catalog."):
            spark.conf.set(key, value)
    return spark
