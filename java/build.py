"""Build lakesession's two JVM jars from ``java/src`` (after editing it).

    python java/build.py          # writes both (committed):
    # lakesession/_spark/jvm/lakesession-jvm.jar        the client's: credential providers, S3A wiring (dev.lakesession.jvm)
    # lakesession/engine/jvm/lakesession-engine.jar     the engine's: its sandbox extension and rulebook (dev.lakesession.engine)

The engine's jar ships with ``lakesession-engine`` only (a client install holds no sandbox); at run time it
needs the client's jar beside it (the engine's JVM has both on its class path).

Compiles with ``javac --release 17`` against the compile-time jars from Maven Central (Comet's SPI,
the AWS SDK v2 in iceberg-aws-bundle, Hadoop's client API and hadoop-aws (S3A's client factory); for ``lakesession engine``'s sandbox
extension, ``dev.lakesession.engine``, Spark 4.1's catalyst/sql/sql-api/core/common-utils, Scala
2.13's library and the Jackson its types are annotated with), fetched and sha1-checked like the
jars ``comet=True`` uses. At run time the providers need only the JDK and the engine classes only
Spark's own (all on Spark's class path). The jar's manifest records a hash of the sources: a fast
test proves the committed jar is built from the committed sources. Entries carry a fixed timestamp,
so a rebuild is byte-identical.
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"
# Hadoop 3.3's S3A (Spark 3.5) is built on AWS SDK v1: its classes compile in a second pass, against
# hadoop-aws 3.3.4 (its DefaultS3ClientFactory is not 3.4's) and the SDK v1 modules, beside the first's classes
SRC_SDK1 = HERE / "src-sdk1"
OUT = HERE.parent / "lakesession" / "_spark" / "jvm" / "lakesession-jvm.jar"
ENGINE_OUT = HERE.parent / "lakesession" / "engine" / "jvm" / "lakesession-engine.jar"
ENGINE_PACKAGE = "dev/lakesession/engine/"  # its classes (and the rulebook) go to ENGINE_OUT, the rest to OUT
COMPILE = (
    ("org.apache.datafusion", "comet-spark-spark4.1_2.13", "1.2.0"),
    ("org.apache.iceberg", "iceberg-aws-bundle", "1.12.0"),
    ("org.apache.hadoop", "hadoop-client-api", "3.4.2"),
    ("org.apache.hadoop", "hadoop-aws", "3.4.2"),  # S3A's client factory (GatewayS3ClientFactory)
)
COMPILE_SDK1 = (
    ("org.apache.hadoop", "hadoop-client-api", "3.4.2"),  # Configuration: the same API in 3.3
    ("org.apache.hadoop", "hadoop-aws", "3.3.4"),
    ("com.amazonaws", "aws-java-sdk-core", "1.12.262"),
    ("com.amazonaws", "aws-java-sdk-s3", "1.12.262"),
)
# dev.lakesession.engine compiles against Spark 4.1 (the patch release does not matter: it matches Catalyst's
# nodes by name at run time) and the Scala library pyspark 4.1 ships. (group, artifact, version) -> Maven
# Central's .sha1, pinned here and handed to the same fetch helper.
ENGINE_COMPILE: dict[tuple[str, str, str], str] = {
    ("org.apache.spark", "spark-catalyst_2.13", "4.1.3"): "0031f2250021045201ed1f386ed39ad9860f9dd2",
    ("org.apache.spark", "spark-sql_2.13", "4.1.3"): "d64ae3ae08dc49e276472b3e2d3ee366d2a83931",
    ("org.apache.spark", "spark-sql-api_2.13", "4.1.3"): "aa198ca852e9db31ecdd572099d1cd75caf1e2b3",
    ("org.apache.spark", "spark-core_2.13", "4.1.3"): "4b05d67c97c266d406427403544444b57298dc65",
    ("org.apache.spark", "spark-common-utils_2.13", "4.1.3"): "a7ae45c4618372075cd7fd5aedf89705aa350bf2",
    ("org.scala-lang", "scala-library", "2.13.17"): "766aafc5e3c310bde92e405988bc7f6eb31d7cf9",
    # only for the annotations on Spark's DataType (without it -Xlint:all warns that they cannot be read)
    ("com.fasterxml.jackson.core", "jackson-databind", "2.21.2"): "71ab8ff75b4fd74afdee0004173fdd15de1d6a28",
}
#: the engine's rulebook, shipped byte for byte as a class-path resource (dev.lakesession.engine.Rulebook reads it)
RULEBOOK = HERE.parent / "lakesession" / "_wire" / "engine_rules.json"
RULEBOOK_ENTRY = "dev/lakesession/engine/rules.json"
STAMP = (2020, 1, 1, 0, 0, 0)
HASH_ATTR = "Lakesession-Source-SHA256"


def source_hash(src: Path = SRC, rulebook: Path = RULEBOOK, src_sdk1: Path = SRC_SDK1) -> str:
    """SHA-256 over every source file's relative path and bytes, in sorted order (the SDK v1 pass's after,
    marked by its folder), then the rulebook's."""
    digest = hashlib.sha256()
    for root, mark in ((src, ""), (src_sdk1, "sdk1:")):
        for path in sorted(p for p in root.rglob("*.java") if p.is_file()):
            digest.update((mark + path.relative_to(root).as_posix()).encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    digest.update(RULEBOOK_ENTRY.encode() + b"\0" + rulebook.read_bytes() + b"\0")
    return digest.hexdigest()


def jar_source_hash(jar: Path = OUT) -> str | None:
    """The source hash recorded in a built jar's manifest."""
    with zipfile.ZipFile(jar) as z:
        for line in z.read("META-INF/MANIFEST.MF").decode().splitlines():
            if line.startswith(HASH_ATTR + ":"):
                return line.split(":", 1)[1].strip()
    return None


def _write_jar(out: Path, entries: list[tuple[str, bytes]], sources: str) -> None:
    """A jar of ``entries`` with the source hash in its manifest and fixed timestamps, renamed into place (a
    running JVM keeps its open copy)."""
    manifest = f"Manifest-Version: 1.0\r\nCreated-By: lakesession java/build.py\r\n{HASH_ATTR}: {sources}\r\n\r\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("META-INF/MANIFEST.MF", STAMP), manifest, zipfile.ZIP_DEFLATED)
        for name, data in entries:
            z.writestr(zipfile.ZipInfo(name, STAMP), data, zipfile.ZIP_DEFLATED)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".jar.tmp")
    tmp.write_bytes(buf.getvalue())
    tmp.replace(out)


def build(out: Path = OUT, engine_out: Path = ENGINE_OUT) -> tuple[Path, Path]:
    sys.path.insert(0, str(HERE.parent))
    from lakesession._spark import comet

    for coords, sha1 in ENGINE_COMPILE.items():
        comet.SHA1.setdefault(coords, sha1)  # build-time only pins: the runtime never fetches these
    class_path = ":".join(str(comet.fetch(*c)) for c in (*COMPILE, *ENGINE_COMPILE))
    sources = sorted(str(p) for p in SRC.rglob("*.java"))
    sdk1_path = ":".join(str(comet.fetch(*c)) for c in COMPILE_SDK1)
    with tempfile.TemporaryDirectory() as classes:
        javac = ["javac", "--release", "17", "-Xlint:all", "-Werror", "-d", classes]
        subprocess.run([*javac, "-cp", class_path, *sources], check=True)
        sdk1 = sorted(str(p) for p in SRC_SDK1.rglob("*.java"))
        subprocess.run([*javac, "-cp", f"{classes}:{sdk1_path}", *sdk1], check=True)
        built = [(c.relative_to(classes).as_posix(), c.read_bytes()) for c in sorted(Path(classes).rglob("*.class"))]
    client = [(name, data) for name, data in built if not name.startswith(ENGINE_PACKAGE)]
    engine = [(name, data) for name, data in built if name.startswith(ENGINE_PACKAGE)]
    sources = source_hash()  # both jars are built from the same sources: one hash, read once
    _write_jar(out, client, sources)
    _write_jar(engine_out, [*engine, (RULEBOOK_ENTRY, RULEBOOK.read_bytes())], sources)
    return out, engine_out


if __name__ == "__main__":
    for jar in build():
        print(jar)
