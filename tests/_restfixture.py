"""Apache Iceberg's REST catalog fixture on loopback: the plain spec reference, as an independent catalog.

``org.apache.iceberg.rest.RESTCatalogServer`` is what the ``apache/iceberg-rest-fixture`` Docker image
runs. Here it comes from Maven Central without Docker: ``iceberg-open-api-<v>-test-fixtures.jar``
plus the runtime classpath that ``tests/fixtures/restfixture/pom.xml`` lists (the open-api POM declares
none), copied by Maven into ``~/.cache/lakesession/restfixture/<v>/lib`` on first use (about 60 MB).
It is configured like the Docker image, with ``CATALOG_*`` variables (``CATALOG_WAREHOUSE`` ->
``warehouse``, ``CATALOG_IO__IMPL`` -> ``io-impl``, ...): a JDBC catalog on a SQLite file and a
``file://`` warehouse. ``LoopbackRestFixture.java`` starts that same server bound to 127.0.0.1 on a
free port (Apache's ``main`` binds every interface on 8181).

1.11.0 is the newest ``iceberg-open-api`` on Maven Central (there is no 1.12.0 test-fixtures jar),
one minor behind the Iceberg 1.12.0 runtime lakesession gives Spark 3.5 and 4.1.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.factories import stop_process

VERSION = "1.11.0"
HERE = Path(__file__).parent / "fixtures" / "restfixture"
POM = HERE / "pom.xml"
LAUNCHER = HERE / "LoopbackRestFixture.java"
READY = "LAKESESSION_RESTFIXTURE_READY"


@dataclass(frozen=True)
class RestFixture:
    uri: str  # the catalog's base URI (no prefix: the fixture's /v1/config names none)
    warehouse: Path  # the file:// warehouse directory
    log: Path
    requests: Path  # Jetty's request log: one NCSA line per request the catalog received

    @property
    def location(self) -> str:
        """The warehouse as the catalog writes it in table locations (Hadoop's ``file:/...``)."""
        return f"file:{self.warehouse}"

    def request_lines(self) -> list[str]:
        """The request lines received so far (``"GET /v1/config HTTP/1.1" 200``...)."""
        return self.requests.read_text().splitlines() if self.requests.exists() else []


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "lakesession" / "restfixture"


def maven_lib(lib: Path, pom: Path, version: str, expect: str, what: str, *, timeout: float = 600.0) -> Path:
    """``pom``'s runtime classpath in ``lib`` (a directory), resolved once by Maven from Maven Central.

    Filled in a staging directory and renamed into place, so a concurrent or interrupted run never leaves a
    half-filled ``lib/``; the Maven repository is shared (``cache_dir()/m2``), so shared jars download once.
    """
    if (lib / ".complete").exists():
        return lib
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError(
            f"Maven (`mvn`) is needed once to fetch {what} from Maven Central (apt-get install maven), "
            f"or put them in {lib}"
        )
    staging = lib.with_name(f"lib.{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    out = subprocess.run(
        [
            mvn,
            "-B",
            "-q",
            "-f",
            str(pom),
            f"-Dmaven.repo.local={cache_dir() / 'm2'}",
            f"-Diceberg.version={version}",
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={staging}",
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if out.returncode != 0 or not (staging / expect).exists():
        raise RuntimeError(f"mvn could not resolve {what}:\n{out.stdout[-3000:]}{out.stderr[-2000:]}")
    (staging / ".complete").write_text(version)
    if (lib / ".complete").exists():  # another run finished first: keep its copy (it may be in use)
        shutil.rmtree(staging, ignore_errors=True)
        return lib
    shutil.rmtree(lib, ignore_errors=True)
    staging.rename(lib)
    return lib


def classpath(version: str = VERSION, *, timeout: float = 600.0) -> Path:
    """The fixture's jars (a directory), resolved by Maven from Maven Central when not cached yet."""
    jar = f"iceberg-open-api-{version}-test-fixtures.jar"
    what = "Apache's Iceberg REST fixture's classpath"
    return maven_lib(cache_dir() / version / "lib", POM, version, jar, what, timeout=timeout)


def _compiled_launcher(java: str, lib: Path) -> Path:
    """``LoopbackRestFixture.class``, compiled once per source version (source-file mode recompiles each start)."""
    source = LAUNCHER.read_bytes()
    out = lib.parent / f"launcher-{hashlib.sha256(source).hexdigest()[:12]}"
    if (out / "LoopbackRestFixture.class").exists():
        return out
    javac = Path(java).resolve().with_name("javac")  # the JDK's own, beside the java that runs the fixture
    if not javac.exists():
        raise RuntimeError(
            f"no javac beside {java}: a JDK (not only a JRE) 17+ is needed to build the fixture's launcher"
        )
    staging = out.with_name(f"{out.name}.{os.getpid()}")
    done = subprocess.run(
        [str(javac), "-d", str(staging), "-cp", f"{lib}/*", str(LAUNCHER)], capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        raise RuntimeError(f"javac could not compile {LAUNCHER.name}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    if (out / "LoopbackRestFixture.class").exists():  # another run finished first
        shutil.rmtree(staging, ignore_errors=True)
        return out
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return out


def _tail(log: Path, n: int = 3000) -> str:
    return log.read_text(errors="replace")[-n:] if log.exists() else "(no log)"


@contextmanager
def restfixture(workdir: Path, *, timeout: float = 90.0, env: dict[str, str] | None = None) -> Iterator[RestFixture]:
    """Start the fixture with its state under ``workdir``; stop it on exit. Fails loudly, with the log tail."""
    java = (
        shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin")) if "JAVA_HOME" in os.environ else None
    )
    java = java or shutil.which("java")
    if java is None:
        raise RuntimeError("no `java` on PATH (Java 17+ is needed to run Apache's REST fixture)")
    lib = classpath()
    warehouse = workdir / "warehouse"
    warehouse.mkdir(parents=True, exist_ok=True)
    log = workdir / "restfixture.log"
    requests = workdir / "requests.log"
    fixture_env = {
        k: v for k, v in os.environ.items() if not k.startswith("CATALOG_") and not k.startswith("AWS_")
    }  # only what we set below reaches the catalog: no ambient cloud keys
    fixture_env.update(
        {
            "CATALOG_WAREHOUSE": warehouse.as_uri(),
            "CATALOG_URI": f"jdbc:sqlite:file:{workdir / 'catalog.db'}",
            "CATALOG_JDBC_USER": "user",
            "CATALOG_JDBC_PASSWORD": "password",  # as in Apache's Dockerfile: SQLite ignores them
            **(env or {}),
        }
    )
    launcher = _compiled_launcher(java, lib)
    cmd = [java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", f"{lib}/*{os.pathsep}{launcher}", "LoopbackRestFixture"]
    cmd.append(str(requests))
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=fixture_env, cwd=workdir
        )
    try:
        uri = _wait_ready(proc, log, timeout)
        yield RestFixture(uri=uri, warehouse=warehouse, log=log, requests=requests)
    finally:
        stop_process(proc, 15)


def _wait_ready(proc: subprocess.Popen[bytes], log: Path, timeout: float) -> str:
    """The fixture's URI once its READY line is printed and ``GET /v1/config`` answers 200."""
    deadline = time.monotonic() + timeout
    uri = None
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the Iceberg REST fixture exited with {proc.returncode}:\n{_tail(log)}")
        if uri is None:
            for line in _tail(log, 100_000).splitlines():
                if line.startswith(READY):
                    uri = f"http://127.0.0.1:{int(line.split()[1])}"
        if uri is not None:
            try:
                if httpx.get(f"{uri}/v1/config", timeout=2).status_code == 200:
                    return uri
            except httpx.TransportError:
                pass
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the Iceberg REST fixture did not answer GET /v1/config within {timeout} s:\n{_tail(log)}"
            )
        time.sleep(0.2)
