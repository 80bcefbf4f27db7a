"""A new user's first start, for real: an empty cache, Maven Central, the Spark JVM (issue #33).

``lakesession.spark(comet=True)`` (Spark 4.1; ``comet=False`` on the other lines) on the embedded default
(S3 only), in a child process with a throwaway ``LAKESESSION_CACHE_DIR``: it must download no Azure or GCP
bundle, store each jar once, put each on the JVM's class path once, show progress for every download
(Comet's 99 MB jar included), and still run a query on an Iceberg table. Before this, the same start
downloaded 500 MB (300 MB of it silently) into a 701 MB cache in 48 s; now 218 MB, 2 progress lines, ~24 s.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from lakesession._spark import comet, versions
from lakesession._spark.jars import detect_spark

pytestmark = [pytest.mark.slow, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
SPARK = detect_spark()
COMET = SPARK.minor in comet.MAVEN_COMET  # Comet 1.2.0 exists for Spark 4.1 only
RAW = SPARK.minor in comet.HADOOP_FOR_SPARK  # S3A for raw paths: the embedded default offers location credentials


def _beyond_iceberg() -> set[str]:
    """The jars this line's start adds to Iceberg's: S3A's (hadoop-aws, the AWS SDK modules it needs) and Comet's."""
    if not RAW:
        return set()
    coords = [("org.apache.hadoop", "hadoop-aws", comet.HADOOP_FOR_SPARK[SPARK.minor])]
    if comet.takes_sdk_v1(SPARK.minor):  # Hadoop 3.3 (Spark 3.5): the AWS SDK v1 modules S3A loads
        coords += comet.SDK_V1_JARS
    else:
        sdk = comet.SDK_FOR_ICEBERG[versions.MAVEN_ICEBERG[SPARK.minor][SPARK.scala]]
        coords += [
            ("software.amazon.awssdk", "apache-client", sdk),
            ("software.amazon.awssdk", "s3-transfer-manager", sdk),
        ]
    if COMET:
        coords.append(("org.apache.datafusion", f"comet-spark-spark{SPARK.minor}_{SPARK.scala}", "1.2.0"))
    return {versions.jar_name(*c) for c in coords}


@pytest.fixture(scope="module")
def cold(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("cold")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESESSION_")}
    env.update(
        LAKESESSION_CACHE_DIR=str(root / "cache"),
        LAKESESSION_HOME=str(root / "home"),
        LAKESESSION_JVM_CLASS_CACHE="0",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
    )
    child = Path(__file__).with_name("_cold_start_child.py")
    proc = subprocess.run(
        [sys.executable, str(child), "comet" if COMET else "plain"],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["stderr"], result["cache"] = proc.stderr, root / "cache"
    return result


def _sha1(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()


def test_first_start_downloads_no_cloud_bundle_and_runs_a_query(cold: dict[str, Any]) -> None:
    assert cold["rows"] == 3
    jars = list(cold["cache"].rglob("*.jar"))
    names = {p.name for p in jars}
    assert not [n for n in names if "azure" in n or "gcp" in n]
    expected = {versions.jar_name(versions.GROUP, a, v) for a, v in versions.maven_artifacts(SPARK.minor, SPARK.scala)}
    expected |= _beyond_iceberg()
    assert names == expected
    downloaded = sum(p.stat().st_size for p in jars)
    print(f"cold start: {len(jars)} jars, {downloaded / 1e6:.0f} MB, {cold['seconds']:.1f} s")
    assert downloaded == sum(versions.JAR_BYTES[(g, a, v)] for g, a, v in _coords(expected))


def _coords(names: set[str]) -> list[tuple[str, str, str]]:
    return [c for c in versions.JAR_BYTES if versions.jar_name(*c) in names]


def test_each_jar_is_stored_once(cold: dict[str, Any]) -> None:
    jars = list(cold["cache"].rglob("*.jar"))
    by_name = Counter(p.name for p in jars)
    by_sha = Counter(_sha1(p) for p in jars)
    assert jars and max(by_name.values()) == 1 and max(by_sha.values()) == 1, (by_name, by_sha)
    assert not (cold["cache"] / "ivy").exists()  # Spark's Ivy kept two more copies of each


def test_each_jar_is_on_the_class_path_once(cold: dict[str, Any]) -> None:
    entries = [Path(p) for p in cold["class_path"].split(os.pathsep) if p.endswith(".jar")]
    # Spark's own launcher lists pyspark's slf4j-api twice (Spark's doing, not a jar lakesession adds)
    spark_own = {p.name for p in entries if p.parent == SPARK.jars_dir}
    system = [p.name for p in entries if p.parent != SPARK.jars_dir]
    added = [Path(j.split("/")[-1]).name for j in cold["added_jars"]]  # spark.jars, served to the executors
    assert system or added, cold  # on the driver's class path (Comet) or in spark.jars (the other lines)
    assert max(Counter(system).values(), default=1) == 1, system
    assert not set(system) & spark_own
    assert not set(system) & set(added), set(system) & set(added)
    assert max(Counter(added).values(), default=1) == 1
    ours = [n for n in system + added if n.startswith(versions.GROUP)]
    assert sorted(ours) == sorted(
        versions.jar_name(versions.GROUP, a, v) for a, v in versions.maven_artifacts(SPARK.minor, SPARK.scala)
    )


def test_every_download_shows_progress(cold: dict[str, Any]) -> None:
    lines = [line for line in cold["stderr"].splitlines() if line.startswith("lakesession: downloading")]
    done = [line for line in lines if "done in" in line]
    assert len(done) == (2 if RAW else 1), cold["stderr"][-3000:]  # Iceberg's, then S3A's (and Comet's)
    assert "(117 MB)" in done[0] if SPARK.minor == "4.1" else done[0]
    if COMET:
        assert "(100 MB)" in done[1]  # Comet's own jar and S3A's: 99 MB + 1 MB
    assert "resolving" not in cold["stderr"]  # no Ivy resolution any more
