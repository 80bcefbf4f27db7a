"""Hadoop S3A with a union too large for one key (issue #40, B1), the real JVM S3A path without Spark.

A small Java harness (``tests/java/S3AUnionHarness.java``, compiled here) opens an ``S3AFileSystem`` wired as
lakesession wires a session (``S3ACredentialsProvider``, ``GrantCheckInterceptor``, ``GatewayS3ClientFactory``,
the committed jar, hadoop-aws and the AWS SDK v2 Spark uses) against a real gateway, catalog and S3 emulator.
64 granted locations of 31-60 characters in one bucket need several keys: S3A must read (and write) a
prefix of the first key and of the last key, each request signed with the key covering it, and still be
refused ``<prefix>_archive/`` and anything else ungranted.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyspark
import pytest

from lakesession._spark import comet
from lakesession.gateway import Gateway
from lakesession.reference import ReferenceCatalog
from tests.factories import Policy, make_catalog

pytestmark = pytest.mark.slow  # a catalog, the S3 emulator and a JVM (no Spark session)

W = "s3a-wide"
NAMES = [f"landing/dept-{i:02d}/feed-{'x' * 40}"[: 31 + (i * 29) // 63] for i in range(64)]
POLICY = Policy().user("alice", "alice-s3a-40", role="readers")
POLICY.location(*(f"s3://{W}/{n}/" for n in NAMES), *(f"s3://{W}/{n}_archive/" for n in NAMES))
for _n in NAMES:
    POLICY.grant("readers", "LOCATION_WRITE", f"location s3://{W}/{_n}/")


@pytest.fixture(scope="module")
def cat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    with make_catalog(POLICY, bucket="s3a-wh", credential_ttl=900, data_dir=tmp_path_factory.mktemp("s3a40")) as h:
        admin = h.s3_emulator.client()
        for n in (*NAMES, *(f"{n}_archive" for n in NAMES)):
            admin.put_object(Bucket=W, Key=f"{n}/part-0.txt", Body=n.encode())
        yield h


def _class_path(tmp: Path) -> str:
    javac = shutil.which("javac")
    assert javac, "javac (a JDK) is needed to compile tests/java/S3AUnionHarness.java"
    jars = comet.resolve("4.1", "2.13", comet=False)
    spark_jars = Path(pyspark.__file__).parent / "jars"
    cp = ":".join([str(jars.provider), *(str(p) for p in jars.raw[1:]), f"{spark_jars}/*"])
    source = Path(__file__).parents[1] / "java" / "S3AUnionHarness.java"
    subprocess.run([javac, "--release", "17", "-d", str(tmp), "-cp", cp, str(source)], check=True)
    return f"{tmp}:{cp}"


def test_s3a_reads_and_writes_through_several_keys_of_one_bucket(cat: ReferenceCatalog, tmp_path: Path) -> None:
    cp = _class_path(tmp_path)
    with Gateway(cat.uri, lambda: cat.admin.token_for("alice")) as gw:
        auth = {"Authorization": f"Bearer {gw.secret}"}
        answer = httpx.get(f"{gw.uri}/lakesession/bucket-credentials", params={"bucket": W}, headers=auth, timeout=60)
        assert answer.status_code == 200, answer.text[:300]
        by_key: dict[str, list[str]] = {}
        for e in answer.json()["storage-credentials"]:
            by_key.setdefault(e["config"]["s3.access-key-id"], []).append(e["prefix"].split(f"{W}/", 1)[1])
        groups = list(by_key.values())
        assert len(groups) > 1 and sum(map(len, groups)) == 64
        first, last = groups[0][0].rstrip("/"), groups[-1][-1].rstrip("/")
        steps = [
            f"read:{first}/part-0.txt",
            f"read:{last}/part-0.txt",
            f"list:{last}",
            f"write:{first}/out.txt",
            f"write:{last}/out.txt",
            f"read:{last}/out.txt",
            f"rename:{last}/out.txt|{last}/moved.txt",
            f"read:{last}/moved.txt",
            f"deny:{last}_archive/part-0.txt",
            f"denywrite:{first}_archive/out.txt",
            "deny:landing/other/part-0.txt",
        ]
        out = subprocess.run(
            ["java", "-cp", cp, "S3AUnionHarness", gw.uri, gw.secret, W, *steps],
            capture_output=True,
            text=True,
            timeout=300,
        )
        lines = out.stdout.splitlines()
        facts = {" ".join(line.split(" ", 2)[:2]): line.split(" ", 2)[2] for line in lines if line.count(" ") >= 2}
        assert facts.get(f"read {first}/part-0.txt") == first, (out.stdout, out.stderr[-2000:])
        assert facts.get(f"read {last}/part-0.txt") == last, out.stdout  # the last key's subset, via S3A
        assert facts.get(f"list {last}") == "1", out.stdout
        assert facts.get(f"write {first}/out.txt") == "ok" and facts.get(f"write {last}/out.txt") == "ok", out.stdout
        assert facts.get(f"read {last}/out.txt") == f"written {last}/out.txt", out.stdout
        assert facts.get(f"rename {last}/out.txt|{last}/moved.txt") == "true", out.stdout  # CopyObject, checked
        assert facts.get(f"read {last}/moved.txt") == f"written {last}/out.txt", out.stdout
        assert facts[f"deny {last}_archive/part-0.txt"].startswith("FAILED AccessDeniedException"), out.stdout
        assert facts[f"denywrite {first}_archive/out.txt"].startswith("FAILED AccessDeniedException"), out.stdout
        assert facts["deny landing/other/part-0.txt"].startswith("FAILED"), out.stdout
        assert gw.secret not in out.stdout + out.stderr
    admin = cat.s3_emulator.client()
    assert admin.get_object(Bucket=W, Key=f"{last}/moved.txt")["Body"].read() == f"written {last}/out.txt".encode()
    assert "Contents" not in admin.list_objects_v2(Bucket=W, Prefix=f"{first}_archive/out.txt")
