"""JVM jar resolution: modes, Java check, offline assembly, cache, and a Spark smoke test.

The offline assembly runs once per module into a temporary cache dir whose
``downloads/`` is the real cache's (so the pinned wheels and .deb are fetched
at most once per machine).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from lakesession._spark import _assemble, _classscan, _maven, versions
from lakesession._spark import jars as J
from tests._maven_mirror import serve

REAL_CACHE = J.cache_dir()
SPARK = J.detect_spark()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv(J.JARS_ENV, raising=False)


@pytest.fixture()
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(J.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


@dataclass
class Built:
    root: Path
    jar_set: J.JarSet
    seconds: float
    messages: list[str]

    @property
    def dir(self) -> Path:
        return self.jar_set.jars[0].parent

    def manifest(self) -> dict:
        return json.loads((self.dir / "manifest.json").read_text())


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    # the offline assembly exists for Spark 3.5 only (PyPI serves no Iceberg runtime for Spark 4):
    # its tests run in the pyspark 3.5 CI environment (.ci/spark-matrix); under Spark 4 the
    # offline mode's refusal is tested instead (test_offline_mode_on_spark4_says_why_and_what_to_use)
    if SPARK.minor not in versions.OFFLINE_SPARK:
        pytest.skip(f"offline assembly needs Spark 3.5, not {SPARK.version}")
    J.check_java()  # CI installs Java 17: a missing JVM is a failure, not a skip
    root = tmp_path_factory.mktemp("lakesession-cache")
    downloads = REAL_CACHE / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    (root / "downloads").symlink_to(downloads, target_is_directory=True)
    mp = pytest.MonkeyPatch()
    mp.setenv(J.CACHE_ENV, str(root))
    mp.delenv(J.JARS_ENV, raising=False)
    messages: list[str] = []
    try:
        start = time.monotonic()
        jar_set = J.resolve_jars("offline", progress=messages.append)
        yield Built(root, jar_set, time.monotonic() - start, messages)
    finally:
        mp.undo()


@pytest.fixture()
def use_built(built, monkeypatch):
    monkeypatch.setenv(J.CACHE_ENV, str(built.root))
    return built


# --- versions and coordinates -------------------------------------------------


def test_detect_spark_reads_installed_pyspark():
    import pyspark

    info = J.detect_spark()
    assert info.version == pyspark.__version__
    assert info.minor in versions.SUPPORTED_SPARK
    assert info.scala == ("2.12" if info.minor == "3.5" else "2.13")
    assert (info.jars_dir / f"spark-core_{info.scala}-{info.version}.jar").is_file()


@pytest.mark.parametrize(
    "version,scala,iceberg",
    [
        ("3.5.9", "2.12", "1.12.0"),
        ("3.5.9", "2.13", "1.11.0"),
        ("4.0.5", "2.13", "1.11.0"),
        ("4.1.4", "2.13", "1.12.0"),
    ],
)
def test_maven_packages_match_spark_and_scala(version, scala, iceberg):
    minor = version.rsplit(".", 1)[0]
    info = J.SparkInfo(version, scala, Path("/x"))
    s3_only = (
        f"org.apache.iceberg:iceberg-spark-runtime-{minor}_{scala}:{iceberg}",
        f"org.apache.iceberg:iceberg-aws-bundle:{iceberg}",
    )
    assert J.maven_packages(info) == s3_only  # no cloud named: no Azure or GCP bundle (83 MB)
    assert (
        J.maven_packages(info, ["azure", "gcp"])
        == J.maven_packages(info, "all")
        == (
            *s3_only,
            "org.apache.iceberg:iceberg-azure-bundle:1.10.0",  # ADLSFileIO's Azure SDK (SDK only: any runtime)
            "org.apache.iceberg:iceberg-gcp-bundle:1.11.0",  # GCSFileIO's Google SDK
        )
    )
    # every pair in the table has Maven Central's sha1 and size pinned (the verified cache and progress need them)
    for artifact, v in versions.maven_artifacts(minor, scala, clouds="all"):
        assert len(versions.MAVEN_SHA1[(artifact, v)]) == 40
        assert versions.JAR_BYTES[(versions.GROUP, artifact, v)] > 10_000_000


def test_default_spark_is_the_newest_supported_and_matches_pyproject():
    pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    assert f'"{versions.PYSPARK_RANGE}"' in pyproject
    assert versions.DEFAULT_SPARK == max(versions.SUPPORTED_SPARK, key=lambda m: tuple(map(int, m.split("."))))
    assert versions.PYSPARK_RANGE.endswith(
        f"<{versions.DEFAULT_SPARK.split('.')[0]}.{int(versions.DEFAULT_SPARK.split('.')[1]) + 1}"
    )


@pytest.mark.parametrize(
    "version,scala", [("4.2.1", "2.13"), ("4.3.0", "2.13"), ("3.4.3", "2.12"), ("3.5.9", "2.11"), ("4.1.4", "2.12")]
)
def test_unsupported_spark_is_a_clear_error(version, scala):
    with pytest.raises(
        J.JarResolutionError, match=r"unsupported Spark .*Spark 3\.5\.x .*Spark 4\.1\.x .*pyspark>=3\.5,<4\.2"
    ):
        J.maven_packages(J.SparkInfo(version, scala, Path("/x")))
    assert issubclass(J.JarResolutionError, __import__("lakesession").errors.LakesessionError)


def fake_spark_home(root: Path, version: str, scala: str, monkeypatch: pytest.MonkeyPatch) -> None:
    (root / "jars").mkdir()
    (root / "jars" / f"scala-library-{scala}.14.jar").write_bytes(b"")
    (root / "jars" / f"spark-core_{scala}-{version}.jar").write_bytes(b"")
    monkeypatch.setenv("SPARK_HOME", str(root))


def test_unsupported_installation_fails_resolve(tmp_path, monkeypatch):
    fake_spark_home(tmp_path, "4.3.0", "2.13", monkeypatch)
    with pytest.raises(J.JarResolutionError, match="unsupported Spark 4.3.0 in .* \\(Scala 2.13\\)"):
        J.resolve_jars("maven")


def test_offline_mode_on_spark4_says_why_and_what_to_use(tmp_path, monkeypatch, empty_cache):
    fake_spark_home(tmp_path, "4.1.4", "2.13", monkeypatch)
    with pytest.raises(J.JarResolutionError, match="offline assembly supports Spark 3.5 only.*jars='maven'"):
        J.resolve_jars("offline")
    monkeypatch.setattr(J, "_maven_reachable", lambda *a: False)
    with pytest.raises(J.JarResolutionError, match="Maven Central .* not reachable and no Spark 4.1 jars are cached"):
        J.resolve_jars("auto")


# --- modes ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["bogus", "Offline-ish", "jars.jar"])
def test_mode_validation(mode, empty_cache):
    with pytest.raises(J.JarResolutionError, match="unknown jar mode"):
        J.resolve_jars(mode)


def test_mode_of_wrong_type():
    with pytest.raises(J.JarResolutionError, match="mode must be one of"):
        J.resolve_jars(42)  # type: ignore[arg-type]


def test_explicit_paths(tmp_path):
    a, b = tmp_path / "a.jar", tmp_path / "b.jar"
    a.write_bytes(b"PK")
    b.write_bytes(b"PK")
    js = J.resolve_jars([a, str(b)])
    assert js.source == "explicit"
    assert js.jars == (a.resolve(), b.resolve())
    assert js.spark_conf() == {"spark.jars": f"{a.resolve()},{b.resolve()}"}


def test_explicit_missing_path_is_an_error(tmp_path):
    a = tmp_path / "a.jar"
    a.write_bytes(b"PK")
    with pytest.raises(J.JarResolutionError, match="not found: .*missing.jar"):
        J.resolve_jars([a, tmp_path / "missing.jar"])
    with pytest.raises(J.JarResolutionError, match="names no jar paths"):
        J.resolve_jars([])


def test_env_jars_win_in_auto(tmp_path, monkeypatch):
    jars = [tmp_path / f"{n}.jar" for n in "abc"]
    for j in jars:
        j.write_bytes(b"PK")
    monkeypatch.setenv(J.JARS_ENV, f"{jars[0]},{jars[1]}{os.pathsep}{jars[2]}")
    monkeypatch.setattr(J, "_maven_reachable", lambda *a: pytest.fail("must not probe Maven"))
    js = J.resolve_jars()
    assert js.source == "explicit" and js.jars == tuple(j.resolve() for j in jars)
    monkeypatch.setenv(J.JARS_ENV, str(tmp_path / "nope.jar"))
    with pytest.raises(J.JarResolutionError, match="LAKESESSION_JARS: jar file"):
        J.resolve_jars("auto")


def _fake_maven_jars(cache: Path, monkeypatch: pytest.MonkeyPatch, folder: str = "maven") -> list[Path]:
    """Small stand-ins for the Maven jars in ``<cache>/<folder>``, with their sha1 pinned in the table."""
    import hashlib

    jars_dir = cache / folder
    jars_dir.mkdir(parents=True)
    paths = []
    sha1 = dict(versions.MAVEN_SHA1)
    for artifact, version in versions.maven_artifacts(SPARK.minor, SPARK.scala):
        p = jars_dir / f"org.apache.iceberg_{artifact}-{version}.jar"
        p.write_bytes(f"jar {artifact}".encode())
        sha1[(artifact, version)] = hashlib.sha1(p.read_bytes()).hexdigest()
        paths.append(p)
    monkeypatch.setattr(J, "MAVEN_SHA1", sha1)
    return paths


def test_auto_prefers_verified_maven_jars_without_network(empty_cache, monkeypatch):
    paths = _fake_maven_jars(empty_cache, monkeypatch)
    monkeypatch.setattr(J, "_maven_reachable", lambda *a: pytest.fail("a verified cache must not probe Maven"))
    for mode in ("auto", "cache"):
        js = J.resolve_jars(mode)
        assert (js.source, js.jars, js.packages) == ("cache", tuple(paths), ())
        assert js.spark_conf() == {"spark.jars": ",".join(map(str, paths))}  # jars, never spark.jars.packages
    # the stamp spares re-hashing unchanged jars
    monkeypatch.setattr(_maven, "sha1", lambda p: pytest.fail("unchanged jars are not hashed again"))
    assert J.resolve_jars("auto").jars == tuple(paths)


def test_jars_spark_ivy_retrieved_before_move_into_the_one_store(empty_cache, monkeypatch):
    """A cache from before (Spark's Ivy retrieve folder) is not downloaded again: its verified jars move."""
    old = _fake_maven_jars(empty_cache, monkeypatch, folder="ivy/jars")
    monkeypatch.setattr(J, "_maven_reachable", lambda *a: pytest.fail("a verified cache must not probe Maven"))
    js = J.resolve_jars("auto")
    assert js.source == "cache" and [p.parent for p in js.jars] == [empty_cache / "maven"] * len(old)
    assert not any(p.exists() for p in old)  # moved, not copied: each jar once


def test_tampered_maven_jar_is_not_trusted_and_downloads_again(empty_cache, monkeypatch, tmp_path):
    paths = _fake_maven_jars(empty_cache, monkeypatch)
    good = {p: p.read_bytes() for p in paths}
    assert J.resolve_jars("cache").source == "cache"
    paths[0].write_bytes(b"evil jar of another size")
    with pytest.raises(J.JarResolutionError, match="no verified cached jar set"):
        J.resolve_jars("cache")
    with serve(tmp_path / "mirror") as mirror:
        for (artifact, version), p in zip(versions.maven_artifacts(SPARK.minor, SPARK.scala), paths, strict=True):
            mirror.put(versions.GROUP, artifact, version, good[p])
        monkeypatch.setenv(_maven.MAVEN_ENV, mirror.url)
        monkeypatch.setattr(J, "_maven_reachable", lambda *a: True)
        js = J.resolve_jars("auto")
    assert js.source == "maven" and js.jars == tuple(paths) and not js.packages
    assert paths[0].read_bytes() == good[paths[0]]
    assert len(mirror.requests) == 1  # only the tampered one


def test_auto_downloads_from_maven_when_reachable_and_no_cache(empty_cache, monkeypatch, tmp_path):
    pinned = dict(versions.MAVEN_SHA1)
    with serve(tmp_path / "mirror") as mirror:
        for artifact, version in versions.maven_artifacts(SPARK.minor, SPARK.scala, clouds="all"):
            pinned[(artifact, version)] = mirror.put(versions.GROUP, artifact, version, f"{artifact}".encode() * 999)
        monkeypatch.setattr(J, "MAVEN_SHA1", pinned)
        monkeypatch.setenv(_maven.MAVEN_ENV, mirror.url)
        monkeypatch.setattr(J, "_maven_reachable", lambda *a: True)
        messages: list[str] = []
        js = J.resolve_jars("auto", progress=messages.append)
        assert js.source == "maven"
        assert [p.name for p in js.jars] == [
            f"org.apache.iceberg_{a}-{v}.jar" for a, v in versions.maven_artifacts(SPARK.minor, SPARK.scala)
        ]
        assert not any("azure" in r or "gcp" in r for r in mirror.requests)  # S3 only: no cloud bundle fetched
        assert messages[0].startswith("downloading 2 jars (117 MB) from Maven Central")
        assert "done in" in messages[-1]
        assert (
            J.resolve_jars("auto", progress=messages.append, clouds="adls")
            .jars[-1]
            .name.startswith("org.apache.iceberg_iceberg-azure-bundle")
        )
        assert sum("azure" in r for r in mirror.requests) == 1 and not any("gcp" in r for r in mirror.requests)
        n = len(messages)
        assert J.resolve_jars("auto", progress=messages.append, clouds="adls").source == "cache"
        assert len(messages) == n  # a warm cache says nothing


def test_cache_mode_without_cache_names_the_fix(empty_cache):
    with pytest.raises(J.JarResolutionError, match="lakesession jars --mode maven"):
        J.resolve_jars("cache")


def test_maven_probe_is_bounded():
    start = time.monotonic()
    J._maven_reachable(timeout=0.5)
    assert time.monotonic() - start < 1.5


# --- Java -----------------------------------------------------------------------


def test_check_java_reports_a_version():
    version = J.check_java()
    assert int(version.split(".")[0]) in (17, 21)  # the Spark in use is 4.x: nothing else is supported


def _fake_java(bin_dir: Path, version: str) -> None:
    bin_dir.mkdir(parents=True)
    java = bin_dir / "java"
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2020-01-01' >&2\n")
    java.chmod(0o755)


def test_java_not_found(tmp_path, monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("LAKESESSION_JVM_DIRS", "")  # not the machine's /usr/lib/jvm either
    with pytest.raises(J.JavaNotFoundError, match="apt-get install -y openjdk-17-jre-headless"):
        J.check_java()
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(J.JavaNotFoundError, match="JAVA_HOME=.*nowhere has no bin/java"):
        J.check_java()
    assert issubclass(J.JavaNotFoundError, J.JarResolutionError)
    assert issubclass(J.JarResolutionError, RuntimeError)


def test_java_too_old_and_new_enough(tmp_path, monkeypatch):
    _fake_java(tmp_path / "old" / "bin", "1.8.0_392")
    _fake_java(tmp_path / "new" / "bin", "17.0.1")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "old"))
    monkeypatch.setenv("LAKESESSION_JVM_DIRS", str(tmp_path / "new"))
    with pytest.raises(
        J.JavaNotFoundError, match=r"Java 1.8.0_392; Spark 4\S+ runs on Java 17 or 21. Fix: set JAVA_HOME="
    ):
        J.check_java()
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "new"))
    assert J.check_java() == "17.0.1"


# --- class-file scanner -----------------------------------------------------------


def test_classfile_writer_matches_javac(tmp_path):
    data = _classscan.interface_class_bytes(_assemble.STANDIN_CLASS, _assemble.STANDIN_METHODS)
    info = _classscan.parse_class(data)
    assert info.name == _assemble.STANDIN_CLASS and info.major == 52
    assert info.refs == {
        "java/lang/Object",
        "java/io/IOException",
        "java/net/Socket",
        "java/lang/String",
        "org/apache/hc/core5/http/protocol/HttpContext",
        "javax/net/ssl/SSLSocket",
    }
    if shutil.which("javap"):
        target = tmp_path / "TlsSocketStrategy.class"
        target.write_bytes(data)
        out = subprocess.run(["javap", str(target)], capture_output=True, text=True, check=True)
        assert (
            "javax.net.ssl.SSLSocket upgrade(java.net.Socket, java.lang.String, int, "
            "java.lang.Object, org.apache.hc.core5.http.protocol.HttpContext) "
            "throws java.io.IOException;"
        ) in out.stdout


def test_standin_without_javac_uses_the_writer(tmp_path, monkeypatch):
    monkeypatch.setattr(_assemble, "_find_javac", lambda java: None)
    data, how = _assemble.standin_class("java", tmp_path / "unused.jar", tmp_path, lambda m: None)
    assert how == "classfile-writer"
    assert _classscan.parse_class(data).name == _assemble.STANDIN_CLASS


def test_parse_class_rejects_garbage():
    with pytest.raises(_classscan.ClassFormatError):
        _classscan.parse_class(b"not a class")
    with pytest.raises(_classscan.ClassFormatError):
        _classscan.parse_class(b"\xca\xfe\xba\xbe\x00\x00\x00\x34\x00\x09\x01")


def test_merge_jars_excludes_metadata(tmp_path):
    src = tmp_path / "lib-1.0.jar"
    with zipfile.ZipFile(src, "w") as zf:
        for name in (
            "META-INF/MANIFEST.MF",
            "META-INF/versions/9/module-info.class",
            "module-info.class",
            "META-INF/SIGN.SF",
            "META-INF/SIGN.RSA",
            "META-INF/maven/x/pom.xml",
            "META-INF/services/x.Y",
            "META-INF/LICENSE",
            "com/x/A.class",
            "com/x/res.properties",
        ):
            zf.writestr(name, b"x")
    dest = tmp_path / "merged.jar"
    _classscan.merge_jars([src, src], {"com/x/B.class": b"y"}, dest)
    with zipfile.ZipFile(dest) as zf:
        names = set(zf.namelist())
    assert names == {
        "META-INF/MANIFEST.MF",
        "META-INF/licenses/lib-1.0/LICENSE",
        "com/x/A.class",
        "com/x/res.properties",
        "com/x/B.class",
    }


# --- pinned downloads -------------------------------------------------------------


@pytest.mark.spark  # the offline assembly (Spark 3.5): runs in the pyspark 3.5 matrix environment
def test_sha256_mismatch_is_rejected(built, tmp_path, monkeypatch):
    pin = _assemble.JARJAR_DEB
    good = REAL_CACHE / "downloads" / pin.kind / pin.filename
    assert good.is_file()
    downloads = tmp_path / "downloads"
    cached = downloads / pin.kind / pin.filename
    cached.parent.mkdir(parents=True)
    data = bytearray(good.read_bytes())
    data[100] ^= 0xFF
    cached.write_bytes(bytes(data))
    with pytest.raises(J.JarResolutionError, match="sha256 mismatch"):
        _assemble.verify_sha256(cached, pin.sha256, "test")

    def corrupt_download(p, dest_dir, progress):
        out = dest_dir / p.filename
        out.write_bytes(bytes(data))
        return out

    monkeypatch.setitem(_assemble.DOWNLOADERS, "deb", corrupt_download)
    messages: list[str] = []
    with pytest.raises(J.JarResolutionError, match=r"sha256 mismatch for downloaded libjarjar"):
        _assemble.fetch(pin, downloads, messages.append)
    assert any("fails its sha256 check" in m for m in messages)
    assert not cached.exists()  # the corrupt copy was not kept

    def good_download(p, dest_dir, progress):
        return Path(shutil.copy(good, dest_dir / p.filename))

    cached.write_bytes(bytes(data))
    monkeypatch.setitem(_assemble.DOWNLOADERS, "deb", good_download)
    assert _assemble.fetch(pin, downloads) == cached
    assert _assemble.sha256_file(cached) == pin.sha256


# --- the assembled set ------------------------------------------------------------


@pytest.mark.spark  # the offline assembly (Spark 3.5): runs in the pyspark 3.5 matrix environment
def test_offline_assembly_manifest(built):
    assert built.jar_set.source in ("offline", "cache")
    assert built.jar_set.packages == ()
    m = built.manifest()
    assert m["format"] == 1 and m["key"] == built.dir.name
    assert m["key"] == _assemble.cache_key("2.12")
    v = m["versions"]
    assert v["iceberg"] == "1.10.2" and v["scala"] == "2.12" and v["aws_sdk"] == "2.29.26"
    assert v["spark"].startswith("3.5.")
    inputs = {i["name"]: i for i in m["inputs"]}
    for pin in _assemble.PINS:
        assert inputs[pin.filename]["sha256"] == pin.sha256
    for name, sha in _assemble.JACKSON_JARS.items():
        assert inputs[name]["sha256"] == sha
    files = [o["file"] for o in m["outputs"]]
    assert files[:2] == ["iceberg-spark-runtime-3.5_2.12-1.10.2.jar", _assemble.SHADED_JAR]
    assert set(files[2:]) == set(_assemble.AWS_JARS) and len(files) == 33
    assert [p.name for p in built.jar_set.jars] == files
    for out in m["outputs"]:
        path = built.dir / out["file"]
        assert path.stat().st_size == out["size"]
        assert _assemble.sha256_file(path) == out["sha256"]
    assert m["checks"]["unrelocated"] == 0 and m["checks"]["missing"] == 0
    assert _assemble.load_cache(built.dir, m["key"], verify_hashes=True)


@pytest.mark.spark  # the offline assembly (Spark 3.5): runs in the pyspark 3.5 matrix environment
def test_shaded_jar_has_no_unrelocated_classes(built):
    scan = _classscan.scan_jar(built.dir / _assemble.SHADED_JAR, _assemble.UNRELOCATED_PREFIXES)
    assert scan.class_count > 2000
    assert not [c for c in scan.defined if c.startswith(_assemble.UNRELOCATED_PREFIXES)]
    assert not [r for r in scan.refs if r.startswith(_assemble.UNRELOCATED_PREFIXES)]
    assert "org/apache/iceberg/shaded/org/apache/hc/client5/http/ssl/TlsSocketStrategy" in scan.defined
    assert "org/apache/iceberg/shaded/com/fasterxml/jackson/databind/ObjectMapper" in scan.defined


@pytest.mark.spark  # the offline assembly (Spark 3.5): runs in the pyspark 3.5 matrix environment
def test_classscan_finds_no_missing_relocated_class(built):
    prefix = (_assemble.SHADED_PREFIX,)
    runtime = _classscan.scan_jar(built.jar_set.jars[0], prefix)
    shaded = _classscan.scan_jar(built.dir / _assemble.SHADED_JAR, prefix)
    assert len(runtime.refs) > 1000
    # without the shaded jar, Jackson and httpclient5 are missing (the gap it fills)
    gap = _classscan.missing_references([runtime], [runtime])
    assert any("/jackson/" in r for r in gap) and any("/hc/client5/" in r for r in gap)
    assert _classscan.missing_references([runtime, shaded], [runtime, shaded]) == {}


@pytest.mark.spark  # the offline assembly (Spark 3.5): runs in the pyspark 3.5 matrix environment
def test_second_resolve_is_a_fast_cache_hit(use_built, monkeypatch):
    monkeypatch.setattr(J, "_maven_reachable", lambda *a: pytest.fail("must not probe Maven"))
    for mode in ("offline", "cache", "auto"):
        start = time.monotonic()
        js = J.resolve_jars(mode)
        elapsed = time.monotonic() - start
        assert js.source == "cache"
        assert js.jars == use_built.jar_set.jars
        assert elapsed < 1.0, f"cache hit took {elapsed:.3f} s"
    assert js.spark_conf()["spark.jars"].split(",") == [str(p) for p in js.jars]


@pytest.mark.spark  # the offline assembly (Spark 3.5): runs in the pyspark 3.5 matrix environment
def test_damaged_cache_is_not_a_hit(use_built, tmp_path):
    key = use_built.dir.name
    copy = tmp_path / key
    copy.mkdir()
    shutil.copy(use_built.dir / "manifest.json", copy)
    assert _assemble.load_cache(copy, key) is None  # outputs missing
    m = use_built.manifest()
    for out in m["outputs"]:
        (copy / out["file"]).symlink_to(use_built.dir / out["file"])
    assert _assemble.load_cache(copy, key) is not None
    assert _assemble.load_cache(copy, key + "x") is None
    m["outputs"][5]["size"] += 1
    (copy / "manifest.json").write_text(json.dumps(m))
    assert _assemble.load_cache(copy, key) is None
    (copy / "manifest.json").write_text("{not json")
    assert _assemble.load_cache(copy, key) is None


def test_file_lock_serializes(tmp_path):
    lock = tmp_path / "x.lock"
    order: list[str] = []
    with _assemble.file_lock(lock):

        def other():
            with _assemble.file_lock(lock):
                order.append("other")

        t = threading.Thread(target=other)
        t.start()
        time.sleep(0.2)
        order.append("first")
    t.join(5)
    assert order == ["first", "other"]


@pytest.mark.spark  # the offline assembly (Spark 3.5): runs in the pyspark 3.5 matrix environment
def test_jars_main_cli(use_built, capsys):
    assert J.jars_main(["--mode", "cache"]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines() == [str(p) for p in use_built.jar_set.jars]
    assert "33 jars from cache" in out.err
    assert J.jars_main(["--mode", "cache", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["source"] == "cache" and len(doc["jars"]) == 33
    assert doc["spark_conf"]["spark.jars"] == ",".join(doc["jars"])


def test_jars_main_errors(empty_cache, capsys):
    assert J.jars_main(["--mode", "cache"]) == 1
    assert "error: no verified cached jar set" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        J.jars_main(["--mode", "bogus"])


# --- a real Spark session -----------------------------------------------------------

SMOKE = textwrap.dedent("""
    import json, sys, threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    conf, warehouse = json.loads(sys.argv[1]), sys.argv[2]
    seen = []

    class Stub(BaseHTTPRequestHandler):  # the two REST endpoints the client touches
        def do_GET(self):
            seen.append(self.path.split("?")[0])
            if self.path.startswith("/v1/config"):
                body = {"defaults": {}, "overrides": {}}
            elif self.path.startswith("/v1/namespaces"):
                body = {"namespaces": [["smoke"]]}
            else:
                self.send_error(404)
                return
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    uri = f"http://127.0.0.1:{srv.server_address[1]}"

    from pyspark.sql import SparkSession
    builder = SparkSession.builder
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = (builder.master("local[1]").appName("lakesession-jars-smoke")
             .config("spark.sql.extensions",
                     "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
             .config("spark.sql.catalog.local", "org.apache.iceberg.spark.SparkCatalog")
             .config("spark.sql.catalog.local.type", "hadoop")
             .config("spark.sql.catalog.local.warehouse", warehouse)
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "1")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    try:
        spark.sql("CREATE TABLE local.db.t (id bigint, name string) USING iceberg")
        spark.sql("INSERT INTO local.db.t VALUES (1, 'a'), (2, 'b')")
        rows = [list(r) for r in spark.sql("SELECT id, name FROM local.db.t ORDER BY id").collect()]
        jvm = spark._jvm
        props = jvm.java.util.HashMap()
        props.put("uri", uri)
        jvm.org.apache.iceberg.rest.HTTPClient.builder(props).uri(uri).build().close()
        cat = jvm.org.apache.iceberg.rest.RESTCatalog()
        cat.initialize("smoke", props)
        namespaces = [str(n) for n in cat.listNamespaces()]
        cat.close()
        s3props = jvm.java.util.HashMap()
        s3props.put("client.region", "us-east-1")
        s3props.put("s3.endpoint", "http://127.0.0.1:9")
        io = jvm.org.apache.iceberg.aws.s3.S3FileIO()
        io.initialize(s3props)
        s3client = io.client().getClass().getName()
        io.close()
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        tls = loader.loadClass("org.apache.iceberg.shaded.org.apache.hc.client5.http.ssl."
                               "TlsSocketStrategy").getName()
        print("RESULT " + json.dumps({"rows": rows, "namespaces": namespaces, "paths": seen,
                                      "s3client": s3client, "tls": tls}), flush=True)
    finally:
        spark.stop()
        srv.shutdown()
""")


def run_smoke(conf: dict[str, str], tmp_path: Path) -> dict:
    """CREATE/INSERT/SELECT through Iceberg, plus the REST client and S3FileIO classes via py4j."""
    script = tmp_path / "smoke.py"
    script.write_text(SMOKE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    proc = subprocess.run(
        [sys.executable, str(script), json.dumps(conf), str(tmp_path / "warehouse")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-4000:]
    result = json.loads(lines[0][len("RESULT ") :])
    assert result["rows"] == [[1, "a"], [2, "b"]]
    assert result["namespaces"] == ["smoke"]
    assert result["paths"] == ["/v1/config", "/v1/namespaces"]
    assert result["s3client"]
    assert result["tls"].endswith("TlsSocketStrategy")
    assert (tmp_path / "warehouse" / "db" / "t" / "metadata").is_dir()
    return result


@pytest.mark.slow
@pytest.mark.spark
def test_spark_session_with_assembled_jars(built, tmp_path):
    run_smoke(built.jar_set.spark_conf(), tmp_path)


@pytest.mark.slow
@pytest.mark.spark
def test_spark_session_with_maven_jars(tmp_path, monkeypatch):
    """The pinned jars from Maven Central in lakesession's cache (``<cache>/maven``) as ``spark.jars``:
    they then count as a verified cache (Maven Central's sha1) for mode "auto"."""
    monkeypatch.setenv(J.CACHE_ENV, str(REAL_CACHE))  # the real cache: Maven is fetched once per machine
    js = J.resolve_jars("maven")
    assert {p.parent for p in js.jars} == {REAL_CACHE / "maven"} and not js.packages
    run_smoke(js.spark_conf(), tmp_path)
    cached = J._maven_cached(SPARK, ())  # (under Spark 3.5 "cache" mode may prefer an offline set)
    assert cached is not None and cached.source == "cache"
    assert [p.name for p in cached.jars] == [
        f"org.apache.iceberg_{a}-{v}.jar" for a, v in versions.maven_artifacts(SPARK.minor, SPARK.scala)
    ]


def test_an_unsupported_java_on_path_gives_way_to_a_supported_one_in_the_jvm_folders(tmp_path, monkeypatch):
    """Java 25 first on PATH (Spark 4.1 dies on it at start): the check picks a Java 17 from the usual folders and
    gives it to Spark as JAVA_HOME, instead of accepting any "11+" as it did."""
    from lakesession._spark import _java

    _fake_java(tmp_path / "path" / "bin", "25.0.3")
    _fake_java(tmp_path / "jvm" / "jdk-17" / "bin", "17.0.9")
    _fake_java(tmp_path / "jvm" / "jdk-21" / "bin", "21.0.4")
    # check_java() below sets JAVA_HOME itself: record the machine's value first (a delenv of an unset variable
    # records nothing, and the fake JDK would then outlive the test: later tests' JVMs were this shell script)
    monkeypatch.setenv("JAVA_HOME", "unset-below")
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path / "path" / "bin"))
    monkeypatch.setenv("LAKESESSION_JVM_DIRS", str(tmp_path / "jvm" / "*"))
    found = _java.find_java("4.1.4")
    assert found.major == 17 and found.home == str(tmp_path / "jvm" / "jdk-17")  # 17 before 21: Spark's first
    assert J.check_java() == "17.0.9" and os.environ["JAVA_HOME"] == str(tmp_path / "jvm" / "jdk-17")
    monkeypatch.delenv("JAVA_HOME")
    assert _java.find_java("3.5.4").major == 17 and _java.supported("3.5.4") == (17, 11, 8)
    monkeypatch.setenv("LAKESESSION_JVM_DIRS", str(tmp_path / "nothing-here"))
    with pytest.raises(J.JavaNotFoundError) as err:
        _java.find_java("4.1.4")
    said = str(err.value)
    assert "is Java 25.0.3" in said and "Spark 4.1.4 runs on Java 17 or 21" in said and "\n" not in said
