"""Local files that can't be planted (issue 23, finding 6): the caches lakesession hands to the JVM.

Another local user plants a class-data archive (a real one, dumped by ``java``) in a world-writable
or foreign-owned ``classcache``, or jars (with a forged verification stamp) in a world-writable Ivy
cache. On fa6e17e the planted archive was mapped by the next Spark launch and the planted jars were
put on its classpath. Now: a loose directory of the user's is tightened and emptied, a foreign one is
set aside (or refused when its parent isn't the user's either), and each case says so in a warning.
Files are made another user's with ``chown`` (uid 65534, "nobody"): that needs root, as in CI.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path

import pytest

from lakesession._spark import _classcache
from lakesession._spark import jars as J
from lakesession._spark.jars import check_java, java_executable
from lakesession._spark.versions import GROUP, maven_artifacts
from lakesession.errors import JarResolutionError
from tests.support import dump_class_archive, fake_spark_home

JAVA = java_executable()
VERSION = check_java()
NOBODY = 65534


def as_another_user(*paths: Path) -> None:
    if os.getuid() != 0:
        pytest.fail("planting files as another user needs root (chown); run this test as root, as CI does")
    for p in paths:
        os.chown(p, NOBODY, NOBODY)


@pytest.fixture(scope="module")
def archive_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A real, mappable archive: what an attacker would plant (its classes are theirs to choose)."""
    return dump_class_archive(tmp_path_factory.mktemp("evil") / "evil.jsa")


@pytest.fixture()
def spark_home(tmp_path: Path) -> Path:
    return fake_spark_home(tmp_path)


def plant_archive(cache: Path, spark_home: Path, data: bytes, dir_mode: int) -> tuple[Path, Path]:
    root = cache / "classcache"
    root.mkdir(parents=True)
    os.chmod(cache, 0o700)
    key = _classcache.archive_key({}, JAVA, VERSION, str(spark_home))
    planted = root / f"{key}.jsa"
    planted.write_bytes(data)
    os.chmod(root, dir_mode)
    return root, planted


def plan(cache: Path, spark_home: Path) -> _classcache.Plan:
    return _classcache.plan({}, JAVA, VERSION, str(spark_home), cache)


def test_an_archive_planted_in_a_world_writable_class_cache_is_never_mapped(
    tmp_path: Path, spark_home: Path, archive_bytes: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    root, planted = plant_archive(tmp_path / "cache", spark_home, archive_bytes, 0o777)
    as_another_user(planted)
    with caplog.at_level(logging.WARNING):
        launch = plan(tmp_path / "cache", spark_home)
    assert str(planted) not in launch.options and launch.archive is None  # fa6e17e: mapped as is
    assert not planted.exists() and stat.S_IMODE(root.stat().st_mode) == 0o700  # emptied and tightened
    assert "writable by other users" in caplog.text and str(root) in caplog.text
    assert launch.claim is not None and launch.claim.parent == root  # the cache is rebuilt: this launch dumps


def test_a_class_cache_owned_by_another_user_is_set_aside(
    tmp_path: Path, spark_home: Path, archive_bytes: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    root, planted = plant_archive(tmp_path / "cache", spark_home, archive_bytes, 0o755)
    as_another_user(root, planted)
    with caplog.at_level(logging.WARNING):
        launch = plan(tmp_path / "cache", spark_home)
    assert str(planted) not in launch.options and launch.archive is None  # fa6e17e: mapped as is
    assert root.stat().st_uid == os.getuid() and not planted.exists()  # a fresh directory of the user's
    aside = [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".untrusted-classcache")]
    assert len(aside) == 1 and aside[0].stat().st_uid == NOBODY
    assert "owned by uid 65534" in caplog.text


def test_a_cache_whose_parent_is_not_the_users_either_is_refused(
    tmp_path: Path, spark_home: Path, archive_bytes: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    shared = tmp_path / "shared"
    root, planted = plant_archive(shared / "cache", spark_home, archive_bytes, 0o755)
    as_another_user(shared, shared / "cache", root, planted)
    with caplog.at_level(logging.WARNING):
        launch = plan(shared / "cache", spark_home)
    assert launch == _classcache.Plan()  # no class sharing at all: only speed is lost
    assert planted.exists() and "refusing to use it" in caplog.text and "LAKESESSION_CACHE_DIR" in caplog.text


def test_a_loose_archive_in_a_private_cache_is_not_mapped(
    tmp_path: Path, spark_home: Path, archive_bytes: bytes
) -> None:
    _, planted = plant_archive(tmp_path / "cache", spark_home, archive_bytes, 0o700)
    os.chmod(planted, 0o666)  # anyone could have rewritten it
    launch = plan(tmp_path / "cache", spark_home)
    assert str(planted) not in launch.options and not planted.exists()


# -- jars handed to the JVM ----------------------------------------------------------------------------
def plant_ivy(cache: Path) -> list[Path]:
    """Jars named like the verified Maven ones, and a stamp file claiming they were verified."""
    spark = J.detect_spark()
    jars = cache / "ivy" / "jars"
    jars.mkdir(parents=True)
    os.chmod(cache, 0o700)
    stamps, planted = {}, []
    for artifact, version in maven_artifacts(spark.minor, spark.scala, spark.version):
        jar = jars / f"{GROUP}_{artifact}-{version}.jar"
        jar.write_bytes(b"PK\x03\x04 not Iceberg at all")
        st = jar.stat()
        stamps[jar.name] = [st.st_size, st.st_mtime_ns]
        planted.append(jar)
    (jars / ".lakesession-verified.json").write_text(json.dumps(stamps))
    os.chmod(cache / "ivy", 0o777)
    os.chmod(jars, 0o777)
    return planted


def test_jars_planted_in_a_world_writable_ivy_cache_never_reach_the_jvm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("LAKESESSION_CACHE_DIR", str(cache))
    monkeypatch.delenv("LAKESESSION_JARS", raising=False)
    planted = plant_ivy(cache)
    as_another_user(*planted)
    with caplog.at_level(logging.WARNING), pytest.raises(JarResolutionError, match="no verified cached jar set"):
        J.resolve_jars("cache")  # fa6e17e: returned the planted jars as "verified"
    assert not any(p.exists() for p in planted) and stat.S_IMODE((cache / "ivy").stat().st_mode) == 0o700
    assert "Ivy cache" in caplog.text and "writable by other users" in caplog.text


def test_a_foreign_cache_root_is_refused_with_a_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "shared"
    (shared / "cache").mkdir(parents=True)
    as_another_user(shared, shared / "cache")
    monkeypatch.setenv("LAKESESSION_CACHE_DIR", str(shared / "cache"))
    monkeypatch.delenv("LAKESESSION_JARS", raising=False)
    with pytest.raises(JarResolutionError, match="LAKESESSION_CACHE_DIR"):
        J.resolve_jars("cache")


def test_a_cache_behind_a_symlink_is_checked_where_it_points(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A cache moved to another disk (a symlink of the user's) works; its target gets the same checks."""
    from lakesession._spark._owned import _UntrustedCache, private_dir

    target = tmp_path / "disk" / "ivy"
    target.mkdir(parents=True)
    (target / "planted.jar").write_bytes(b"jar")
    link = tmp_path / "cache" / "ivy"
    link.parent.mkdir(mode=0o700)
    link.symlink_to(target)
    os.chmod(target, 0o700)
    assert private_dir(link, "Ivy cache") == link and (target / "planted.jar").exists()  # private: used as is
    os.chmod(target, 0o777)
    with caplog.at_level(logging.WARNING):
        private_dir(link, "Ivy cache")
    assert not (target / "planted.jar").exists() and stat.S_IMODE(target.stat().st_mode) == 0o700
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    other_link = tmp_path / "cache" / "jars"
    other_link.symlink_to(theirs)
    as_another_user(theirs)
    private_dir(other_link, "jar cache")  # another user's target: the link is set aside, a private dir made
    assert not other_link.is_symlink() and stat.S_IMODE(other_link.stat().st_mode) == 0o700
    assert theirs.exists()  # never touched
    if os.getuid() != 0:
        pytest.fail("making a link another user's needs root (lchown), as in CI")
    os.lchown(link, NOBODY, NOBODY)
    with pytest.raises(_UntrustedCache, match="symlink owned by uid"):
        private_dir(link, "Ivy cache")


def test_a_jar_and_stamp_planted_in_a_world_writable_maven_cache_never_reach_the_jvm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Comet's jars come from the same store even with ``jars=[paths]`` (which skips resolve_jars' checks)."""
    from lakesession._spark import comet

    cache = tmp_path / "cache"
    monkeypatch.setenv("LAKESESSION_CACHE_DIR", str(cache))
    monkeypatch.setenv("LAKESESSION_MAVEN_URL", "http://127.0.0.1:9")  # nothing listens: no download either
    maven = cache / "maven"
    maven.mkdir(parents=True)
    os.chmod(cache, 0o700)
    jar = maven / "org.apache.hadoop_hadoop-aws-3.4.2.jar"
    jar.write_bytes(b"PK\x03\x04 not hadoop-aws at all")
    st = jar.stat()
    sha1 = comet.SHA1[("org.apache.hadoop", "hadoop-aws", "3.4.2")]
    stamp = jar.with_suffix(".verified")
    stamp.write_text(f"{sha1} {st.st_size} {st.st_mtime_ns}")  # claims the planted jar was verified
    os.chmod(maven, 0o777)
    as_another_user(jar, stamp)
    with caplog.at_level(logging.WARNING), pytest.raises(JarResolutionError, match="could not download"):
        comet.fetch("org.apache.hadoop", "hadoop-aws", "3.4.2")
    assert not jar.exists() and stat.S_IMODE(maven.stat().st_mode) == 0o700
    assert "Maven jar cache" in caplog.text and "writable by other users" in caplog.text
