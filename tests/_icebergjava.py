"""Iceberg Java's ``TableMetadataParser`` and ``ViewMetadataParser`` (what Spark, Trino and Flink read metadata with), on call.

``iceberg-core`` 1.12.0 and its runtime classpath come from Maven Central with ``mvn
dependency:copy-dependencies`` (``tests/fixtures/icebergcore/pom.xml``), into
``~/.cache/lakesession/icebergcore/<v>/lib`` on first use (about 15 MB; the Maven repository is the REST
fixture's, so shared downloads are fetched once). ``tests/java/MetadataParseHarness.java`` (tables) or
``tests/java/ViewParseHarness.java`` (views) is compiled there too and runs as one JVM for a whole test: a
metadata file path in, ``ok`` or ``error <message>`` out.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from tests._restfixture import cache_dir as restfixture_cache
from tests._restfixture import maven_lib
from tests.factories import stop_process

VERSION = "1.12.0"  # the Iceberg runtime lakesession gives Spark 3.5 and 4.1
POM = Path(__file__).parent / "fixtures" / "icebergcore" / "pom.xml"
HARNESSES = {
    "table": Path(__file__).parent / "java" / "MetadataParseHarness.java",
    "view": Path(__file__).parent / "java" / "ViewParseHarness.java",
}
HARNESS = HARNESSES["table"]
Kind = Literal["table", "view"]


def classpath(version: str = VERSION, *, timeout: float = 600.0) -> Path:
    """iceberg-core's jars (a directory), resolved by Maven from Maven Central when not cached yet."""
    lib = restfixture_cache().parent / "icebergcore" / version / "lib"
    return maven_lib(lib, POM, version, f"iceberg-core-{version}.jar", f"iceberg-core {version}", timeout=timeout)


def _compiled(lib: Path, harness: Path = HARNESS) -> Path:
    """The class directory of ``harness`` (a Java source file), compiled once per source version."""
    source = harness.read_bytes()
    main = f"{harness.stem}.class"
    out = lib.parent / f"harness-{harness.stem}-{hashlib.sha256(source).hexdigest()[:12]}"
    if (out / main).exists():
        return out
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError(f"javac (a JDK 17+) is needed to compile tests/java/{harness.name}")
    staging = out.with_name(f"{out.name}.{os.getpid()}")
    done = subprocess.run(
        [javac, "--release", "17", "-d", str(staging), "-cp", f"{lib}/*", str(harness)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"javac could not compile {harness.name}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    if (out / main).exists():
        shutil.rmtree(staging, ignore_errors=True)
        return out
    staging.rename(out)
    return out


@contextmanager
def java_parser(kind: Kind = "table") -> Iterator[Callable[[Path], str | None]]:
    """``parse(path)``: None when Iceberg Java reads the ``kind`` ("table" or "view") metadata file, else its
    error message."""
    harness = HARNESSES[kind]
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("no `java` on PATH (Java 17+ is needed to run Iceberg Java's parser)")
    lib = classpath()
    cp = f"{lib}/*{os.pathsep}{_compiled(lib, harness)}"
    cmd = [java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", cp, harness.stem]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    assert proc.stdin is not None and proc.stdout is not None

    def parse(path: Path) -> str | None:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(f"{path}\n")
        proc.stdin.flush()
        answer = proc.stdout.readline().rstrip("\n")
        if not answer:
            raise RuntimeError(f"the Java metadata parser exited with {proc.poll()}")
        return None if answer == "ok" else answer.removeprefix("error ")

    try:
        yield parse
    finally:
        proc.stdin.close()
        stop_process(proc, 15)
