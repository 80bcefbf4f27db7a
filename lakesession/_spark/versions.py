"""Which Spark lines lakesession supports, and the Iceberg jars each one gets (a leaf module).

One table: Spark minor -> Scala binary version -> the Iceberg release whose
``iceberg-spark-runtime-<minor>_<scala>`` and ``iceberg-aws-bundle`` Maven Central
publishes. Iceberg 1.12.0 (the newest) builds runtimes for Spark 3.5 (Scala 2.12)
and 4.1; Spark 4.0 and Spark 3.5 on Scala 2.13 stop at 1.11.0. Spark 4.2/4.3 have
no Iceberg runtime yet. The sha1 values are Maven Central's own, so a jar found in
the Ivy cache can be trusted without the network.

Azure and GCS: the Spark runtime jar already holds Iceberg's ``ADLSFileIO`` and ``GCSFileIO``; the
``iceberg-azure-bundle`` / ``iceberg-gcp-bundle`` jars add only the (relocated) cloud SDKs they call,
so one bundle release serves every runtime: the newest on Maven Central (``CLOUD_BUNDLES``). They are
83 MB together, so a session gets them only when its storage is on that cloud (``clouds_for``).

``JAR_BYTES`` holds each pinned jar's size (Maven Central's Content-Length): the progress line's
total and the documentation's tables (``docs/_gen.py``) come from it.

Nothing here imports the rest of ``lakesession._spark`` (``jars`` and ``_assemble``
both import from here).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from lakesession._wire.cloudkeys import cloud_of

# re-exported here (jars, _assemble, connect_server import them from this leaf); the tree lives in errors.py
from lakesession.errors import JarResolutionError as JarResolutionError
from lakesession.errors import JavaNotFoundError as JavaNotFoundError

GROUP = "org.apache.iceberg"
MAVEN_ICEBERG: dict[str, dict[str, str]] = {  # spark minor -> scala -> iceberg release on Maven Central
    "3.5": {"2.12": "1.12.0", "2.13": "1.11.0"},
    "4.0": {"2.13": "1.11.0"},
    "4.1": {"2.13": "1.12.0"},
}
MAVEN_SHA1: dict[tuple[str, str], str] = {  # (artifact, version) -> Maven Central's .sha1
    ("iceberg-spark-runtime-3.5_2.12", "1.12.0"): "9320e156d8ea8460e26e0604c0fed204c2579aa0",
    ("iceberg-spark-runtime-3.5_2.13", "1.11.0"): "a7bfb4a097481d1949230b7b9f729407323e8a22",
    ("iceberg-spark-runtime-4.0_2.13", "1.11.0"): "70df6b99e6c07627805db0b5e5e58000a22e716e",
    ("iceberg-spark-runtime-4.1_2.13", "1.12.0"): "9e395e373a9a99643bf413ca1f74fa0c034887b4",
    ("iceberg-aws-bundle", "1.11.0"): "afe5b22dd5bc2d2c0639049b06a92dae2545cac7",
    ("iceberg-aws-bundle", "1.12.0"): "64d5012217035a60924feb633636b744d318eb0a",
    ("iceberg-azure-bundle", "1.10.0"): "95898d896ce5d94e18ff5b89b85cc2b4ee0a2897",
    ("iceberg-gcp-bundle", "1.11.0"): "11493e2804467aa65e36fc6f423e28d87ceefca7",
}
# SDK-only bundles for ADLSFileIO / GCSFileIO (newest releases Maven Central serves: Azure's stops at 1.10.0)
CLOUD_BUNDLES: dict[str, tuple[str, str]] = {
    "adls": ("iceberg-azure-bundle", "1.10.0"),
    "gcs": ("iceberg-gcp-bundle", "1.11.0"),
}
CLOUD_NAMES = {"adls": "adls", "azure": "adls", "abfs": "adls", "gcs": "gcs", "gcp": "gcs", "gs": "gcs"}
CLOUDS_ENV = "LAKESESSION_CLOUDS"
# (group, artifact, version) -> bytes on Maven Central (Content-Length of the .jar, checked with its sha1)
JAR_BYTES: dict[tuple[str, str, str], int] = {
    (GROUP, "iceberg-spark-runtime-3.5_2.12", "1.12.0"): 48252525,
    (GROUP, "iceberg-spark-runtime-3.5_2.13", "1.11.0"): 47973808,
    (GROUP, "iceberg-spark-runtime-4.0_2.13", "1.11.0"): 47926285,
    (GROUP, "iceberg-spark-runtime-4.1_2.13", "1.12.0"): 48309426,
    (GROUP, "iceberg-aws-bundle", "1.11.0"): 63613165,
    (GROUP, "iceberg-aws-bundle", "1.12.0"): 69034612,
    (GROUP, "iceberg-azure-bundle", "1.10.0"): 18687191,
    (GROUP, "iceberg-gcp-bundle", "1.11.0"): 64210864,
    ("org.apache.datafusion", "comet-spark-spark4.1_2.13", "1.2.0"): 98985596,
    ("org.apache.hadoop", "hadoop-aws", "3.4.2"): 936997,
    ("org.apache.hadoop", "hadoop-aws", "3.4.1"): 865554,
    ("software.amazon.awssdk", "apache-client", "2.44.4"): 77705,
    ("software.amazon.awssdk", "s3-transfer-manager", "2.44.4"): 256301,
    ("org.apache.hadoop", "hadoop-client-api", "3.4.2"): 19665963,
    ("software.amazon.awssdk", "apache-client", "2.54.17"): 77826,
    ("software.amazon.awssdk", "s3-transfer-manager", "2.54.17"): 282942,
    # Spark 3.5's raw paths: hadoop-aws 3.3.4 and the AWS SDK v1 modules its S3A loads (comet.SDK_V1_JARS)
    ("org.apache.hadoop", "hadoop-aws", "3.3.4"): 962685,
    ("com.amazonaws", "aws-java-sdk-core", "1.12.262"): 1045128,
    ("com.amazonaws", "aws-java-sdk-s3", "1.12.262"): 1256738,
    ("com.amazonaws", "aws-java-sdk-kms", "1.12.262"): 656123,
    ("com.amazonaws", "aws-java-sdk-dynamodb", "1.12.262"): 1997350,
    ("com.amazonaws", "jmespath-java", "1.12.262"): 27590,
}
SUPPORTED_SPARK = tuple(MAVEN_ICEBERG)
DEFAULT_SPARK = "4.1"  # the install default (pyproject's pyspark range resolves to it)
PYSPARK_RANGE = "pyspark>=3.5,<4.2"
# The offline (PyPI + Debian) assembly: only Spark 3.5 has a runtime jar on PyPI (see _assemble).
OFFLINE_ICEBERG = "1.10.2"
OFFLINE_SPARK = ("3.5",)


def supported_range() -> str:
    """Human-readable list of supported (Spark, Scala) lines, e.g. for error messages."""
    return ", ".join(f"Spark {m}.x (Scala {'/'.join(s)})" for m, s in MAVEN_ICEBERG.items())


def iceberg_for(minor: str, scala: str, version: str = "") -> str:
    """The Iceberg release for Spark ``minor`` on Scala ``scala``; JarResolutionError if unsupported."""
    try:
        return MAVEN_ICEBERG[minor][scala]
    except KeyError:
        raise JarResolutionError(
            f"unsupported Spark {version or minor} (Scala {scala}): Iceberg publishes Spark runtimes that "
            f"lakesession supports for {supported_range()}. Install '{PYSPARK_RANGE}' "
            f"(pip install '{PYSPARK_RANGE}'), or set LAKESESSION_JARS=<comma-separated jar paths> to use "
            "jars you provide"
        ) from None


def maven_artifacts(
    minor: str, scala: str, version: str = "", clouds: Iterable[str] = ()
) -> tuple[tuple[str, str], ...]:
    """(artifact, version) pairs Spark needs from Maven Central for this Spark line: the runtime and the AWS
    bundle (S3FileIO, always), and the bundle of each cloud in ``clouds`` (``adls``, ``gcs``)."""
    iceberg = iceberg_for(minor, scala, version)
    extra = tuple(CLOUD_BUNDLES[c] for c in sorted(parse_clouds(clouds)))
    return ((f"iceberg-spark-runtime-{minor}_{scala}", iceberg), ("iceberg-aws-bundle", iceberg), *extra)


def parse_clouds(value: str | Iterable[str] | None) -> frozenset[str]:
    """``adls``/``gcs`` from names (``azure``, ``gcp``, ``all``, …) or a comma-separated string; ``s3`` is implied."""
    if value is None:
        return frozenset()
    names = [n.strip().lower() for n in (value.split(",") if isinstance(value, str) else value) if n.strip()]
    out: set[str] = set()
    for name in names:
        if name == "all":
            out.update(CLOUD_BUNDLES)
        elif name in ("s3", "aws", "none"):
            continue  # S3FileIO's bundle comes always
        elif name in CLOUD_NAMES:
            out.add(CLOUD_NAMES[name])
        else:
            raise JarResolutionError(
                f"unknown cloud {name!r} in {CLOUDS_ENV}: name some of adls (azure), gcs (gcp) or all, comma-separated"
            )
    return frozenset(out)


_CLOUD_CLASS = {"ADLSFileIO": "adls", "GCSFileIO": "gcs"}


def clouds_for(
    warehouse: str | None = None,
    spark_conf: Mapping[str, str] | None = None,
    asked: str | Iterable[str] | None = None,
) -> frozenset[str]:
    """The clouds (beyond S3) whose Iceberg bundle a JVM launched now needs, from what is known before it starts.

    ``asked`` (a session's ``clouds``, which ``Settings`` reads from ``$LAKESESSION_CLOUDS``) names them outright; besides, a warehouse that is an ADLS or GCS
    location, and catalog settings in ``spark_conf`` naming ``ADLSFileIO``/``GCSFileIO``, an ``abfss://``/``gs://``
    location or ``adls.``/``gcs.`` properties. The embedded default and S3 warehouses need none: 83 MB saved.
    """
    out = set(parse_clouds(asked))
    places = [warehouse or ""]
    for key, value in (spark_conf or {}).items():
        if key.startswith("spark.sql.catalog."):
            prop = key.split(".", 4)[-1] if key.count(".") >= 4 else ""
            if prop.startswith("adls."):
                out.add("adls")
            elif prop.startswith("gcs."):
                out.add("gcs")
            places.append(value)
    for place in places:
        cloud = cloud_of(place)
        if cloud in CLOUD_BUNDLES:
            out.add(cloud)
        for cls, c in _CLOUD_CLASS.items():
            if place.endswith(cls):
                out.add(c)
    return frozenset(out)


def jar_name(group: str, artifact: str, version: str) -> str:
    """The file name of a Maven jar in lakesession's cache (Spark's Ivy retrieve uses the same)."""
    return f"{group}_{artifact}-{version}.jar"
