"""The local Spark JVM's class-data-sharing archive: written once, proven before use, never trusted blindly.

Unit tests drive ``_classcache`` with a real ``java`` (a real archive dumped by ``java -version``);
the Spark test launches two cold JVMs through ``lakesession.spark()`` and reads ``/proc/<pid>/maps``
to see the second one map the archive the first one wrote.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from lakesession._spark import _classcache
from lakesession._spark.jars import cache_dir, check_java, java_executable
from tests.support import dump_class_archive, fake_spark_home, run_cold_child

JAVA = java_executable()
VERSION = check_java()


def _key_files(root: Path) -> list[str]:
    return sorted(p.suffix for p in (root / "classcache").iterdir())


@pytest.fixture(scope="module")
def real_dump(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The bytes of a complete archive, as a JVM writes it at exit."""
    return dump_class_archive(tmp_path_factory.mktemp("dump") / "a.jsa")


@pytest.fixture()
def spark_home(tmp_path: Path) -> Path:
    return fake_spark_home(tmp_path)


def _plan(cache: Path, home: Path, conf: dict[str, str] | None = None) -> _classcache.Plan:
    return _classcache.plan(conf or {}, JAVA, VERSION, str(home), cache)


def _settle(dump: Path) -> None:
    old = time.time() - _classcache.SETTLED - 1
    os.utime(dump, (old, old))


def test_first_launch_writes_the_archive_at_exit_and_a_second_does_not_also(tmp_path: Path, spark_home: Path) -> None:
    first = _plan(tmp_path, spark_home)
    assert first.archive is None and first.claim is not None
    assert f"-XX:ArchiveClassesAtExit={first.claim.with_suffix('.dump')}" in first.options
    assert "-Xlog:cds*=off" in first.options  # the dump's per-class warnings stay out of the user's terminal
    # this process (the claimant) is alive: another launch meanwhile neither maps nor writes an archive
    assert _plan(tmp_path, spark_home) == _classcache.Plan()


def test_a_complete_dump_is_proven_then_mapped(tmp_path: Path, spark_home: Path, real_dump: bytes) -> None:
    first = _plan(tmp_path, spark_home)
    assert first.claim is not None
    _classcache.launched(first, 2**22 + 12345)  # a JVM pid that is not running: the writer has exited
    first.claim.with_suffix(".dump").write_bytes(real_dump)
    second = _plan(tmp_path, spark_home)
    assert second.archive is not None and second.archive.read_bytes() == real_dump
    assert second.options.startswith(f"-XX:SharedArchiveFile={second.archive} -Xshare:auto")
    assert _key_files(tmp_path) == [".jsa"]  # dump promoted, claim gone


def test_a_truncated_dump_would_crash_the_jvm_so_it_is_dropped(
    tmp_path: Path, spark_home: Path, real_dump: bytes
) -> None:
    truncated = tmp_path / "t.jsa"
    truncated.write_bytes(real_dump[: len(real_dump) // 3])
    crashed = subprocess.run(
        [JAVA, f"-XX:SharedArchiveFile={truncated}", "-Xshare:auto", "-version"], capture_output=True, cwd=tmp_path
    )
    assert crashed.returncode != 0  # why a dump must be proven before any JVM is told to map it

    first = _plan(tmp_path, spark_home)
    assert first.claim is not None
    dump = first.claim.with_suffix(".dump")
    dump.write_bytes(real_dump[: len(real_dump) // 3])  # the machine stopped mid-dump
    _settle(dump)
    again = _plan(tmp_path, spark_home)
    assert again.archive is None
    assert not dump.exists()
    assert not list(Path.cwd().glob("hs_err_pid*.log")) and not list(dump.parent.glob("*hs_err*"))  # no crash report
    assert again.claim is not None  # this launch writes a fresh one instead


def test_a_dump_still_being_written_is_left_alone(tmp_path: Path, spark_home: Path, real_dump: bytes) -> None:
    first = _plan(tmp_path, spark_home)
    assert first.claim is not None
    _classcache.launched(first, os.getpid())  # the writing JVM still runs
    dump = first.claim.with_suffix(".dump")
    dump.write_bytes(real_dump[:1000])
    assert _plan(tmp_path, spark_home) == _classcache.Plan()
    assert dump.exists()


def test_the_key_follows_the_jars(tmp_path: Path, spark_home: Path) -> None:
    extra = tmp_path / "iceberg.jar"
    extra.write_bytes(b"v1")
    conf = {"spark.jars": str(extra)}
    key = _classcache.archive_key(conf, JAVA, VERSION, str(spark_home))
    assert key == _classcache.archive_key(conf, JAVA, VERSION, str(spark_home))
    extra.write_bytes(b"v2, longer")
    assert _classcache.archive_key(conf, JAVA, VERSION, str(spark_home)) != key
    assert _classcache.archive_key({**conf, "spark.jars.packages": "g:a:1"}, JAVA, VERSION, str(spark_home)) != key
    assert _classcache.archive_key(conf, JAVA, "99.0.1", str(spark_home)) != key


@pytest.mark.parametrize(
    ("env", "conf"),
    [
        ({_classcache.ENV: "0"}, {}),
        ({}, {"spark.driver.extraJavaOptions": "-Xshare:off"}),
        ({}, {"spark.driver.extraJavaOptions": "-XX:SharedArchiveFile=/opt/mine.jsa"}),
    ],
)
def test_off_when_asked_or_when_the_user_manages_sharing(
    tmp_path: Path, spark_home: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], conf: dict[str, str]
) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert _plan(tmp_path, spark_home, conf) == _classcache.Plan()
    assert not (tmp_path / "classcache").exists()


@pytest.mark.parametrize("old", ["11.0.22", "1.8.0_392"])
def test_off_on_a_java_without_dynamic_archives(tmp_path: Path, spark_home: Path, old: str) -> None:
    assert _classcache.plan({}, JAVA, old, str(spark_home), tmp_path) == _classcache.Plan()
    assert _classcache.plan({}, JAVA, "21.0.5", str(spark_home), tmp_path).claim is not None


def test_an_unwritable_cache_only_costs_speed(tmp_path: Path, spark_home: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert _plan(blocker, spark_home) == _classcache.Plan()


def test_options_are_added_to_the_users_driver_options() -> None:
    merged = _classcache.with_options({"spark.driver.extraJavaOptions": "-Dmine=1"}, "-XX:SharedArchiveFile=/a")
    assert merged["spark.driver.extraJavaOptions"] == "-Dmine=1 -XX:SharedArchiveFile=/a"
    assert _classcache.with_options({}, "") == {}


CHILD = """
import json, sys
import lakesession
spark = lakesession.spark(data_dir=sys.argv[1], spark_conf={"spark.ui.enabled": "false"})
assert spark.sql("SELECT 1").collect()[0][0] == 1
pid = spark.sparkContext._gateway.proc.pid
maps = open(f"/proc/{pid}/maps").read()
print(json.dumps({"mapped": sorted({line.split()[-1] for line in maps.splitlines() if line.endswith(".jsa")}),
                  "options": spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")}))
"""


@pytest.mark.slow
@pytest.mark.spark
def test_the_second_cold_start_maps_the_archive_the_first_one_wrote(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    for entry in cache_dir().iterdir():  # the suite's jars and Ivy cache, not its archives
        if entry.name != "classcache":
            (cache / entry.name).symlink_to(entry)

    def launch() -> dict[str, list[str]]:
        result, stderr = run_cold_child(CHILD, tmp_path, LAKESESSION_CACHE_DIR=str(cache))
        assert "cds" not in stderr.lower()  # no JVM chatter about the archive
        return result

    first = launch()
    mine = lambda mapped: [m for m in mapped if m.startswith(str(cache))]  # noqa: E731 (not the JDK's base archive)
    assert mine(first["mapped"]) == [] and "ArchiveClassesAtExit" in str(first["options"])
    _classcache.settle(cache)
    assert list((cache / "classcache").glob("*.dump")), "the first JVM wrote its archive at exit"
    second = launch()
    archives = [str(p) for p in (cache / "classcache").glob("*.jsa")]
    assert len(archives) == 1 and mine(second["mapped"]) == archives
