"""Offline assembly of the Spark + Iceberg REST + S3FileIO jar set.

Maven is not always reachable; PyPI and Debian are. Everything here comes
from pinned registry packages (see shared/notes/offline-jvm-jars.md):

* the Apache ``iceberg-spark-runtime`` jar, from PyPI ``snowpark-connect-deps-iceberg``;
* httpclient5/httpcore5 and the unshaded AWS SDK v2 jars, from PyPI
  ``bodo-iceberg-connector``;
* Jackson, from pyspark's own ``jars/`` folder;
* jarjar (the relocation tool; it bundles its own ASM), from Debian ``libjarjar-java``.

The runtime jar lacks the classes Iceberg relocates under
``org.apache.iceberg.shaded``: Jackson and httpclient5 (plus a stand-in for
the httpclient5 5.4 ``TlsSocketStrategy`` interface) are merged and relocated
into that prefix, then the result is verified with a class-file scan.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from lakesession._spark import _classscan
from lakesession._spark.versions import OFFLINE_ICEBERG as ICEBERG_VERSION
from lakesession._spark.versions import JarResolutionError

try:
    import fcntl
except ImportError:  # pragma: no cover - non-POSIX
    fcntl = None  # type: ignore[assignment]

Progress = Callable[[str], None]

RECIPE_VERSION = 1
MANIFEST = "manifest.json"
AWS_SDK_VERSION = "2.29.26"
JACKSON_VERSION = "2.15.2"
SHADED_PREFIX = "org/apache/iceberg/shaded/"
UNRELOCATED_PREFIXES = ("com/fasterxml/jackson/", "org/apache/hc/")
RELOCATION_RULES = (
    "rule com.fasterxml.jackson.** org.apache.iceberg.shaded.com.fasterxml.jackson.@1",
    "rule org.apache.hc.** org.apache.iceberg.shaded.org.apache.hc.@1",
)
SHADED_JAR = f"lakesession-iceberg-{ICEBERG_VERSION}-shaded-deps.jar"
STANDIN_CLASS = "org/apache/hc/client5/http/ssl/TlsSocketStrategy"
STANDIN_SOURCE = Path(__file__).parent / "java" / (STANDIN_CLASS + ".java")
STANDIN_METHODS = (
    (
        "upgrade",
        (
            "(Ljava/net/Socket;Ljava/lang/String;ILjava/lang/Object;"
            "Lorg/apache/hc/core5/http/protocol/HttpContext;)Ljavax/net/ssl/SSLSocket;"
        ),
        ("java/io/IOException",),
    ),
)


@dataclass(frozen=True)
class Pin:
    kind: str  # "pypi" | "deb"
    spec: str  # pip requirement or apt "package=version"
    filename: str
    sha256: str


SNOWPARK_WHEEL = Pin(
    "pypi",
    "snowpark-connect-deps-iceberg==1.0.3",
    "snowpark_connect_deps_iceberg-1.0.3-py3-none-any.whl",
    "4f280e3677ab8d3a89f16647fc392ab2a3d48369f0c48873fe07bc1e74e06ffc",
)
BODO_WHEEL = Pin(
    "pypi",
    "bodo-iceberg-connector==2026.10",
    "bodo_iceberg_connector-2026.10-py3-none-any.whl",
    "947a72aea7d0f0fa49e7609841d8871dd4841335eeaaf9e6abe2ae34075e4c55",
)
JARJAR_DEB = Pin(
    "deb",
    "libjarjar-java=1.4+svn142-12",
    "libjarjar-java_1.4+svn142-12_all.deb",
    "0d22a72bc64ed34ebb6b5e9c95183a6000ea797f5b48fe9c139008904b6f3193",
)
PINS = (SNOWPARK_WHEEL, BODO_WHEEL, JARJAR_DEB)

# Files inside the pinned packages, pinned too (observed sha256).
JARJAR_JAR = ("usr/share/java/jarjar-1.4.jar", "08528dc8f4e1eb70e03d37d432ac1d60d55ae50e22038587a194a857606a296e")
RUNTIME_JARS = {  # scala binary version -> (wheel member, sha256)
    "2.12": (
        "snowpark_connect_deps_iceberg/jars/iceberg-spark-runtime-3.5_2.12-1.10.2.jar",
        "5b30080c7bbbced0fb0900894b7ea0200b1bbb2e4c355ebe727baafaf49c16f6",
    ),
    "2.13": (
        "snowpark_connect_deps_iceberg/jars/iceberg-spark-runtime-3.5_2.13-1.10.2.jar",
        "1a19d773858c49f4937f97568b45fa10223a4e1c51ced277446f9c709ebeb3b8",
    ),
}
BODO_LIBS = "bodo_iceberg_connector/jars/libs/"
HTTP_JARS = {
    "httpclient5-5.3.1.jar": "08346a757c617f6ecc66af9f099260adde1f3a1351fa81cb22fc17482b31f823",
    "httpcore5-5.2.jar": "293321cbf594d79ea8a0cb0214f75f146d17f088be17ad5ce11c2fe864df124c",
    "httpcore5-h2-5.2.4.jar": "dc1a95e73eb04db93451533d390ce02c53b301a10dc343d08c862f2934b3d30e",
}
JACKSON_JARS = {  # from pyspark's jars/ (Spark 3.5.x ships Jackson 2.15.2)
    "jackson-annotations-2.15.2.jar": "04e21f94dcfee4b078fa5a5f53047b785aaba69d19de392f616e7a7fe5d3882f",
    "jackson-core-2.15.2.jar": "303c99e82b1faa91a0bae5d8fbeb56f7e2adf9b526a900dd723bf140d62bd4b4",
    "jackson-databind-2.15.2.jar": "0eb2fdad6e40ab8832a78c9b22f58196dd970594e8d3d5a26ead87847c4f3a96",
    # Not in the note's recipe: the relocated Arrow (ObjectMapperFactory) needs JavaTimeModule.
    "jackson-datatype-jsr310-2.15.2.jar": "7574c81ad570476ef6aad26f419288fd466733f3315bee3012f2f29c9dc008c8",
}
AWS_MODULES = (
    "annotations",
    "apache-client",
    "arns",
    "auth",
    "aws-core",
    "aws-json-protocol",
    "aws-query-protocol",
    "aws-xml-protocol",
    "checksums",
    "checksums-spi",
    "endpoints-spi",
    "http-auth",
    "http-auth-aws",
    "http-auth-spi",
    "http-client-spi",
    "identity-spi",
    "json-utils",
    "kms",
    "metrics-spi",
    "profiles",
    "protocol-core",
    "regions",
    "retries",
    "retries-spi",
    "s3",
    "sdk-core",
    "sts",
    "third-party-jackson-core",
    "utils",
)
AWS_JARS = (
    *tuple(f"{m}-{AWS_SDK_VERSION}.jar" for m in AWS_MODULES),
    "eventstream-1.0.1.jar",
    "reactive-streams-1.0.4.jar",
)

_HELP = (
    "To skip offline assembly, provide the jars yourself with "
    "LAKESESSION_JARS=<comma-separated jar paths>, or use Maven (mode 'maven') where reachable."
)


def _noop(_msg: str) -> None:
    pass


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_sha256(path: Path, expected: str, what: str) -> None:
    got = sha256_file(path)
    if got != expected:
        raise JarResolutionError(
            f"sha256 mismatch for {what} ({path}): expected {expected}, got {got}. "
            f"The file is corrupt or was replaced upstream. {_HELP}"
        )


def cache_key(scala: str) -> str:
    """Directory name of the assembled set: versions plus a digest of every pinned input."""
    if scala not in RUNTIME_JARS:
        raise JarResolutionError(f"no offline Iceberg runtime for Scala {scala}")
    material = {
        "recipe": RECIPE_VERSION,
        "iceberg": ICEBERG_VERSION,
        "scala": scala,
        "aws_sdk": AWS_SDK_VERSION,
        "jackson": JACKSON_JARS,
        "http": HTTP_JARS,
        "pins": [(p.spec, p.sha256) for p in PINS],
        "runtime": RUNTIME_JARS[scala],
        "jarjar": JARJAR_JAR,
        "rules": RELOCATION_RULES,
        "aws": AWS_JARS,
        "standin": hashlib.sha256(STANDIN_SOURCE.read_bytes()).hexdigest(),
    }
    digest = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()
    return f"iceberg-{ICEBERG_VERSION}-spark-3.5_{scala}-{digest[:16]}"


def load_cache(directory: Path, key: str, *, verify_hashes: bool = False) -> list[Path] | None:
    """The jar paths of a complete cached set in ``directory``, or None.

    Checks the manifest and every output's size; with ``verify_hashes`` also
    every output's sha256 (a few hundred ms).
    """
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
        if manifest.get("format") != 1 or manifest.get("key") != key:
            return None
        paths = []
        for out in manifest["outputs"]:
            p = directory / out["file"]
            if p.stat().st_size != out["size"]:
                return None
            if verify_hashes and sha256_file(p) != out["sha256"]:
                return None
            paths.append(p)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return paths or None


@contextlib.contextmanager
def file_lock(path: Path, progress: Progress = _noop) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        if fcntl is not None:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                progress(f"waiting for another process holding {path} ...")
                fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(f, fcntl.LOCK_UN)


def _run(cmd: list[str], what: str, *, cwd: Path | None = None, timeout: float = 900) -> str:
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError as exc:
        raise JarResolutionError(f"{what} failed: {cmd[0]} not found. {_HELP}") from exc
    except subprocess.TimeoutExpired as exc:
        raise JarResolutionError(f"{what} timed out after {timeout:.0f} s. {_HELP}") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        raise JarResolutionError(f"{what} failed (exit {proc.returncode}):\n{tail}\n{_HELP}")
    return proc.stdout


def _pip_download(pin: Pin, dest_dir: Path, progress: Progress) -> Path:
    progress(f"downloading {pin.spec} from PyPI ...")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "-d",
            str(dest_dir),
            pin.spec,
        ],
        f"pip download {pin.spec}",
    )
    return _single_file(dest_dir, pin)


def _apt_download(pin: Pin, dest_dir: Path, progress: Progress) -> Path:
    progress(f"downloading Debian package {pin.spec} ...")
    try:
        _run(["apt-get", "download", pin.spec], f"apt-get download {pin.spec}", cwd=dest_dir)
    except JarResolutionError as exc:
        if os.name == "posix" and os.geteuid() == 0:
            # a fresh machine has empty package lists: refresh them once (root only) and retry
            progress("apt does not know the package yet: running 'apt-get update' ...")
            _run(["apt-get", "update", "-qq"], "apt-get update")
            _run(["apt-get", "download", pin.spec], f"apt-get download {pin.spec}", cwd=dest_dir)
        else:
            raise JarResolutionError(
                f"{exc}\n(If apt does not know the package, run 'sudo apt-get update' first.)"
            ) from None
    return _single_file(dest_dir, pin)


def _single_file(dest_dir: Path, pin: Pin) -> Path:
    exact = dest_dir / pin.filename
    files = [p for p in dest_dir.iterdir() if p.is_file()]
    if exact.exists():
        return exact
    if len(files) == 1:
        return files[0]
    raise JarResolutionError(
        f"download of {pin.spec} produced {[f.name for f in files]}, expected {pin.filename}. {_HELP}"
    )


DOWNLOADERS: dict[str, Callable[[Pin, Path, Progress], Path]] = {
    "pypi": _pip_download,
    "deb": _apt_download,
}


def fetch(pin: Pin, downloads: Path, progress: Progress = _noop) -> Path:
    """Path of ``pin`` in the download cache, downloading it if absent or corrupt."""
    dest = downloads / pin.kind / pin.filename
    if dest.exists():
        try:
            verify_sha256(dest, pin.sha256, f"cached {pin.spec}")
            return dest
        except JarResolutionError:
            progress(f"cached {dest.name} fails its sha256 check; downloading it again")
            dest.unlink()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".dl-", dir=dest.parent))
    try:
        got = DOWNLOADERS[pin.kind](pin, tmp, progress)
        verify_sha256(got, pin.sha256, f"downloaded {pin.spec}")
        os.replace(got, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _extract(wheel: Path, member: str, dest: Path, sha256: str | None = None) -> Path:
    with zipfile.ZipFile(wheel) as zf:
        try:
            info = zf.getinfo(member)
        except KeyError:
            raise JarResolutionError(f"{wheel.name} lacks {member}. {_HELP}") from None
        with zf.open(info) as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
    if sha256:
        verify_sha256(dest, sha256, f"{member} from {wheel.name}")
    return dest


def _find_javac(java: str) -> str | None:
    home = os.environ.get("JAVA_HOME")
    candidates = [Path(home) / "bin" / "javac"] if home else []
    candidates.append(Path(os.path.realpath(java)).parent / "javac")
    found = shutil.which("javac")
    if found:
        candidates.append(Path(found))
    return next((str(c) for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)


def standin_class(java: str, httpcore5: Path, work: Path, progress: Progress) -> tuple[bytes, str]:
    """Bytes of the compiled TlsSocketStrategy stand-in, and how they were made."""
    javac = _find_javac(java)
    if javac is None:
        progress("javac not found: writing the TlsSocketStrategy stand-in class file directly")
        return _classscan.interface_class_bytes(STANDIN_CLASS, STANDIN_METHODS), "classfile-writer"
    classes = work / "standin"
    classes.mkdir()
    _run(
        [
            javac,
            "--release",
            "8",
            "-Xlint:-options",
            "-nowarn",
            "-cp",
            str(httpcore5),
            "-d",
            str(classes),
            str(STANDIN_SOURCE),
        ],
        "javac of the TlsSocketStrategy stand-in",
    )
    return (classes / (STANDIN_CLASS + ".class")).read_bytes(), "javac --release 8"


def _scan(jar: Path, prefixes: tuple[str, ...]) -> _classscan.JarScan:
    try:
        return _classscan.scan_jar(jar, prefixes)
    except (_classscan.ClassFormatError, zipfile.BadZipFile) as exc:
        raise JarResolutionError(f"cannot read the classes of {jar.name}: {exc}. {_HELP}") from exc


def verify_shaded(shaded: _classscan.JarScan) -> None:
    bad = sorted(c for c in shaded.defined if c.startswith(UNRELOCATED_PREFIXES))
    bad += sorted(r for r in shaded.refs if r.startswith(UNRELOCATED_PREFIXES))
    if bad:
        raise JarResolutionError(
            f"relocation incomplete: {len(bad)} Jackson/httpclient5 classes left unrelocated in "
            f"{shaded.path.name} (e.g. {', '.join(bad[:5])}). {_HELP}"
        )


def verify_complete(scans: list[_classscan.JarScan]) -> int:
    missing = _classscan.missing_references(scans, scans)
    if missing:
        sample = ", ".join(f"{ref} (used by {min(users)})" for ref, users in sorted(missing.items())[:8])
        raise JarResolutionError(
            f"assembled jar set is incomplete: {len(missing)} relocated classes referenced by "
            f"the Iceberg runtime are missing: {sample}. {_HELP}"
        )
    return sum(len(s.refs) for s in scans)


def _output(path: Path, role: str) -> dict:
    return {"file": path.name, "role": role, "size": path.stat().st_size, "sha256": sha256_file(path)}


def _install(out: Path, final: Path) -> None:
    trash = None
    if final.exists():
        trash = final.with_name(f".old-{final.name}-{os.getpid()}")
        os.rename(final, trash)
    os.rename(out, final)
    if trash is not None:
        shutil.rmtree(trash, ignore_errors=True)


def assemble(
    *,
    cache_root: Path,
    key: str,
    scala: str,
    spark_version: str,
    spark_jars_dir: Path,
    java: str,
    java_version: str,
    progress: Progress = _noop,
    rebuild: bool = False,
) -> tuple[list[Path], bool]:
    """Build (or reuse) the offline jar set in ``cache_root/jars/<key>``.

    Returns its jars, and whether they were built now (False: another process
    finished the same set while this one waited for the lock).
    """
    jars_root = cache_root / "jars"
    final = jars_root / key
    with file_lock(jars_root / f".{key}.lock", progress):
        if not rebuild:
            hit = load_cache(final, key)
            if hit:
                return hit, False
        started = time.monotonic()
        build = Path(tempfile.mkdtemp(prefix=f".build-{key}-", dir=jars_root))
        try:
            out, work = build / "out", build / "work"
            out.mkdir()
            work.mkdir()
            manifest = _build(
                out,
                work,
                cache_root / "downloads",
                scala=scala,
                spark_jars_dir=spark_jars_dir,
                java=java,
                progress=progress,
            )
            manifest.update(
                {
                    "format": 1,
                    "key": key,
                    "recipe": RECIPE_VERSION,
                    "created": datetime.now(UTC).isoformat(timespec="seconds"),
                    "versions": {
                        "spark": spark_version,
                        "scala": scala,
                        "iceberg": ICEBERG_VERSION,
                        "aws_sdk": AWS_SDK_VERSION,
                        "jackson": JACKSON_VERSION,
                        "httpclient5": "5.3.1",
                        "httpcore5": "5.2",
                        "httpcore5_h2": "5.2.4",
                        "java": java_version,
                    },
                    "relocations": list(RELOCATION_RULES),
                    "build_seconds": round(time.monotonic() - started, 2),
                }
            )
            (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
            _install(out, final)
        finally:
            shutil.rmtree(build, ignore_errors=True)
        progress(f"assembled {len(manifest['outputs'])} jars in {final} ({time.monotonic() - started:.1f} s)")
        paths = load_cache(final, key)
        if not paths:
            raise JarResolutionError(f"assembled jar set in {final} failed its own check")
        return paths, True


def _build(
    out: Path, work: Path, downloads: Path, *, scala: str, spark_jars_dir: Path, java: str, progress: Progress
) -> dict:
    inputs = []
    for name, sha in JACKSON_JARS.items():
        src = spark_jars_dir / name
        if not src.is_file():
            raise JarResolutionError(
                f"{src} not found: offline assembly takes Jackson {JACKSON_VERSION} from Spark's "
                f"jars folder (pyspark 3.5.x). {_HELP}"
            )
        verify_sha256(src, sha, f"Spark's {name}")
        inputs.append({"name": name, "source": f"spark-jars:{src}", "sha256": sha, "size": src.stat().st_size})
    fetched = {}
    for pin in PINS:
        path = fetch(pin, downloads, progress)
        fetched[pin.spec] = path
        inputs.append(
            {
                "name": pin.filename,
                "source": f"{pin.kind}:{pin.spec}",
                "sha256": pin.sha256,
                "size": path.stat().st_size,
            }
        )
    inputs.append(
        {
            "name": STANDIN_SOURCE.name,
            "source": "lakesession package data",
            "sha256": sha256_file(STANDIN_SOURCE),
            "size": STANDIN_SOURCE.stat().st_size,
        }
    )

    progress("extracting jars ...")
    member, sha = RUNTIME_JARS[scala]
    runtime = _extract(fetched[SNOWPARK_WHEEL.spec], member, out / Path(member).name, sha)
    bodo = fetched[BODO_WHEEL.spec]
    http = [_extract(bodo, BODO_LIBS + n, work / n, s) for n, s in HTTP_JARS.items()]
    aws = [_extract(bodo, BODO_LIBS + n, out / n) for n in AWS_JARS]
    _run(["dpkg", "-x", str(fetched[JARJAR_DEB.spec]), str(work / "deb")], "dpkg -x of jarjar")
    jarjar = work / "deb" / JARJAR_JAR[0]
    verify_sha256(jarjar, JARJAR_JAR[1], f"{JARJAR_JAR[0]} from {JARJAR_DEB.filename}")

    standin, standin_how = standin_class(java, http[1], work, progress)
    merged = work / "merged.jar"
    entries = _classscan.merge_jars(
        [spark_jars_dir / n for n in JACKSON_JARS] + http, {STANDIN_CLASS + ".class": standin}, merged
    )
    rules = work / "rules.txt"
    rules.write_text("\n".join(RELOCATION_RULES) + "\n")
    shaded_path = out / SHADED_JAR
    progress(f"relocating {entries} entries with jarjar; scanning the runtime jar meanwhile ...")
    proc = subprocess.Popen(
        [java, "-jar", str(jarjar), "process", str(rules), str(merged), str(shaded_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        runtime_scan = _scan(runtime, (SHADED_PREFIX,))
    finally:
        jj_out, _ = proc.communicate()
    if proc.returncode != 0 or not shaded_path.is_file():
        raise JarResolutionError(
            f"jarjar failed (exit {proc.returncode}): {jj_out.decode(errors='replace')[-800:]} {_HELP}"
        )
    shaded_scan = _scan(shaded_path, (SHADED_PREFIX, *UNRELOCATED_PREFIXES))
    verify_shaded(shaded_scan)
    refs = verify_complete([runtime_scan, shaded_scan])
    progress(
        f"verified: {runtime_scan.class_count + shaded_scan.class_count} classes, "
        f"{refs} relocated references, none missing"
    )
    outputs = [_output(runtime, "iceberg-spark-runtime"), _output(shaded_path, "shaded-deps")] + [
        _output(p, "aws-sdk") for p in aws
    ]
    return {
        "inputs": inputs,
        "outputs": outputs,
        "checks": {
            "classes_scanned": runtime_scan.class_count + shaded_scan.class_count,
            "shaded_classes": shaded_scan.class_count,
            "relocated_references": refs,
            "unrelocated": 0,
            "missing": 0,
            "standin": standin_how,
        },
    }
