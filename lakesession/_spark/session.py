"""Build a SparkSession whose Iceberg catalog is reachable only through the gateway."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _classcache, _ivyprogress, _seal, _sparklog
from .errors import install_connect_error_conversion, install_error_conversion
from .jars import JarSet, cache_dir, check_java, java_executable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
# confs a Spark Connect client cannot set: the server owns its JVM, jars and static SQL conf
REMOTE_SKIP = (
    "spark.jars",
    "spark.driver.",
    "spark.executor.",
    "spark.ui.",
    "spark.master",
    "spark.sql.extensions",
    "spark.sql.execution.arrow.pyspark.fallback.enabled",
)
SECRET_ENV = (
    "JUPYTERHUB_API_TOKEN",
    "LAKESESSION_TOKEN",
    "LAKESESSION_CREDENTIAL",
    "LAKESESSION_CLIENT_SECRET",
    "LAKESESSION_HUB_ACCESS_TOKEN",
)


def catalog_conf(
    name: str, gateway_uri: str, session_secret: str, warehouse: str | None, access: str = "vended-credentials"
) -> dict[str, str]:
    """Spark conf for one Iceberg REST catalog behind the gateway.

    The JVM gets the gateway URI and the per-session secret (sent as its bearer
    token) — never the user's token. Caching is off: another writer's commit
    (pyiceberg, another engine) must be visible to the next query. ``access`` is the
    access delegation asked of the catalog: ``vended-credentials`` or ``remote-signing``
    (no storage credentials in the JVM: its signer calls go to the gateway too).
    """
    p = f"spark.sql.catalog.{name}"
    conf = {
        p: "org.apache.iceberg.spark.SparkCatalog",
        f"{p}.type": "rest",
        f"{p}.uri": gateway_uri,
        f"{p}.token": session_secret,
        f"{p}.cache-enabled": "false",
        f"{p}.header.X-Iceberg-Access-Delegation": access,
    }
    if warehouse:
        conf[f"{p}.warehouse"] = warehouse
    return conf


def base_conf(catalog_name: str, jars: JarSet | None, *, server: bool = False) -> dict[str, str]:
    """The conf every lakesession JVM starts with; ``server``: Spark's log on stderr, not in a file (``_sparklog``)."""
    java_opts = _sparklog.java_options(console=server)
    conf = {
        "spark.sql.extensions": EXTENSIONS,
        "spark.sql.defaultCatalog": catalog_name,
        # pandas 3 + pyspark 3.5 without Arrow turn None in string columns into 'NaN'
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.pyspark.fallback.enabled": "true",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": java_opts,
        "spark.executor.extraJavaOptions": java_opts,
        # a user's failing query should surface the catalog's message, not a JVM trace
        "spark.sql.pyspark.jvmStacktrace.enabled": "false",
    }
    if jars is not None:
        conf.update(jars.spark_conf())
    return conf


def quiet_query_error_logs() -> None:
    """pyspark 4 also logs every failing query's error, JVM trace included, to stderr: the raised
    exception already says it, in one line (see ``errors``); keep notebooks readable."""
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # pyspark 3.5: no such logging
        return
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


def _launch(builder: Any, conf: Mapping[str, str], hidden: Mapping[str, str]) -> None:
    """Launch the JVM for ``builder`` here; ``getOrCreate`` then uses it. ``hidden`` keys are left off the command line.

    pyspark launches the JVM (``launch_gateway``) from the builder's options when it creates the
    SparkContext, putting every option on the java command line, which every account of the host can read
    (``ps``). Launched here the same way, minus ``hidden`` (the cluster's secret): ``getOrCreate`` then sets
    those on the JVM's SparkConf through pyspark's authenticated gateway. Ivy's report on resolving
    ``spark.jars.packages`` becomes one progress line (``_ivyprogress``).
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    options = getattr(builder, "_options", None)  # pyspark 3.5 and 4: what getOrCreate would pass on
    if SparkContext._gateway is not None or not isinstance(options, dict):
        return
    shown = {k: v for k, v in options.items() if k not in hidden}
    packages = [p for p in conf.get("spark.jars.packages", "").split(",") if p]
    if not _ivyprogress.verbose():  # its output on pipes: Ivy's report one line, the JVM's start-up banner none
        ivy = conf.get("spark.jars.ivy")
        gateway = _ivyprogress.launch_gateway(shown, packages, Path(ivy) / "cache" if ivy else None)
    elif hidden:
        launch = SparkConf(loadDefaults=False)
        for key, value in shown.items():
            launch.set(key, value)
        gateway = launch_gateway(launch)
    else:
        return  # nothing to hide or filter: getOrCreate launches it as usual
    SparkContext._ensure_initialized(gateway=gateway)


@contextmanager
def _preexec(extra: Callable[[], None] | None) -> Iterator[None]:
    """pyspark launches its JVM with a ``preexec_fn`` of its own: run ``extra`` in the child too (the engine's
    parent-death signal). pyspark calls ``Popen`` by its module's name, so that name is wrapped meanwhile."""
    if extra is None:
        yield
        return
    import pyspark.java_gateway as java_gateway

    original = java_gateway.Popen

    def popen(*args: Any, **kwargs: Any) -> Any:
        theirs = kwargs.get("preexec_fn")

        def both() -> None:
            if theirs is not None:
                theirs()
            extra()

        kwargs["preexec_fn"] = both
        return original(*args, **kwargs)

    java_gateway.Popen = popen  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        java_gateway.Popen = original  # type: ignore[misc]


def build_spark(
    conf: Mapping[str, str],
    *,
    master: str | None = None,
    remote: str | None = None,
    app_name: str = "lakesession",
    builder_hook: Callable[[Any], Any] | None = None,
    classcache: bool = True,
    user_conf: Mapping[str, str] | None = None,
    ui: bool = True,
    jvm_preexec: Callable[[], None] | None = None,
) -> tuple[SparkSession, bool]:
    """Create (or reuse) the SparkSession with ``conf``; returns it and whether it was created here.

    Runtime-settable keys (catalogs) are applied to a reused session. ``classcache``: map the JVM's
    class-data-sharing archive (``_classcache``; the warm-up of that name). A JVM launched here that
    resolves ``spark.jars.packages`` shows one progress line instead of Ivy's report (``_ivyprogress``).
    A JVM launched here is sealed (``_seal``: loopback, ``spark.authenticate``, private dirs, redaction);
    ``user_conf`` is what the user asked for (a key set there wins, with a warning when it opens the JVM),
    ``ui`` whether Spark's UI may run (on loopback). ``jvm_preexec`` runs in the JVM's process before it
    starts (the engine's: die with the engine).
    """
    from pyspark import SparkContext
    from pyspark.find_spark_home import _find_spark_home
    from pyspark.sql import SparkSession

    launch = _classcache.Plan()
    master = master or "local[*]"  # a session's: Settings reads LAKESESSION_SPARK_MASTER
    sealed = _seal.Seal()
    if remote is None and SparkContext._active_spark_context is None:
        sealed = _seal.seal(conf, master, user_conf=user_conf, ui=ui)
        conf = sealed.apply(conf)
    if remote is None:
        java_version = check_java()
        if SparkContext._active_spark_context is None and classcache:
            launch = _classcache.plan(conf, java_executable(), java_version, _find_spark_home(), cache_dir())
            conf = _classcache.with_options(conf, launch.options)
    os.environ.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON") or __import__("sys").executable)
    builder = SparkSession.builder.appName(app_name)
    if remote:
        builder = builder.remote(remote)
    else:
        builder = builder.master(master)
    for k, v in {**conf, **sealed.hidden}.items():
        if remote and k.startswith(REMOTE_SKIP):
            continue  # the Connect server owns its JVM
        builder = builder.config(k, v)
    if builder_hook:
        builder = builder_hook(builder)
    existed = SparkContext._active_spark_context is not None
    # the JVM inherits os.environ: keep tokens that could act as the user out of it
    saved = {k: os.environ.pop(k) for k in SECRET_ENV if k in os.environ}
    replaced = {k: os.environ.get(k) for k in sealed.env}
    os.environ.update(sealed.env)
    try:
        with _preexec(jvm_preexec if not existed and not remote else None):
            if not existed and not remote:
                _launch(builder, conf, sealed.hidden)
            spark = builder.getOrCreate()
    finally:
        for key, value in replaced.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        os.environ.update(saved)
    if not existed and not remote:
        _seal.tighten()
    if launch.claim is not None:
        _classcache.launched(launch, getattr(getattr(spark.sparkContext._gateway, "proc", None), "pid", None))
    if existed or remote:
        # getOrCreate reused a session: catalogs are runtime SQL confs and can still be registered
        for k, v in conf.items():
            if k.startswith("spark.sql.catalog.") or k == "spark.sql.defaultCatalog":
                spark.conf.set(k, v)
    quiet_query_error_logs()
    if remote:
        install_connect_error_conversion()
    else:
        spark.sparkContext.setLogLevel("ERROR")
        install_error_conversion()
    return spark, not existed and not remote
