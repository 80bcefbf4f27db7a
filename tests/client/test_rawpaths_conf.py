"""Which JVM gets S3A for raw ``s3a://`` paths without Comet (``lakesession._spark._rawpaths``), no JVM started.

The decision a launch makes — the catalog offers location credentials, the Spark line is wired, the jars are
lakesession's — and the one line a session without S3A gets instead. The Spark runs are in
``test_raw_paths_spark.py``; here the jars are real cached files (``comet.resolve`` checks their sha1).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lakesession._spark import _rawpaths, comet, jars
from lakesession._spark.jars import JarSet

LINE = ".".join(__import__("pyspark").__version__.split(".")[:2])


@pytest.fixture(autouse=True)
def _keep_the_launch_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each decision below sets the module's reason; a JVM this process launched keeps its own afterwards."""
    monkeypatch.setattr(_rawpaths, "_why_not", _rawpaths._why_not)


def _spark(monkeypatch: pytest.MonkeyPatch, version: str, scala: str) -> None:
    info = jars.SparkInfo(version=version, scala=scala, jars_dir=Path("/nonexistent"))
    monkeypatch.setattr(jars, "detect_spark", lambda: info)


def test_no_location_credentials_no_jars_and_the_reason_names_the_route(monkeypatch: pytest.MonkeyPatch) -> None:
    _spark(monkeypatch, "4.1.4", "2.13")
    asked: list[int] = []
    assert _rawpaths.launch_conf(JarSet((), (), "cache"), {}, frozenset(), lambda: bool(asked.append(1))) == {}
    assert asked == [1]
    assert _rawpaths.launch_conf(JarSet((), (), "cache"), {}, frozenset(), None) == {}
    reason = _rawpaths.reason()
    assert _rawpaths.LOCATION_ROUTE in reason and "Fix:" in reason and "\n" not in reason


@pytest.mark.parametrize(("version", "scala"), [("3.4.4", "2.12"), ("3.4.4", "2.13")])
def test_a_line_without_s3a_wiring_gets_no_jars_and_says_which_lines_have_it(
    monkeypatch: pytest.MonkeyPatch, version: str, scala: str
) -> None:
    _spark(monkeypatch, version, scala)
    assert _rawpaths.launch_conf(JarSet((), (), "cache"), {}, frozenset(), lambda: True) == {}
    reason = _rawpaths.reason()
    assert f"not Spark {version}" in reason and "Spark 4.1.x (Hadoop 3.4.2)" in reason
    assert "Spark 3.5.x (Hadoop 3.3.4)" in reason
    assert "pip install 'pyspark>=4.1,<4.2'" in reason and "session.filesystem(" in reason


def test_spark_35_on_java_11_gets_no_jars_and_says_java_17(monkeypatch: pytest.MonkeyPatch) -> None:
    """lakesession's S3A classes are built for Java 17; Spark 3.5 also runs on 8 and 11."""
    _spark(monkeypatch, "3.5.1", "2.12")
    monkeypatch.setattr(_rawpaths, "java_major", lambda: 11)
    assert _rawpaths.launch_conf(JarSet((), (), "cache"), {}, frozenset(), lambda: True) == {}
    reason = _rawpaths.reason()
    assert "Java 17" in reason and "Java 11" in reason and "Fix:" in reason and "\n" not in reason


def test_spark_35_takes_the_sdk_v1_jars_and_classes() -> None:
    """Hadoop 3.3's S3A is built on AWS SDK v1: its modules (not the 280 MB bundle) and the *V1 classes."""
    assert comet.takes_sdk_v1("3.5") and not comet.takes_sdk_v1("4.1") and not comet.takes_sdk_v1("4.0")
    assert {a for _, a, _ in comet.SDK_V1_JARS} >= {"aws-java-sdk-core", "aws-java-sdk-s3", "aws-java-sdk-dynamodb"}
    assert (
        all(c in comet.SHA1 for c in comet.SDK_V1_JARS) and ("org.apache.hadoop", "hadoop-aws", "3.3.4") in comet.SHA1
    )
    conf = comet.session_conf("lake", "http://127.0.0.1:5000", "s3cret", {}, comet=False, sdk_v1=True)
    assert conf["fs.s3a.aws.credentials.provider"] == comet.S3A_PROVIDER_V1
    assert conf["fs.s3a.s3.client.factory.impl"] == comet.S3A_CLIENT_FACTORY_V1  # it adds the request check
    assert "fs.s3a.audit.execution.interceptors" not in conf  # an SDK v2 key Hadoop 3.3 does not read
    import zipfile

    with zipfile.ZipFile(comet.provider_jar()) as z:
        names = set(z.namelist())
    for cls in (comet.S3A_PROVIDER_V1, comet.S3A_CLIENT_FACTORY_V1, "dev.lakesession.jvm.GrantCheckHandlerV1"):
        assert cls.replace(".", "/") + ".class" in names


def test_own_jars_get_no_hadoop_aws_added(monkeypatch: pytest.MonkeyPatch) -> None:
    _spark(monkeypatch, "4.1.4", "2.13")
    assert _rawpaths.launch_conf(JarSet((), (), "explicit"), {}, frozenset(), lambda: True) == {}
    assert "jars=" in _rawpaths.reason() and "hadoop-aws:3.4.2" in _rawpaths.reason()


@pytest.mark.skipif(LINE != "4.1", reason="the cached jars of this pyspark's line (4.1 in the default environment)")
def test_a_wired_line_gets_hadoop_aws_and_the_provider_on_the_class_path_without_comet() -> None:
    conf = _rawpaths.launch_conf(jars.resolve_jars("cache"), {}, frozenset(), lambda: True)
    path = conf["spark.driver.extraClassPath"]
    assert "hadoop-aws-3.4.2" in path and comet.PROVIDER_JAR in path and "iceberg-aws-bundle" in path
    assert "comet-spark" not in path and "spark.plugins" not in conf and "spark.shuffle.manager" not in conf
    assert conf["spark.executor.extraClassPath"] == path


def test_a_plain_sessions_runtime_conf_is_s3a_only() -> None:
    conf = comet.session_conf("lake", "http://127.0.0.1:5000", "s3cret", {}, comet=False)
    assert conf["fs.s3a.aws.credentials.provider"] == comet.S3A_PROVIDER
    assert conf["fs.s3a.audit.execution.interceptors"] == comet.S3A_CHECK
    assert conf["fs.s3a.impl.disable.cache"] == "true"
    assert not [k for k in conf if "comet" in k], conf


def test_offers_locations_reads_the_config_endpoints() -> None:
    assert _rawpaths.offers_locations({"endpoints": [_rawpaths.LOCATION_ROUTE]})
    assert not _rawpaths.offers_locations({"endpoints": ["GET /v1/{prefix}/namespaces"]})
    assert not _rawpaths.offers_locations({})  # a catalog listing no endpoints offers no extension route
