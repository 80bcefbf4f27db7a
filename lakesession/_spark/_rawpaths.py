"""Raw ``s3a://`` paths in every Spark session lakesession starts, with or without Comet (issue #42).

Why: ``spark.read.parquet("s3a://lake/landing/")`` needs Hadoop's ``S3AFileSystem`` (hadoop-aws), which
pyspark does not ship, and credentials for exactly the granted prefix, which only the session's gateway
may hand out (ARCHITECTURE "Trust model"). So a JVM launched here gets hadoop-aws, the AWS SDK modules it
adds to Iceberg's bundle and lakesession's S3A provider, request check and client factory (``comet``:
``resolve``, ``launch_conf``, ``session_conf``) whenever the session's catalog offers credentials by
path: its ``/v1/config`` lists ``GET /v1/{prefix}/lakesession/location-credentials`` (the embedded
catalog always does). A catalog that does not costs nothing: no probe result, no extra jar.

Spark 4.1 and 4.0 (Hadoop 3.4, AWS SDK v2) and 3.5 (Hadoop 3.3.4, AWS SDK v1: lakesession's ``*V1`` classes;
``comet.HADOOP_FOR_SPARK``). A JVM launched without the wiring fails a raw read with one line
(``unavailable``) naming why and the fix, instead of Hadoop's ``ClassNotFoundException`` trace.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import RawPathsUnavailableError
from ._chain import Chain, SparkSideError
from .comet import HADOOP_FOR_SPARK, PROVIDER_JAR

logger = logging.getLogger(__name__)

LOCATION_ROUTE = "GET /v1/{prefix}/lakesession/location-credentials"
S3A_CLASS = "org.apache.hadoop.fs.s3a.S3AFileSystem"
PROBE_TIMEOUT = 3.0  # seconds: a catalog slower than this to answer /v1/config gets no raw-path jars
_MISSING = re.compile(
    r"(ClassNotFoundException|NoClassDefFoundError|not found)\W.*S3AFileSystem|S3AFileSystem not found"
)
ALTERNATIVE = "session.filesystem('s3://bucket/prefix/') reads a granted location with pandas/pyarrow on any line"

# why the JVM this process launched has no S3A wiring (None: it has it, or lakesession did not launch it)
_why_not: str | None = None


def supported() -> str:
    """The Spark lines whose sessions read raw paths, for messages."""
    return ", ".join(f"Spark {m}.x (Hadoop {h})" for m, h in HADOOP_FOR_SPARK.items())


def offers_locations(config: Mapping[str, Any]) -> bool:
    """Whether a ``/v1/config`` answer lists the location-credentials route."""
    endpoints = config.get("endpoints")
    return isinstance(endpoints, list) and LOCATION_ROUTE in endpoints


def probe(uri: str, token: Callable[[], str], warehouse: str | None) -> bool:
    """Ask the catalog's ``/v1/config`` (as the user) whether it offers credentials by path; False on any failure:
    a catalog that cannot answer now gets no raw-path jars, and its own first query reports why."""
    import httpx

    try:
        r = httpx.get(
            f"{uri.rstrip('/')}/v1/config",
            params={"warehouse": warehouse} if warehouse else None,
            headers={"Authorization": f"Bearer {token()}", "Accept": "application/json"},
            timeout=PROBE_TIMEOUT,
        )
        doc = r.json() if r.status_code == 200 else {}
    except Exception as exc:  # the start must not fail here; the message may quote the URL only
        logger.debug("raw paths: /v1/config probe failed (%s)", type(exc).__name__)
        return False
    return isinstance(doc, dict) and offers_locations(doc)


def launch_conf(
    jar_set: Any, spark_conf: Mapping[str, str], clouds: frozenset[str], offered: Callable[[], bool] | None
) -> dict[str, str]:
    """The class path and conf giving a JVM launched now S3A with lakesession's wiring, or ``{}`` (and why not)."""
    global _why_not
    from . import comet
    from .comet import takes_sdk_v1
    from .jars import detect_spark

    info = detect_spark()
    if offered is None or not offered():
        _why_not = (
            "this session's catalog does not offer credentials by path (its /v1/config lists no "
            f"'{LOCATION_ROUTE}'), so lakesession started Spark without S3A. Fix: read the data as a table of "
            "the catalog, or use a catalog that vends location credentials (lakesession serve)"
        )
        return {}
    if info.minor not in HADOOP_FOR_SPARK:
        _why_not = (
            f"raw s3a:// paths are wired for {supported()}, not Spark {info.version} (its Hadoop takes another AWS "
            f"SDK). Fix: pip install 'pyspark>=4.1,<4.2' and restart Python; or {ALTERNATIVE}"
        )
        return {}
    java = java_major() if takes_sdk_v1(info.minor) else 17  # probed once, and only where it matters
    if java < 17:
        _why_not = (
            f"raw s3a:// paths on Spark {info.version} need Java 17 (lakesession's S3A classes are built for it), "
            f"and this Spark runs on Java {java}. Fix: set JAVA_HOME to a Java 17 and restart Python; "
            f"or {ALTERNATIVE}"
        )
        return {}
    if getattr(jar_set, "source", None) not in ("cache", "maven"):
        _why_not = (
            f"Spark was started with jars from {getattr(jar_set, 'source', 'elsewhere')} (jars= / LAKESESSION_JARS), "
            "so lakesession did not add hadoop-aws. Fix: start with the default jars (jars='auto'), or add "
            f"org.apache.hadoop:hadoop-aws:{HADOOP_FOR_SPARK[info.minor]} yourself; or {ALTERNATIVE}"
        )
        return {}
    _why_not = None
    jars = comet.resolve(info.minor, info.scala, info.version, comet=False, clouds=clouds)
    return comet.launch_conf(jars, spark_conf)


def java_major() -> int:
    """The major version of the Java Spark launches (``_java``: the one lakesession picks)."""
    from ._java import major
    from .jars import check_java

    return major(check_java())


def wired(sc: Any) -> bool:
    """Whether the running SparkContext's class path holds hadoop-aws and lakesession's S3A provider."""
    if sc is None:
        return False
    conf = sc.getConf()
    path = f"{conf.get('spark.driver.extraClassPath') or ''}"
    return "hadoop-aws" in path and PROVIDER_JAR in path


def runtime_conf(catalog_name: str, gateway: Any, spark_conf: Mapping[str, str]) -> dict[str, str]:
    """This session's S3A provider, request check and client factory, bound to its gateway (Comet's keys left out)."""
    from pyspark import SparkContext

    from .comet import session_conf, takes_sdk_v1
    from .jars import detect_spark

    if not wired(SparkContext._active_spark_context):
        return {}
    sdk_v1 = takes_sdk_v1(detect_spark().minor)
    return session_conf(catalog_name, gateway.uri, gateway.secret, spark_conf, comet=False, sdk_v1=sdk_v1)


def unavailable(chain: Chain) -> RawPathsError | None:
    """Hadoop's "class S3AFileSystem not found" anywhere on a Spark failure's cause chain, as one line."""
    for link in chain.links:
        if _MISSING.search(f"{link.name}: {link.message}"):
            return RawPathsError(f"raw s3a:// paths are not available in this Spark session: {reason()}")
    return None


def reason() -> str:
    """Why this process's Spark has no S3A, with the fix."""
    if _why_not is not None:
        return _why_not
    return (
        "this Spark was not started by lakesession with S3A (hadoop-aws). Fix: stop it and let lakesession.spark() "
        f"start Spark on {supported()}; or {ALTERNATIVE}"
    )


class RawPathsError(RawPathsUnavailableError, SparkSideError):
    """``RawPathsUnavailableError`` from Spark: also pyspark's ``CapturedException`` (its handlers still match)."""
