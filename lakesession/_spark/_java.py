"""Which Java Spark launches: one the Spark in use supports, found on JAVA_HOME, PATH or the usual JVM folders.

Spark 4.x runs on Java 17 and 21 only (4.1 on Java 25 dies at start: ``getSubject is not supported``, from
Hadoop's UGI, then 57 lines of ``JAVA_GATEWAY_EXITED``); Spark 3.5 on 8, 11 and 17. So the check is the
supported set, not "11 or newer":

* ``JAVA_HOME``, when set, is the user's choice: used if supported, else one line naming the supported
  versions and, as the fix, a supported Java found elsewhere (or how to install one);
* else the ``java`` on PATH, if supported;
* else the first supported one in the usual folders (``/usr/lib/jvm/*``, macOS's
  ``/Library/Java/JavaVirtualMachines/*/Contents/Home``, SDKMAN's; ``LAKESESSION_JVM_DIRS`` replaces them),
  which Spark then gets as ``JAVA_HOME``.

A JDK's ``release`` file gives its version without starting it; else ``java -version`` does.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .versions import JavaNotFoundError

logger = logging.getLogger(__name__)

JVM_DIRS_ENV = "LAKESESSION_JVM_DIRS"
#: where JDKs usually live (glob patterns of JDK homes), searched when JAVA_HOME and PATH give no supported Java
JVM_DIRS = (
    "/usr/lib/jvm/*",
    "/usr/java/*",
    "/Library/Java/JavaVirtualMachines/*/Contents/Home",
    "~/Library/Java/JavaVirtualMachines/*/Contents/Home",
    "~/.sdkman/candidates/java/*",
)
#: Spark major -> the Java majors it supports, most preferred first
SUPPORTED = {"3": (17, 11, 8), "4": (17, 21)}
INSTALL = "install Java 17 (e.g. apt-get install -y openjdk-17-jre-headless; macOS: brew install openjdk@17)"


@dataclass(frozen=True)
class Java:
    executable: str
    version: str  # as the JVM says it: 17.0.15, 1.8.0_392, 25.0.3
    home: str | None = None  # the JDK's folder when found there (JAVA_HOME to give Spark)

    @property
    def major(self) -> int:
        return major(self.version)


def major(version: str) -> int:
    """17 for ``17.0.1``, 8 for ``1.8.0_392``."""
    parts = version.split(".")
    found = re.match(r"\d+", parts[1] if parts[0] == "1" and len(parts) > 1 else parts[0])
    return int(found.group(0)) if found else 0


def spark_version() -> str:
    """The pyspark in use (its ``version`` module only: no Spark import)."""
    try:
        from pyspark.version import __version__
    except ImportError:  # no pyspark: the newest line's rule
        return "4.1.0"
    return str(__version__)


def supported(spark: str | None = None) -> tuple[int, ...]:
    spark = spark or spark_version()
    return SUPPORTED.get(spark.split(".")[0], SUPPORTED["4"])


def _names(majors: tuple[int, ...]) -> str:
    ordered = sorted(majors)
    return ", ".join(str(m) for m in ordered[:-1]) + f" or {ordered[-1]}" if len(ordered) > 1 else str(ordered[0])


def _release_version(home: Path) -> str | None:
    try:
        text = (home / "release").read_text(errors="replace")
    except OSError:
        return None
    found = re.search(r'^JAVA_VERSION="([^"]+)"', text, re.MULTILINE)
    return found.group(1) if found else None


def probe(java: str) -> str:
    """The version ``java`` reports (its JDK's ``release`` file when it has one); JavaNotFoundError if none."""
    path = Path(java).resolve()
    known = _release_version(path.parent.parent)
    if known:
        return known
    try:
        proc = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JavaNotFoundError(f"{java} -version failed ({exc}). Fix: {INSTALL}, or set JAVA_HOME to one") from None
    out = proc.stderr + proc.stdout
    found = re.search(r'version "([^"]+)"', out)
    if proc.returncode != 0 or not found:
        raise JavaNotFoundError(f"{java} -version failed: {out.strip()[:200]!r}. Fix: {INSTALL}, or set JAVA_HOME")
    return found.group(1)


def _folders() -> list[Path]:
    """JDK homes in the usual folders (or ``LAKESESSION_JVM_DIRS``), each once."""
    patterns = os.environ.get(JVM_DIRS_ENV)
    chosen = [p for p in patterns.split(os.pathsep) if p] if patterns is not None else list(JVM_DIRS)
    homes: dict[str, Path] = {}
    for pattern in chosen:
        for found in sorted(glob.glob(os.path.expanduser(pattern))):
            home = Path(found)
            if (home / "bin" / "java").is_file():
                homes.setdefault(os.path.realpath(home), Path(os.path.realpath(home)))
    return list(homes.values())


def _elsewhere(majors: tuple[int, ...]) -> Java | None:
    """The most preferred supported Java in the usual folders."""
    best: Java | None = None
    for home in _folders():
        try:
            java = Java(str(home / "bin" / "java"), probe(str(home / "bin" / "java")), str(home))
        except JavaNotFoundError:
            continue
        if java.major in majors and (best is None or majors.index(java.major) < majors.index(best.major)):
            best = java
    return best


def find_java(spark: str | None = None) -> Java:
    """The Java Spark should launch (see the module docstring); JavaNotFoundError, one line, when none fits."""
    spark = spark or spark_version()
    majors = supported(spark)
    wanted = f"Spark {spark} runs on Java {_names(majors)}"
    home = os.environ.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        if not (java.is_file() and os.access(java, os.X_OK)):
            raise JavaNotFoundError(f"JAVA_HOME={home} has no bin/java. {wanted}. Fix: {_fix(majors)}")
        version = probe(str(java))
        if major(version) not in majors:
            raise JavaNotFoundError(f"JAVA_HOME={home} is Java {version}; {wanted}. Fix: {_fix(majors, unset=True)}")
        return Java(str(java), version)
    on_path = shutil.which("java")
    seen = ""
    if on_path:
        version = probe(on_path)
        if major(version) in majors:
            return Java(on_path, version)
        seen = f"the java on PATH ({on_path}) is Java {version}"
    other = _elsewhere(majors)
    if other is not None:
        logger.info("using Java %s from %s (%s)", other.version, other.home, seen or "no java on PATH")
        return other
    said = seen or "no java on PATH, JAVA_HOME is not set"
    raise JavaNotFoundError(f"{said}, and none in the usual JVM folders fits; {wanted}. Fix: {_fix(majors)}")


def _fix(majors: tuple[int, ...], *, unset: bool = False) -> str:
    other = _elsewhere(majors)
    if other is not None:
        return f"set JAVA_HOME={other.home} (Java {other.version}, found there)" + (
            " or unset JAVA_HOME" if unset else ""
        )
    return f"{INSTALL}, or set JAVA_HOME to a Java {_names(majors)}"


def use_java(spark: str | None = None) -> Java:
    """``find_java``, and a Java found in a folder made Spark's (``JAVA_HOME``, which pyspark's launcher reads)."""
    java = find_java(spark)
    if java.home is not None:
        os.environ["JAVA_HOME"] = java.home
    return java
