"""Which Spark lines lakesession supports, and the Iceberg jars each one gets (a leaf module).

One table: Spark minor -> Scala binary version -> the Iceberg release whose
``iceberg-spark-runtime-<minor>_<scala>`` and ``iceberg-aws-bundle`` Maven Central
publishes. Iceberg 1.12.0 (the newest) builds runtimes for Spark 3.5 (Scala 2.12)
and 4.1; Spark 4.0 and Spark 3.5 on Scala 2.13 stop at 1.11.0. Spark 4.2/4.3 have
no Iceberg runtime yet. The sha1 values are Maven Central's own, so a jar found in
the Ivy cache can be trusted without the network.

Azure and GCS: the Spark runtime jar already holds Iceberg's ``ADLSFileIO`` and ``GCSFileIO``; the
``iceberg-azure-bundle`` / ``iceberg-gcp-bundle`` jars add only the (relocated) cloud SDKs they call,
so one bundle release serves every runtime: the newest on Maven Central (``CLOUD_BUNDLES``).

Nothing here imports the rest of ``lakesession._spark`` (``jars`` and ``_assemble``
both import from here).
"""

from __future__ import annotations

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
CLOUD_BUNDLES: tuple[tuple[str, str], ...] = (("iceberg-azure-bundle", "1.10.0"), ("iceberg-gcp-bundle", "1.11.0"))
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


def maven_artifacts(minor: str, scala: str, version: str = "") -> tuple[tuple[str, str], ...]:
    """(artifact, version) pairs Spark needs from Maven Central for this Spark line."""
    iceberg = iceberg_for(minor, scala, version)
    return ((f"iceberg-spark-runtime-{minor}_{scala}", iceberg), ("iceberg-aws-bundle", iceberg), *CLOUD_BUNDLES)
