"""A class-data-sharing archive for the local Spark JVM: a cold ``lakesession.spark()`` ~40 % sooner.

A Spark driver JVM loads ~15,000 classes before its first query; most of the launch is parsing
and verifying them. Java's AppCDS (JDK 13+: ``-XX:ArchiveClassesAtExit`` / ``-XX:SharedArchiveFile``)
maps them pre-parsed from an archive instead. The first launch for a given Java + Spark + jars
writes the archive when its JVM exits (in the background, after Python is gone); later launches
use it. ``benchmarks/session_start.py`` measures the cold start with it and without it (figures and
their machine: ``benchmarks/RESULTS.md``). It is the warm-up ``classcache`` (``_plan.WARMUPS``).

Safety: Java validates the archive against the classpath itself (a changed jar turns sharing off,
never wrong classes), but a *truncated* archive crashes the JVM (SIGBUS, JDK 17) — so a fresh dump
is used only after a throwaway ``java -version`` run proves it maps, then renamed into place.
``LAKESESSION_JVM_CLASS_CACHE=0`` turns all of this off, as does a user's own ``-Xshare``/
``SharedArchiveFile`` option. Archives live under ``<cache>/classcache``, which must be the user's
alone (``_owned``): a directory others can write is emptied and tightened, another user's refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import logging
import os
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ._owned import _UntrustedCache, private_dir, trusted_file

logger = logging.getLogger(__name__)

ENV = "LAKESESSION_JVM_CLASS_CACHE"
DRIVER_OPTS = "spark.driver.extraJavaOptions"
QUIET = "-Xlog:cds*=off"  # the dump warns for every class it skips (signed jars): not the user's concern
SETTLED = 30.0  # seconds after its last write a dump is complete (or abandoned)
CLAIM_STALE = 3600.0  # a claim older than this with no dump beside it was abandoned
MIN_JAVA = 17  # dynamic archives since 13; 17 is the oldest LTS with them that Spark supports
KEEP = 4  # archives kept (one per Java × Spark × jars in use); ~100 MB each


@dataclass(frozen=True)
class Plan:
    """What one launch does with the class cache."""

    options: str = ""  # JVM options to add
    archive: Path | None = None  # the archive this launch maps
    claim: Path | None = None  # this launch writes the archive at exit; note its JVM's pid here (``launched``)


def plan(conf: Mapping[str, str], java: str, java_version: str, spark_home: str, cache: Path) -> Plan:
    """Use this key's archive if there is one, else write it at exit unless another launch already does.

    ``conf`` is the launch conf (its jars and packages are part of the archive's key).
    """
    if os.environ.get(ENV, "1").strip().lower() in {"0", "false", "no", "off"}:
        return Plan()
    if any(flag in conf.get(DRIVER_OPTS, "") for flag in ("-Xshare", "SharedArchiveFile", "ArchiveClassesAtExit")):
        return Plan()  # the user manages class sharing
    if _major(java_version) < MIN_JAVA:
        return Plan()  # Java 11 has no dynamic archives (and would refuse the options)
    root = cache / "classcache"
    try:
        # what the JVM maps must be the user's alone: a loose directory is emptied, a foreign one refused
        private_dir(cache, "lakesession cache")
        private_dir(root, "JVM class cache")
        key = archive_key(conf, java, java_version, spark_home)
        archive = root / f"{key}.jsa"
        if archive.exists() and not trusted_file(archive):
            logger.warning("JVM class cache: %s is not yours alone; removed, not mapped", archive)
            archive.unlink()
        if not archive.is_file():
            _promote(root, key, java)
        if archive.is_file():
            with contextlib.suppress(OSError):
                os.utime(archive)  # most recently used: kept by _prune
            return Plan(f"-XX:SharedArchiveFile={archive} -Xshare:auto {QUIET}", archive=archive)
        claim = _claim(root, key)
        if claim is None:
            return Plan()
        return Plan(f"-XX:ArchiveClassesAtExit={_dump_of(claim)} {QUIET}", claim=claim)
    except _UntrustedCache as exc:
        logger.warning("JVM class cache not used: %s", exc)
        return Plan()
    except OSError as exc:  # a read-only or full cache only costs speed
        logger.debug("JVM class cache unavailable: %s", exc)
        return Plan()


def with_options(conf: Mapping[str, str], options: str) -> dict[str, str]:
    """``conf`` with ``options`` added to the driver's JVM options."""
    merged = dict(conf)
    if options:
        merged[DRIVER_OPTS] = f"{conf.get(DRIVER_OPTS, '')} {options}".strip()
    return merged


def launched(launch: Plan, jvm_pid: int | None) -> None:
    """Note the JVM that writes the archive at exit: once it is gone, the next launch may promote the dump."""
    if launch.claim is not None and jvm_pid is not None:
        with contextlib.suppress(OSError):
            launch.claim.write_text(str(jvm_pid))


def archive_key(conf: Mapping[str, str], java: str, java_version: str, spark_home: str) -> str:
    """What the archive depends on: the Java, Spark's own jars and the extra jars (path, size, mtime)."""
    digest = hashlib.sha256()
    for part in (os.path.realpath(java), java_version, os.path.realpath(spark_home)):
        digest.update(part.encode() + b"\0")
    jars_dir = Path(spark_home) / "jars"
    paths = sorted(jars_dir.glob("*.jar")) if jars_dir.is_dir() else []
    paths += [Path(p) for p in conf.get("spark.jars", "").split(",") if p]
    for path in paths:
        with contextlib.suppress(OSError):
            st = path.stat()
            digest.update(f"{path}|{st.st_size}|{st.st_mtime_ns}\0".encode())
    for name in ("spark.jars.packages", "spark.jars.repositories", "spark.driver.extraClassPath"):
        digest.update(f"{name}={conf.get(name, '')}\0".encode())
    return digest.hexdigest()[:20]


def _promote(root: Path, key: str, java: str) -> None:
    """Turn a finished dump into the archive once Java has mapped it; drop dumps that don't map."""
    now = time.time()
    for dump in sorted(root.glob(f"{key}.*.dump")):
        try:
            settled = now - dump.stat().st_mtime >= SETTLED
        except FileNotFoundError:
            continue
        if not settled and _writer_alive(dump):
            continue  # its JVM may still be writing it
        if trusted_file(dump) and _maps(dump, java):
            os.replace(dump, root / f"{key}.jsa")
            logger.debug("JVM class cache ready: %s", root / f"{key}.jsa")
        else:
            dump.unlink(missing_ok=True)
        for claim in root.glob(f"{key}.*.claim"):
            claim.unlink(missing_ok=True)
        _prune(root)
        return


def _maps(dump: Path, java: str) -> bool:
    """Whether a JVM starts with ``dump`` as its archive (a truncated one crashes it)."""
    crash_log = dump.with_suffix(".hs_err")  # where a crashing JVM writes its report (not the user's cwd)
    try:
        proc = subprocess.run(
            [java, f"-XX:SharedArchiveFile={dump}", "-Xshare:auto", f"-XX:ErrorFile={crash_log}", QUIET, "-version"],
            capture_output=True,
            timeout=60,
            check=False,
            cwd=dump.parent,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        crash_log.unlink(missing_ok=True)
    return proc.returncode == 0


def _claim(root: Path, key: str) -> Path | None:
    """A dump path for this launch, unless another live launch is already writing this key's archive."""
    now = time.time()
    for other in root.glob(f"{key}.*.claim"):
        with contextlib.suppress(OSError, ValueError):
            fresh = now - other.stat().st_mtime < CLAIM_STALE
            if fresh and (
                _alive(int(other.name.split(".")[1])) or _writer_alive(_dump_of(other)) or _dump_pending(root, key)
            ):
                return None  # its Python or JVM still runs, or its dump awaits promotion
            other.unlink(missing_ok=True)
    claim = root / f"{key}.{os.getpid()}.claim"
    claim.touch()
    return claim


def _major(java_version: str) -> int:
    parts = java_version.split(".")
    digits = "".join(itertools.takewhile(str.isdigit, parts[1] if parts[0] == "1" and len(parts) > 1 else parts[0]))
    return int(digits or 0)


def _dump_of(claim: Path) -> Path:
    return claim.with_suffix(".dump")


def _writer_alive(dump: Path) -> bool:
    """Whether the JVM that writes ``dump`` may still run (its pid, noted in the claim, unknown counts as alive)."""
    try:
        return _alive(int(dump.with_suffix(".claim").read_text().strip()))
    except (OSError, ValueError):
        return True


def _dump_pending(root: Path, key: str) -> bool:
    return any(root.glob(f"{key}.*.dump"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _prune(root: Path) -> None:
    """Keep the ``KEEP`` most recently used archives."""
    archives = sorted(root.glob("*.jsa"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in archives[KEEP:]:
        old.unlink(missing_ok=True)


def settle(cache: Path, timeout: float = 120.0) -> None:
    """Wait until no JVM is writing an archive (benchmarks and tests: the next launch can then promote it)."""
    deadline = time.monotonic() + timeout
    root = cache / "classcache"
    while time.monotonic() < deadline:
        if not any(_writer_alive(claim.with_suffix(".dump")) for claim in root.glob("*.claim")):
            return
        time.sleep(0.2)
