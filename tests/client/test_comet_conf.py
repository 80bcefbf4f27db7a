"""comet=True without a JVM: the supported-line check, the settings it adds, the committed provider jar.

The jar in the wheel (``lakesession/_spark/jvm/lakesession-jvm.jar``) must be built from the sources in
``java/src``: its manifest records their hash (``java/build.py``).
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import pytest

import lakesession
from lakesession._spark import comet, jars
from lakesession.errors import ConfigError
from tests.support import load_script

ROOT = Path(__file__).resolve().parents[2]


def _build_module() -> Any:
    return load_script("lakesession_java_build", ROOT / "java" / "build.py")


def _spark(monkeypatch: pytest.MonkeyPatch, version: str, scala: str) -> None:
    info = jars.SparkInfo(version=version, scala=scala, jars_dir=Path("/nonexistent"))
    monkeypatch.setattr(jars, "detect_spark", lambda: info)


@pytest.mark.parametrize(("version", "scala"), [("3.5.8", "2.12"), ("4.0.2", "2.13"), ("3.5.8", "2.13")])
def test_comet_on_a_spark_line_without_a_release_is_a_config_error_naming_the_supported_one(
    monkeypatch: pytest.MonkeyPatch, version: str, scala: str
) -> None:
    _spark(monkeypatch, version, scala)
    with pytest.raises(ConfigError) as info:
        lakesession.connect(uri="http://127.0.0.1:9", token="t", comet=True)
    message = str(info.value)
    assert f"Spark {version}" in message and "Spark 4.1.x (Scala 2.13, Comet 1.2.0)" in message
    assert "pip install 'pyspark>=4.1,<4.2'" in message


def test_comet_with_spark_connect_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _spark(monkeypatch, "4.1.4", "2.13")
    with pytest.raises(ConfigError, match="Spark Connect server loads its own plugins"):
        lakesession.connect(uri="http://127.0.0.1:9", token="t", comet=True, remote="sc://127.0.0.1:1")


def test_comet_on_spark_41_is_accepted_and_without_it_nothing_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    _spark(monkeypatch, "4.1.4", "2.13")
    session = lakesession.connect(uri="http://127.0.0.1:9", token="t", comet=True)
    session.close()
    from lakesession import _sparkbind

    assert _sparkbind._comet_launch(False, {"spark.sql.shuffle.partitions": "2"}) == {}
    assert _sparkbind.comet_conf(False, "lake", object(), {}) == {}


def test_launch_conf_adds_plugin_shuffle_offheap_and_keeps_the_users_settings(tmp_path: Path) -> None:
    provider, comet_jar, aws = tmp_path / "p.jar", tmp_path / "c.jar", tmp_path / "a.jar"
    cj = comet.CometJars(comet_jar, (aws,), provider)
    conf = comet.launch_conf(cj, {"spark.plugins": "my.Plugin", "spark.driver.extraClassPath": "/mine.jar"})
    assert conf["spark.plugins"] == f"my.Plugin,{comet.PLUGIN}"
    assert conf["spark.shuffle.manager"] == comet.SHUFFLE_MANAGER
    assert conf["spark.memory.offHeap.enabled"] == "true"
    assert conf["spark.driver.extraClassPath"] == f"/mine.jar:{provider}:{comet_jar}:{aws}"
    assert conf["spark.executor.extraClassPath"] == f"{provider}:{comet_jar}:{aws}"
    # the user's own Comet (spark.plugins names it): only the provider and the raw-path jars are added
    own = comet.launch_conf(comet.CometJars(None, (aws,), provider), {"spark.plugins": comet.PLUGIN})
    assert "spark.plugins" not in own and own["spark.driver.extraClassPath"] == f"{provider}:{aws}"
    assert comet.names_comet({"spark.plugins": comet.PLUGIN}) and not comet.names_comet({})


def test_session_conf_wires_both_paths_to_this_sessions_gateway_and_respects_the_io_deadline() -> None:
    conf = comet.session_conf("lake", "http://127.0.0.1:5000/catalog", "s3cret", {comet.IO_TIMEOUT: "20s"})
    assert conf["spark.sql.catalog.lake.s3.comet.credential.provider.class"] == comet.COMET_PROVIDER
    assert conf["fs.s3a.comet.credential.provider.class"] == comet.COMET_PROVIDER
    assert conf["fs.s3a.aws.credentials.provider"] == comet.S3A_PROVIDER
    assert conf["fs.s3a.lakesession.gateway.uri"] == "http://127.0.0.1:5000/catalog"
    assert conf["spark.sql.catalog.lake.lakesession.min-valid-seconds"] == "30"
    assert conf["fs.s3a.audit.execution.interceptors"] == "dev.lakesession.jvm.GrantCheckInterceptor"
    assert conf["fs.s3a.s3.client.factory.impl"] == "dev.lakesession.jvm.GatewayS3ClientFactory"
    assert not any(k in conf for k in ("fs.s3a.endpoint", "fs.s3a.path.style.access", "fs.s3a.endpoint.region"))
    assert conf["fs.s3a.impl.disable.cache"] == "true"  # a cached S3AFileSystem would carry another session's provider
    assert comet.min_valid_seconds({}) == comet.DEFAULT_IO_TIMEOUT + comet.MARGIN
    assert comet.min_valid_seconds({comet.IO_TIMEOUT: "5000"}) == 5 + comet.MARGIN  # a bare number: ms
    assert comet.min_valid_seconds({comet.IO_TIMEOUT: "1min"}) == 60 + comet.MARGIN
    with pytest.raises(ConfigError, match="give a Spark duration"):
        comet.min_valid_seconds({comet.IO_TIMEOUT: "soon"})


def test_fetch_refuses_a_jar_whose_sha1_differs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LAKESESSION_CACHE_DIR", str(tmp_path))
    bad = comet.maven_dir() / "org.apache.hadoop_hadoop-aws-3.4.2.jar"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"not the jar")

    from tests.factories import free_port

    monkeypatch.setenv("LAKESESSION_MAVEN_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens: no network
    with pytest.raises(lakesession.errors.JarResolutionError, match="put the jar at"):
        comet.fetch("org.apache.hadoop", "hadoop-aws", "3.4.2")
    with pytest.raises(lakesession.errors.JarResolutionError, match="no pinned sha1"):
        comet.fetch("org.example", "anything", "1.0")


def test_committed_provider_jar_is_built_from_the_committed_sources() -> None:
    build = _build_module()
    jar = comet.provider_jar()
    assert jar.is_file(), f"{jar} missing: run python java/build.py"
    assert build.jar_source_hash(jar) == build.source_hash(), "java/src changed: run python java/build.py"
    with zipfile.ZipFile(jar) as z:
        names = set(z.namelist())
    for cls in ("CometCredentialProvider", "S3ACredentialsProvider", "GatewayClient", "CredentialCache", "Json"):
        assert f"dev/lakesession/jvm/{cls}.class" in names
    assert comet.COMET_PROVIDER.replace(".", "/") + ".class" in names
    assert comet.S3A_PROVIDER.replace(".", "/") + ".class" in names
    assert not [n for n in names if n.startswith("dev/lakesession/engine/")], "the engine's sandbox is its own jar"


def test_the_engines_sandbox_is_its_own_jar_built_from_the_committed_sources() -> None:
    """``dev.lakesession.engine`` ships with lakesession-engine only, not in every client's jar (#43 point 4)."""
    from lakesession.engine._engine import SANDBOX_EXTENSIONS, sandbox_jar

    build = _build_module()
    jar = sandbox_jar()
    assert jar.is_file() and build.jar_source_hash(jar) == build.source_hash(), "run python java/build.py"
    with zipfile.ZipFile(jar) as z:
        names = set(z.namelist())
    assert SANDBOX_EXTENSIONS.replace(".", "/") + ".class" in names and "dev/lakesession/engine/rules.json" in names
    assert {n.split("/")[2] for n in names if n.endswith(".class")} == {"engine"}, "only the engine's classes"


def test_the_wheel_ships_the_provider_jar() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    wheel = project["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert "lakesession" in wheel["packages"]
    excluded = wheel.get("exclude", [])
    assert not any("jvm" in e or e.endswith(".jar") for e in excluded)
    ignored = (ROOT / ".gitignore").read_text().split()
    assert "*.jar" not in ignored
