"""Which jars a start fetches and puts on the class path (no JVM): clouds, one class path, Comet's progress.

Downloads run over real HTTP from a loopback Maven mirror (``tests/_maven_mirror``) with small stand-in
jars; ``tests/client/test_jar_cache_cold.py`` does it for real against Maven Central.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

import lakesession
from lakesession._spark import _maven, comet, versions
from lakesession._spark import jars as J
from lakesession.errors import JarResolutionError
from tests._maven_mirror import serve


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(versions.CLOUDS_ENV, raising=False)


@pytest.mark.parametrize(
    ("warehouse", "conf", "want"),
    [
        (None, {}, set()),  # the embedded default: its S3 emulator
        ("s3://bucket/warehouse", {}, set()),
        ("demo", {}, set()),  # a warehouse name tells nothing: S3's bundle only
        ("abfss://c@acct.dfs.core.windows.net/wh", {}, {"adls"}),
        ("wasbs://c@acct.blob.core.windows.net/wh", {}, {"adls"}),
        ("gs://bucket/wh", {}, {"gcs"}),
        (None, {"spark.sql.catalog.lake.io-impl": "org.apache.iceberg.gcp.gcs.GCSFileIO"}, {"gcs"}),
        (None, {"spark.sql.catalog.lake.io-impl": "org.apache.iceberg.azure.adlsv2.ADLSFileIO"}, {"adls"}),
        (None, {"spark.sql.catalog.lake.adls.auth.shared-key.account.name": "a"}, {"adls"}),
        (None, {"spark.sql.catalog.other.gcs.project-id": "p"}, {"gcs"}),
        (None, {"spark.sql.catalog.lake.warehouse": "gs://b/w"}, {"gcs"}),
        ("s3://b/w", {"spark.hadoop.fs.gs.project.id": "p"}, set()),  # not a catalog setting
    ],
)
def test_clouds_come_from_what_is_known_before_the_jvm_starts(
    warehouse: str | None, conf: dict[str, str], want: set[str]
) -> None:
    assert versions.clouds_for(warehouse, conf) == want


def test_clouds_asked_for_outright(monkeypatch: pytest.MonkeyPatch) -> None:
    assert versions.clouds_for("s3://b/w", {}, "azure, gcp") == {"adls", "gcs"}
    assert versions.clouds_for(None, {}, ["all"]) == {"adls", "gcs"}
    monkeypatch.setenv(versions.CLOUDS_ENV, "gcs")  # read by Settings, as a session's clouds
    asked = lakesession.Settings.resolve().clouds
    assert versions.clouds_for("abfss://c@a.dfs.core.windows.net/w", {}, asked) == {"adls", "gcs"}  # and detected
    assert versions.clouds_for("abfss://c@a.dfs.core.windows.net/w") == {"adls"}  # the helper reads no variable
    assert versions.parse_clouds("s3,none") == frozenset()
    with pytest.raises(JarResolutionError, match="unknown cloud 'ftp'.*adls \\(azure\\), gcs \\(gcp\\)"):
        versions.parse_clouds("ftp")


def test_bundles_follow_the_clouds() -> None:
    names = [a for a, _ in versions.maven_artifacts("4.1", "2.13")]
    assert names == ["iceberg-spark-runtime-4.1_2.13", "iceberg-aws-bundle"]
    names = [a for a, _ in versions.maven_artifacts("4.1", "2.13", clouds={"gcs"})]
    assert names == ["iceberg-spark-runtime-4.1_2.13", "iceberg-aws-bundle", "iceberg-gcp-bundle"]


def test_every_pinned_jar_has_a_size_and_a_sha1() -> None:
    pinned = {(versions.GROUP, a, v) for a, v in versions.MAVEN_SHA1} | set(comet.SHA1)
    assert set(versions.JAR_BYTES) == pinned


def test_one_class_path_drops_from_spark_jars_what_comet_put_on_the_class_path(tmp_path: Path) -> None:
    runtime, aws, mine = (tmp_path / n for n in ("runtime.jar", "aws.jar", "mine.jar"))
    conf = {
        "spark.jars": f"{runtime},{aws},{mine}",
        "spark.driver.extraClassPath": os.pathsep.join(map(str, (tmp_path / "provider.jar", runtime, aws))),
        "spark.plugins": "org.apache.spark.CometPlugin",
    }
    out = comet.one_class_path(conf)
    assert out["spark.jars"] == str(mine) and out["spark.plugins"] == conf["spark.plugins"]
    assert "spark.jars" not in comet.one_class_path({**conf, "spark.jars": f"{runtime},{aws}"})
    assert comet.one_class_path({"spark.jars": str(runtime)}) == {"spark.jars": str(runtime)}  # no Comet: unchanged


def _mirror_all(mirror, monkeypatch: pytest.MonkeyPatch, coords) -> None:  # type: ignore[no-untyped-def]
    pinned = dict(comet.SHA1)
    iceberg = dict(versions.MAVEN_SHA1)
    for g, a, v in coords:
        sha = mirror.put(g, a, v, f"{g}:{a}:{v}".encode() * 1000)
        pinned[(g, a, v)] = sha
        if g == versions.GROUP:
            iceberg[(a, v)] = sha
    monkeypatch.setattr(comet, "SHA1", pinned)
    monkeypatch.setattr(J, "MAVEN_SHA1", iceberg)
    monkeypatch.setenv(_maven.MAVEN_ENV, mirror.url)


def test_comet_jars_download_behind_one_progress_line_and_share_the_iceberg_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(J.CACHE_ENV, str(tmp_path / "cache"))
    wanted = [*comet.SHA1]
    with serve(tmp_path / "mirror") as mirror:
        _mirror_all(mirror, monkeypatch, wanted)
        jars = comet.resolve("4.1", "2.13", "4.1.4")
        err = capfd.readouterr().err
        # the Comet jar (99 MB on Maven Central) is counted in the one line, first and last (stderr is a pipe here)
        lines = [line for line in err.splitlines() if line.startswith("lakesession: downloading")]
        assert len(lines) == 2, err
        assert (
            lines[0].startswith("lakesession: downloading 6 jars (218 MB) from Maven Central") and "done in" in lines[1]
        )
        assert jars.comet is not None and jars.comet.name == "org.apache.datafusion_comet-spark-spark4.1_2.13-1.2.0.jar"
        assert not any("azure" in r or "gcp" in r for r in mirror.requests)
        # resolve_jars gives Spark the very same Iceberg files: nothing downloaded twice, nothing stored twice
        js = J.resolve_jars("auto")
        assert js.source == "cache" and set(js.jars) <= set(jars.raw)
        assert len(mirror.requests) == 6
        comet.resolve("4.1", "2.13", "4.1.4")
        assert capfd.readouterr().err == ""  # warm: quiet
    names = [p.name for p in (tmp_path / "cache").rglob("*.jar")]
    assert sorted(names) == sorted(set(names)) and len(names) == 6


def test_progress_updates_in_place_on_a_terminal() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Tty()
    p = _maven.Progress(["comet-spark-spark4.1_2.13"], 98_985_596, out=out)
    p._last = -1.0
    p.add(50_000_000)
    p.end()
    text = out.getvalue()
    assert text.count("\r") == 3 and text.endswith("\n") and "50 MB of 99 MB" in text and "done in" in text


def test_progress_of_jars_without_a_pinned_size_says_no_zero_total() -> None:
    """java/build.py's build-only jars have no pinned size: it said "downloading 1 jar (0 kB) … 17 MB of 0 kB"."""
    out = io.StringIO()
    p = _maven.Progress(["hadoop-aws"], 0, out=out)
    p.add(17_000_000)
    p.end()
    text = out.getvalue()
    assert "0 kB" not in text and "downloading 1 jar from Maven Central (hadoop-aws): 17 MB," in text, text


def test_the_clouds_option_reaches_the_session_and_a_wrong_name_fails_before_anything_starts() -> None:
    import lakesession
    from lakesession.session import Session

    session = lakesession.connect(uri="http://127.0.0.1:9", token="t", warehouse="analytics", clouds=["azure"])
    try:
        assert session._clouds == {"adls"}
        # what the start asks resolve_jars for: asked ∪ what the warehouse and catalog settings say
        assert versions.clouds_for(session.warehouse, session._spark_conf, session._clouds) == {"adls"}
    finally:
        session.close()
    with pytest.raises(JarResolutionError, match="unknown cloud 'dropbox'"):
        Session("http://127.0.0.1:9", None, clouds="dropbox")


def test_a_running_jvm_without_a_needed_bundle_is_named_at_once(caplog: pytest.LogCaptureFixture) -> None:
    from lakesession import _sparkbind

    class Sc:
        def __init__(self, jars: str) -> None:
            self.jars = jars

        def getConf(self) -> dict[str, str]:
            return {"spark.jars": self.jars}

    s3_only = Sc("/c/maven/org.apache.iceberg_iceberg-spark-runtime-4.1_2.13-1.12.0.jar")
    with caplog.at_level("WARNING", logger="lakesession._sparkbind"):
        _sparkbind._check_running_clouds(s3_only, "abfss://c@a.dfs.core.windows.net/w", {}, None)
    assert "already running without iceberg-azure-bundle" in caplog.text and "clouds=" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="lakesession._sparkbind"):
        _sparkbind._check_running_clouds(s3_only, "s3://b/w", {}, None)
        _sparkbind._check_running_clouds(
            Sc("/c/maven/org.apache.iceberg_iceberg-azure-bundle-1.10.0.jar"), None, {}, frozenset({"adls"})
        )
    assert caplog.text == ""
