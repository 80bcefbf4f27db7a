"""Apache DataFusion Comet and raw ``s3a://`` paths: the jars and settings ``comet=True`` adds.

Comet's native scans (Iceberg via iceberg-rust/opendal, raw Parquet via object_store) bypass
Iceberg's S3FileIO and Hadoop S3A, so vended credentials reach them only through Comet's credential
SPI. lakesession ships its own provider (``jvm/lakesession-jvm.jar``, built from ``java/`` by
``java/build.py``) which asks the session's gateway — with the session secret, never the user's
token — for credentials scoped to the path being read.

Jars come from Maven Central once into ``<cache>/maven`` (``_maven``: pinned sha1s, one progress
line), the same files ``resolve_jars`` gives Spark; they go on the driver's class path (Comet's plugin
and shuffle manager load before ``spark.jars``), and ``one_class_path`` drops them from ``spark.jars``:
each jar is on the JVM's class path once.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from lakesession.errors import ConfigError

from .versions import GROUP, MAVEN_ICEBERG, MAVEN_SHA1, maven_artifacts

PLUGIN = "org.apache.spark.CometPlugin"
SHUFFLE_MANAGER = "org.apache.spark.sql.comet.execution.shuffle.CometShuffleManager"
COMET_PROVIDER = "dev.lakesession.jvm.CometCredentialProvider"
S3A_PROVIDER = "dev.lakesession.jvm.S3ACredentialsProvider"
S3A_CHECK = "dev.lakesession.jvm.GrantCheckInterceptor"
S3A_CLIENT_FACTORY = "dev.lakesession.jvm.GatewayS3ClientFactory"
# Hadoop 3.3's S3A (AWS SDK v1; the factory adds the request check, dev.lakesession.jvm.GrantCheckHandlerV1)
S3A_PROVIDER_V1 = "dev.lakesession.jvm.S3ACredentialsProviderV1"
S3A_CLIENT_FACTORY_V1 = "dev.lakesession.jvm.GatewayS3ClientFactoryV1"
PROVIDER_JAR = "lakesession-jvm.jar"
IO_TIMEOUT = "spark.comet.iceberg.ioTimeout"
DEFAULT_IO_TIMEOUT = 30  # seconds: Comet's default I/O deadline for opendal requests
MARGIN = 10  # seconds a credential must outlive the deadline by

# spark minor -> scala -> Comet release on Maven Central (the Spark 3.5/4.0 builds of 1.2.0 are not served here)
MAVEN_COMET: dict[str, dict[str, str]] = {"4.1": {"2.13": "1.2.0"}}
# pyspark's bundled Hadoop (hadoop-aws must match it): the Spark lines whose sessions read raw s3a:// paths
# (``_rawpaths``). Hadoop 3.3's S3A is built on AWS SDK v1: lakesession's SDK v1 classes (``*V1``) serve it.
HADOOP_FOR_SPARK = {"4.1": "3.4.2", "4.0": "3.4.1", "3.5": "3.3.4"}
# hadoop-aws 3.3.4's AWS SDK v1, as the modules S3A loads (not the 280 MB aws-java-sdk-bundle its pom names):
# S3 (and its client-side encryption's KMS, its waiters' JMESPath), DynamoDB (S3A's error translation checks
# its exception types), the core and what the core loads that Spark 3.5 does not ship
SDK_V1 = "1.12.262"
SDK_V1_JARS = (
    ("com.amazonaws", "aws-java-sdk-core", SDK_V1),
    ("com.amazonaws", "aws-java-sdk-s3", SDK_V1),
    ("com.amazonaws", "aws-java-sdk-kms", SDK_V1),
    ("com.amazonaws", "aws-java-sdk-dynamodb", SDK_V1),
    ("com.amazonaws", "jmespath-java", SDK_V1),
)
# AWS SDK v2 of the iceberg-aws-bundle in use: hadoop-aws takes the rest of the SDK from that bundle
SDK_FOR_ICEBERG = {"1.12.0": "2.54.17", "1.11.0": "2.44.4"}
SHA1: dict[tuple[str, str, str], str] = {  # (group, artifact, version) -> Maven Central's .sha1
    ("org.apache.datafusion", "comet-spark-spark4.1_2.13", "1.2.0"): "0353906ed7ac1b65ea00c5669045cf3c55dbd364",
    ("org.apache.hadoop", "hadoop-aws", "3.4.2"): "16f9de6da5c7862241d55a13d34843404d0cbb88",
    ("org.apache.hadoop", "hadoop-aws", "3.4.1"): "641d8fe1d7683cdcc05cc3a794c0374553f6bd6a",
    ("org.apache.hadoop", "hadoop-client-api", "3.4.2"): "d49afafdccb52bddde866ea0f341e6b31edc97fe",
    ("org.apache.hadoop", "hadoop-aws", "3.3.4"): "a65839fbf1869f81a1632e09f415e586922e4f80",
    ("com.amazonaws", "aws-java-sdk-core", SDK_V1): "2734ba5566476d9154e5460dedbc83de95a9016d",
    ("com.amazonaws", "aws-java-sdk-s3", SDK_V1): "71be2e0d2fa870424649e140c689abeda20e55ea",
    ("com.amazonaws", "aws-java-sdk-kms", SDK_V1): "01cf105b9ea7747356a483270ba7e110fcf3324d",
    ("com.amazonaws", "aws-java-sdk-dynamodb", SDK_V1): "215de3e7087ad7880eed1215c16734cca21662a7",
    ("com.amazonaws", "jmespath-java", SDK_V1): "866bcdec4e926fa17a231df6dd76eecdcfa26292",
    ("software.amazon.awssdk", "apache-client", "2.44.4"): "c9f8ce37b3a9bdaf6ad60c5348b2df2e38804358",
    ("software.amazon.awssdk", "s3-transfer-manager", "2.44.4"): "3ee1934ac45ab9642d12a4ca6b68f687fc40c6a6",
    ("software.amazon.awssdk", "apache-client", "2.54.17"): "382ee44d0e6f806cf895942098e513c31fbd01cd",
    ("software.amazon.awssdk", "s3-transfer-manager", "2.54.17"): "c72805ac1c7d7d2c74e32baee0830868ebf0c59c",
    **{(GROUP, a, v): sha1 for (a, v), sha1 in MAVEN_SHA1.items()},
}


def supported() -> str:
    """Spark lines with a Comet release lakesession can fetch, for error messages."""
    return ", ".join(f"Spark {m}.x (Scala {s}, Comet {v})" for m, by in MAVEN_COMET.items() for s, v in by.items())


def comet_for(minor: str, scala: str, version: str = "") -> str:
    """The Comet release for this Spark line; ConfigError naming the supported lines if there is none."""
    try:
        return MAVEN_COMET[minor][scala]
    except KeyError:
        raise ConfigError(
            f"comet=True: no Apache DataFusion Comet release for Spark {version or minor} (Scala {scala}) is "
            f"available from Maven Central; lakesession supports Comet on {supported()}. Install "
            "'pyspark>=4.1,<4.2' (pip install 'pyspark>=4.1,<4.2'), or drop comet=True"
        ) from None


def check_available(remote: str | None = None) -> None:
    """``comet=True``: fail before anything starts if this installation cannot have Comet."""
    if remote is not None:
        raise ConfigError(
            "comet=True starts Comet in a JVM this process launches; a Spark Connect server loads its own "
            "plugins: configure Comet on the server (docs/how-to/comet.md) and drop comet=True"
        )
    from .jars import detect_spark

    info = detect_spark()
    comet_for(info.minor, info.scala, info.version)


@dataclass(frozen=True)
class CometJars:
    """Jar paths for the driver's class path (local mode: the executors share it)."""

    comet: Path | None
    raw: tuple[Path, ...]  # Iceberg's runtime and AWS bundle, hadoop-aws and the AWS SDK modules it adds
    provider: Path

    def class_path(self) -> list[Path]:
        return [p for p in (self.provider, self.comet, *self.raw) if p is not None]


def maven_dir() -> Path:
    from .jars import maven_dir as shared

    return shared()


def fetch(group: str, artifact: str, version: str) -> Path:
    """``group:artifact:version`` from the cache, else Maven Central; verified against its pinned sha1."""
    return fetch_all([(group, artifact, version)])[0]


def fetch_all(coords: Iterable[tuple[str, str, str]]) -> list[Path]:
    """The jars from ``<cache>/maven`` (``jars.maven_store``), downloading what is missing behind one progress line."""
    from .jars import maven_store

    return maven_store(SHA1).fetch(list(coords))


def provider_jar() -> Path:
    """lakesession's compiled JVM provider, shipped in the wheel (users need no JDK)."""
    return Path(str(resources.files("lakesession._spark").joinpath("jvm", PROVIDER_JAR)))


def resolve(minor: str, scala: str, version: str = "", *, comet: bool = True, clouds: Iterable[str] = ()) -> CometJars:
    """The jars for Comet (if ``comet``) and raw s3a:// paths on this Spark line; ``clouds`` as in ``resolve_jars``.

    One batch: what is missing downloads behind one progress line (Comet's 99 MB jar included).
    """
    release = comet_for(minor, scala, version) if comet else ""
    hadoop = HADOOP_FOR_SPARK[minor]  # raw paths without Comet: ``_rawpaths`` checks the line first
    # on the same (system) class path as Comet and S3A: SDK classes loaded by Spark's child loader
    # (spark.jars) are invisible to hadoop-aws there (NoClassDefFoundError: ExecutionInterceptor)
    coords = [
        *((GROUP, a, v) for a, v in maven_artifacts(minor, scala, version, clouds)),
        ("org.apache.hadoop", "hadoop-aws", hadoop),
    ]
    if takes_sdk_v1(minor):
        coords += SDK_V1_JARS
    else:
        sdk = SDK_FOR_ICEBERG[MAVEN_ICEBERG[minor][scala]]
        coords += [
            ("software.amazon.awssdk", "apache-client", sdk),
            ("software.amazon.awssdk", "s3-transfer-manager", sdk),
        ]
    if comet:
        coords.append(("org.apache.datafusion", f"comet-spark-spark{minor}_{scala}", release))
    paths = fetch_all(coords)
    return CometJars(paths[-1] if comet else None, tuple(paths[: len(paths) - comet]), provider_jar())


def takes_sdk_v1(minor: str) -> bool:
    """Whether this Spark line's Hadoop builds S3A on AWS SDK v1 (3.3: Spark 3.5)."""
    return HADOOP_FOR_SPARK.get(minor, "").startswith("3.3.")


def one_class_path(conf: Mapping[str, str]) -> dict[str, str]:
    """``conf`` without the ``spark.jars`` entries already on ``spark.driver.extraClassPath`` (Comet's launch
    puts Iceberg's jars there): each jar is loaded once, by the system class loader."""
    on_path = {os.path.realpath(p) for p in conf.get("spark.driver.extraClassPath", "").split(os.pathsep) if p}
    out = dict(conf)
    if "spark.jars" in conf and on_path:
        kept = [j for j in conf["spark.jars"].split(",") if j and os.path.realpath(j) not in on_path]
        if kept:
            out["spark.jars"] = ",".join(kept)
        else:
            del out["spark.jars"]
    return out


def names_comet(spark_conf: Mapping[str, str]) -> bool:
    """Whether the user's own Spark conf already loads Comet (then its provider is wired too)."""
    return PLUGIN in spark_conf.get("spark.plugins", "")


def launch_conf(jars: CometJars, user: Mapping[str, str]) -> dict[str, str]:
    """Static conf for a JVM this process launches: class path, plugin, shuffle manager, off-heap memory."""
    extra = [str(p) for p in jars.class_path()]
    conf: dict[str, str] = {}
    for key in ("spark.driver.extraClassPath", "spark.executor.extraClassPath"):
        mine = os.pathsep.join(extra)
        conf[key] = f"{user[key]}{os.pathsep}{mine}" if user.get(key) else mine
    if jars.comet is not None:
        plugins = [p for p in user.get("spark.plugins", "").split(",") if p.strip()]
        conf["spark.plugins"] = ",".join([*plugins, PLUGIN] if PLUGIN not in plugins else plugins)
        conf["spark.shuffle.manager"] = user.get("spark.shuffle.manager", SHUFFLE_MANAGER)
        conf["spark.memory.offHeap.enabled"] = user.get("spark.memory.offHeap.enabled", "true")
        conf["spark.memory.offHeap.size"] = user.get("spark.memory.offHeap.size", "2g")
        conf["spark.comet.exec.shuffle.enabled"] = user.get("spark.comet.exec.shuffle.enabled", "true")
    return conf


_UNITS = {"ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def min_valid_seconds(user: Mapping[str, str]) -> int:
    """How long a credential handed to Comet must still be valid: its I/O deadline plus a margin.

    ``spark.comet.iceberg.ioTimeout`` is a Spark time conf: a bare number is milliseconds.
    """
    raw = user.get(IO_TIMEOUT, "").strip().lower()
    if not raw:
        return DEFAULT_IO_TIMEOUT + MARGIN
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ms|s|sec|m|min|h)?", raw)
    if m is None:
        raise ConfigError(f"{IO_TIMEOUT}={user[IO_TIMEOUT]!r}: give a Spark duration, e.g. '30s' or '30000' (ms)")
    seconds = float(m.group(1)) * _UNITS[m.group(2) or "ms"]
    return math.ceil(seconds) + MARGIN


#: what the catalog vends (Iceberg's FileIO keys) -> the per-bucket S3A key Comet's native reader reads
STORE_KEYS = {
    "s3.endpoint": "endpoint",
    "s3.path-style-access": "path.style.access",
    "client.region": "endpoint.region",
}


def store_conf(gateway_uri: str, secret: str, spark_conf: Mapping[str, str]) -> dict[str, str]:
    """``fs.s3a.bucket.<b>.endpoint`` / ``.path.style.access`` / ``.endpoint.region`` as the catalog vends them,
    for each bucket holding a location granted to this session.

    Why: S3A finds the store through lakesession's client factory, but Comet's native Parquet reader builds
    its own client from Hadoop's ``fs.s3a.*`` keys before it asks for credentials, so it needs them as conf.
    A store the user set (``fs.s3a.endpoint``, or the bucket's own key) wins; a bucket the gateway cannot
    answer for is left to the default (AWS).
    """
    import httpx

    from ..credentials._pathfs import policy_locations

    def user_set(key: str) -> bool:
        return key in spark_conf or f"spark.hadoop.{key}" in spark_conf

    if user_set("fs.s3a.endpoint"):
        return {}
    buckets = sorted({loc.split("://", 1)[1].split("/", 1)[0] for loc in policy_locations(gateway_uri, secret)})
    out: dict[str, str] = {}
    for bucket in buckets:
        if user_set(f"fs.s3a.bucket.{bucket}.endpoint"):
            continue
        r = httpx.get(
            f"{gateway_uri}/lakesession/bucket-credentials",
            params={"bucket": bucket, "mode": "read"},
            headers={"Authorization": f"Bearer {secret}"},
            timeout=60,
        )
        entries = (r.json().get("storage-credentials") or []) if r.status_code == 200 else []
        config = entries[0].get("config", {}) if entries else {}
        out |= {f"fs.s3a.bucket.{bucket}.{dst}": config[src] for src, dst in STORE_KEYS.items() if config.get(src)}
    return out


def session_conf(
    catalog_name: str,
    gateway_uri: str,
    secret: str,
    user: Mapping[str, str],
    *,
    comet: bool = True,
    sdk_v1: bool = False,
) -> dict[str, str]:
    """Runtime conf of one SparkSession: its catalog's (``comet``) and its raw paths' providers, bound to its gateway.

    Hadoop keys set as SQL conf reach only this session's Hadoop conf (``newHadoopConf``), and S3A's
    filesystem cache is off for it: a cached S3AFileSystem (per bucket and OS user) would carry
    another session's provider. ``sdk_v1``: Hadoop 3.3's S3A (Spark 3.5), whose client factory adds the
    request check itself (S3A 3.3 builds its own request handlers without a Configuration).
    """
    min_valid = str(min_valid_seconds(user))
    p = f"spark.sql.catalog.{catalog_name}"
    native = {
        f"{p}.s3.comet.credential.provider.class": COMET_PROVIDER,
        f"{p}.lakesession.min-valid-seconds": min_valid,
        "fs.s3a.comet.credential.provider.class": COMET_PROVIDER,
    }
    return {
        **(native if comet else {}),
        "fs.s3a.aws.credentials.provider": S3A_PROVIDER_V1 if sdk_v1 else S3A_PROVIDER,
        # every S3A request checked against the session's grants before the store sees it (issue #33)
        **({} if sdk_v1 else {"fs.s3a.audit.execution.interceptors": S3A_CHECK}),
        # the store's endpoint, path style and region as the catalog vends them (unless fs.s3a.endpoint is set)
        "fs.s3a.s3.client.factory.impl": S3A_CLIENT_FACTORY_V1 if sdk_v1 else S3A_CLIENT_FACTORY,
        "fs.s3a.lakesession.gateway.uri": gateway_uri,
        "fs.s3a.lakesession.gateway.token": secret,
        "fs.s3a.lakesession.min-valid-seconds": min_valid,
        "fs.s3a.impl.disable.cache": "true",
    }
