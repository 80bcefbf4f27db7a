"""Project Nessie (the ``nessie-quarkus`` runner jar from Maven Central) on loopback, for the interop tests.

Nessie is an Iceberg REST catalog nobody here wrote. The harness runs it with an in-memory version
store, one warehouse on an S3 store the test started, per-table STS credentials (``client-iam``:
Nessie assumes a role with a session policy naming the table's location) and OIDC authentication
against an issuer the test names: Quarkus fetches the issuer's discovery document and JWKS and
validates every bearer token itself (signature, ``iss``, ``aud``, expiry).

The jar (an über-jar, ~245 MB, Java 21 bytecode) is downloaded once into ``$LAKESESSION_CACHE_DIR/nessie/``,
checked against the SHA-1 Maven Central publishes beside it, and renamed into place atomically.
All configuration, the store's key included, goes into ``config/application.properties`` (mode 0600)
in the working directory, never onto the command line (``ps`` shows that).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from lakesession._spark.jars import cache_dir
from tests.factories import free_port, stop_process
from tests.support import java_major

NESSIE_VERSION = "0.99.0"
JAR_NAME = f"nessie-quarkus-{NESSIE_VERSION}-runner.jar"
MAVEN_URL = f"https://repo1.maven.org/maven2/org/projectnessie/nessie/nessie-quarkus/{NESSIE_VERSION}/{JAR_NAME}"
MIN_JAVA = 21
WAREHOUSE = "warehouse"  # Nessie's warehouse name: what clients pass as ``warehouse``
SECRET_PREFIX = "lakesession-test-secrets.s3"  # the Quarkus keys holding the store's key pair
TEST_JVM_OPTIONS = ("-Xmx512m", "-XX:TieredStopAtLevel=1")  # quick start, C1 only: for short tests
SERVER_JVM_OPTIONS = ("-Xmx1g",)  # the JVM's defaults (C2 after warm-up), as a deployment runs it


@dataclass(frozen=True)
class Nessie:
    base: str  # http://127.0.0.1:<port>
    management: str  # http://127.0.0.1:<management port> (health)
    log: Path

    @property
    def iceberg_uri(self) -> str:
        """What ``lakesession.connect(uri=...)`` and pyiceberg take: Nessie's Iceberg REST root."""
        return f"{self.base}/iceberg"

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"


def nessie_jar(timeout: float = 600.0) -> Path:
    """The cached runner jar, downloaded and verified when missing (fails loudly, never skips)."""
    target = cache_dir() / "nessie" / JAR_NAME
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    expected = httpx.get(f"{MAVEN_URL}.sha1", timeout=60, follow_redirects=True)
    expected.raise_for_status()
    want = expected.text.split()[0].strip().lower()
    part = target.with_name(f"{JAR_NAME}.{os.getpid()}.part")
    digest = hashlib.sha1(usedforsecurity=False)  # Maven Central publishes SHA-1: integrity, not security
    try:
        with httpx.stream("GET", MAVEN_URL, timeout=timeout, follow_redirects=True) as response:
            response.raise_for_status()
            with part.open("wb") as out:
                for chunk in response.iter_bytes(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
        if digest.hexdigest() != want:
            raise RuntimeError(f"{MAVEN_URL}: SHA-1 {digest.hexdigest()} does not match the published {want}")
        os.replace(part, target)  # atomic: a concurrent run sees the whole jar or none
    finally:
        part.unlink(missing_ok=True)
    return target


def java_for_nessie() -> str:
    """A Java 21+ runtime: Nessie 0.99's classes are Java 21 bytecode (class file 65), despite its notes
    saying 17. ``$NESSIE_JAVA``, then ``$JAVA_HOME``, ``java`` on PATH, then the JDKs under /usr/lib/jvm."""
    candidates = [os.environ.get("NESSIE_JAVA"), shutil.which("java")]
    if home := os.environ.get("JAVA_HOME"):
        candidates.insert(1, str(Path(home) / "bin" / "java"))
    candidates += [str(p) for p in sorted(Path("/usr/lib/jvm").glob("*/bin/java"))]
    seen: list[str] = []
    for java in candidates:
        if not java or java in seen or not Path(java).is_file():
            continue
        seen.append(java)
        if java_major(java) >= MIN_JAVA:
            return java
    raise RuntimeError(
        f"Nessie {NESSIE_VERSION} needs Java {MIN_JAVA}+; found only {seen or 'no java'}. "
        "Fix: install a JDK 21+ (e.g. Temurin) under /usr/lib/jvm, or point $NESSIE_JAVA at its bin/java."
    )


def nessie_properties(
    *,
    issuer: str,
    audience: str,
    s3_endpoint: str,
    region: str,
    bucket: str,
    access_key: str,
    secret_key: str,
    role_arn: str,
    credential_ttl: int,
) -> dict[str, str]:
    """Nessie 0.99's settings for: OIDC against ``issuer``, one warehouse on ``bucket``, STS vending."""
    s3 = "nessie.catalog.service.s3.default-options"
    return {
        "nessie.version.store.type": "IN_MEMORY",
        # authentication: Quarkus OIDC, a bearer-token service validating JWTs by discovery + JWKS
        "nessie.server.authentication.enabled": "true",
        "quarkus.oidc.auth-server-url": issuer,
        "quarkus.oidc.client-id": "nessie",
        "quarkus.oidc.application-type": "service",
        "quarkus.oidc.token.audience": audience,
        "quarkus.oidc.token.issuer": issuer,
        # the warehouse and its store
        "nessie.catalog.default-warehouse": WAREHOUSE,
        f"nessie.catalog.warehouses.{WAREHOUSE}.location": f"s3://{bucket}/",
        f"{s3}.endpoint": s3_endpoint,
        f"{s3}.path-style-access": "true",
        f"{s3}.region": region,
        f"{s3}.auth-type": "STATIC",
        f"{s3}.access-key": f"urn:nessie-secret:quarkus:{SECRET_PREFIX}",
        f"{SECRET_PREFIX}.name": access_key,
        f"{SECRET_PREFIX}.secret": secret_key,
        f"{s3}.sts-endpoint": s3_endpoint,
        # per-table credentials: AssumeRole with a session policy on the table's location
        f"{s3}.client-iam.enabled": "true",
        f"{s3}.client-iam.assume-role": role_arn,
        f"{s3}.client-iam.role-session-name": "nessie-vended",
        f"{s3}.client-iam.session-duration": f"PT{credential_ttl}S",
        # quiet, and no outbound calls
        "quarkus.log.console.level": "INFO",
        "quarkus.otel.sdk.disabled": "true",
        "quarkus.http.access-log.enabled": "false",
    }


def _write_properties(path: Path, props: Mapping[str, str]) -> None:
    """``application.properties`` readable by its owner only (it holds the store's key pair)."""
    path.parent.mkdir(parents=True, exist_ok=True)

    def esc(value: str) -> str:
        return value.replace("\\", "\\\\").replace("\n", "\\n")

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.writelines(f"{key}={esc(value)}\n" for key, value in props.items())


@contextmanager
def nessie(
    workdir: Path,
    properties: Mapping[str, str],
    *,
    timeout: float = 120.0,
    jvm_options: Sequence[str] = TEST_JVM_OPTIONS,
) -> Iterator[Nessie]:
    """Run Nessie in ``workdir`` with ``properties`` until the block ends; waits for ``/q/health/ready``.

    ``jvm_options``: the tests' default starts fast (C1 only); a benchmark passes ``SERVER_JVM_OPTIONS``."""
    java = java_for_nessie()
    jar = nessie_jar()
    workdir.mkdir(parents=True, exist_ok=True)
    port, management = free_port(), free_port()
    _write_properties(
        workdir / "config" / "application.properties",
        {
            **properties,
            "quarkus.http.host": "127.0.0.1",
            "quarkus.http.port": str(port),
            "quarkus.management.host": "127.0.0.1",
            "quarkus.management.port": str(management),
        },
    )
    log_path = workdir / "nessie.log"
    log = log_path.open("wb")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "QUARKUS_", "NESSIE_"))}
    proc = subprocess.Popen(
        [java, *jvm_options, "-jar", str(jar)],
        cwd=workdir,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    handle = Nessie(base=f"http://127.0.0.1:{port}", management=f"http://127.0.0.1:{management}", log=log_path)
    started = time.monotonic()
    try:
        deadline = started + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"Nessie exited with {proc.returncode} while starting:\n{handle.log_tail()}")
            try:
                if httpx.get(f"{handle.management}/q/health/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"Nessie was not ready within {timeout} s:\n{handle.log_tail()}")
            time.sleep(0.5)
        yield handle
    finally:
        stop_process(proc, 20)
        log.close()
