"""lakesession's JVM provider (the committed jar) driven as Comet drives it, against a real gateway and catalog.

No Spark: a small Java harness (``tests/java/ProviderHarness.java``, compiled here with the JDK's javac)
calls ``CometCredentialProvider`` from 8 threads at once, then with an ungranted path, a wrong session
secret, and after ``close()``. The gateway's access log and the store are the ground truth.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakesession._spark import comet
from lakesession.gateway import Gateway
from lakesession.reference import ReferenceCatalog
from tests.factories import Policy, make_catalog

pytestmark = pytest.mark.slow  # a catalog, the S3 emulator and a JVM (no Spark)

POLICY = (
    Policy()
    .user("alice", "alice-secret-xyz", role="readers")
    .location("s3://prov-raw/landing/", "s3://prov-raw/secret/")
    .grant("readers", "LOCATION_READ", "location s3://prov-raw/landing/")
)


@pytest.fixture(scope="module")
def cat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    with make_catalog(
        POLICY, bucket="prov-wh", credential_ttl=900, data_dir=tmp_path_factory.mktemp("provider")
    ) as handle:
        yield handle


def test_provider_single_flight_min_life_refusals_and_no_secret_in_messages(
    cat: ReferenceCatalog, tmp_path: Path
) -> None:
    javac = shutil.which("javac")
    assert javac, (
        "javac (a JDK) is needed to compile tests/java/ProviderHarness.java: apt-get install openjdk-17-jdk-headless"
    )
    class_path = f"{comet.provider_jar()}:{comet.fetch('org.apache.datafusion', 'comet-spark-spark4.1_2.13', '1.2.0')}"
    source = Path(__file__).parents[1] / "java" / "ProviderHarness.java"
    subprocess.run([javac, "--release", "17", "-d", str(tmp_path), "-cp", class_path, str(source)], check=True)
    with Gateway(cat.uri, lambda: cat.admin.token_for("alice")) as gw:
        out = subprocess.run(
            [
                "java",
                "-cp",
                f"{tmp_path}:{class_path}",
                "ProviderHarness",
                gw.uri,
                gw.secret,
                "prov-raw",
                "landing/2026/a.parquet",
                "secret/b.parquet",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        ).stdout
        facts = dict(line.split(" ", 1) for line in out.splitlines())
        assert facts["policy"] == "[landing]"  # Comet's format: keys within the bucket
        assert facts["keys"].startswith("1 ASIA")  # 8 concurrent callers, one credential
        assert facts["gatewaycalls"] == "1"  # single flight: one gateway round trip
        assert facts["providercalls"] == "8"
        assert int(facts["minleft"]) >= 40  # never less than the reader's deadline + margin
        assert "prov-raw/secret/b.parquet" in facts["denied"] and "HTTP 403" in facts["denied"]
        assert "HTTP 401" in facts["wrongsecret"]
        assert "closed" in facts["closed"]
        for text in out.splitlines():
            assert gw.secret not in text and "not-the-session-secret" not in text
        records = [r for r in gw.access_log.records(0) if r.action == "path_credentials"]
        assert sum(r.count for r in records) >= 1
        key = facts["keys"].split(" ")[1]
        policy = str(cat.s3_emulator._realm.sessions[key].policy)
        assert "prov-raw/landing/" in policy and "secret" not in policy
