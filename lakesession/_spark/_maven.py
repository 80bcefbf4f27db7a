"""Pinned jars from Maven Central into one folder, ``<cache>/maven``, each once, with one progress line.

Every Maven jar lakesession puts on a JVM (Iceberg's runtime and bundles, Comet's, S3A's) comes through
here: one file per artifact, whichever feature asked for it, so Comet's class path and ``spark.jars`` name
the same files. (Spark's own resolver, ``spark.jars.packages``, kept a copy in Ivy's cache and another
in its retrieve folder; ``comet=True`` then downloaded a third: 701 MB for 300 MB of jars.)

A jar is checked against its pinned sha1 (``versions.MAVEN_SHA1`` and ``comet.SHA1``), written to a
temporary file and renamed, so concurrent starts never see a partial jar; a stamp (size, mtime) spares
re-hashing it on later launches. A verified jar that Spark's Ivy retrieved before (``<cache>/ivy/jars``,
the same file name) is moved here instead of downloaded again. What is missing downloads in parallel
behind one progress line (``Progress``); a warm cache prints nothing.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TextIO

from .versions import JAR_BYTES, JarResolutionError, jar_name

MAVEN = "https://repo1.maven.org/maven2"
MAVEN_ENV = "LAKESESSION_MAVEN_URL"  # a mirror of Maven Central (same layout)
Coordinate = tuple[str, str, str]  # group, artifact, version


def maven_url() -> str:
    return (os.environ.get(MAVEN_ENV) or MAVEN).rstrip("/")


def sha1(path: Path) -> str:
    h = hashlib.sha1(usedforsecurity=False)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _mb(n: float) -> str:
    return f"{n / 1e6:.0f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB"


class Progress:
    """One line for a batch of downloads: ``lakesession: downloading 3 jars (217 MB) from Maven Central:
    120 of 217 MB, 80 MB/s``, updated in place on a terminal or in a notebook, else its first and last line.

    ``say`` (``resolve_jars(progress=...)``: the notebook's label, the CLI) gets the lines instead.
    """

    def __init__(
        self, names: Sequence[str], total: int, *, out: TextIO | None = None, say: Callable[[str], None] | None = None
    ) -> None:
        self.total, self.done, self.started = total, 0, time.monotonic()
        self._say, self._out = say, out if out is not None else sys.stderr
        self._lock = threading.Lock()
        self._last = self._said = 0.0
        self._shown = ""
        shown = ", ".join(names[:3]) + (", …" if len(names) > 3 else "")
        size = f" ({_mb(total)})" if total > 0 else ""  # build-only jars have no pinned size (java/build.py)
        self._head = (
            f"lakesession: downloading {len(names)} jar{'s' * (len(names) != 1)}{size} from Maven Central ({shown})"
        )
        self._in_place = say is None and (
            bool(getattr(self._out, "isatty", lambda: False)()) or type(self._out).__module__.startswith("ipykernel")
        )
        self._line(self._head, final=False)

    def add(self, n: int) -> None:
        with self._lock:
            self.done += n
            now = time.monotonic()
            if now - self._last >= 0.5:
                self._last = now
                self._line(self._text(), final=False)

    def _text(self) -> str:
        took = max(time.monotonic() - self.started, 1e-3)
        of = f" of {_mb(self.total)}" if self.total > 0 else ""
        return f"{self._head}: {_mb(self.done)}{of}, {self.done / took / 1e6:.0f} MB/s"

    def end(self, outcome: str = "done") -> None:
        with self._lock:
            took = time.monotonic() - self.started
            self._line(f"{self._text()} — {outcome} in {took:.1f} s", final=True)

    def _line(self, text: str, *, final: bool) -> None:
        if self._say is not None:  # a label replaces its text; a CLI prints each (at most one a second)
            if final or not self._shown or time.monotonic() - self._said >= 1.0:
                self._said = time.monotonic()
                self._say(text.removeprefix("lakesession: "))
        elif self._in_place:
            pad = " " * max(0, len(self._shown) - len(text))
            self._out.write(f"\r{text}{pad}" + ("\n" if final else ""))
            self._out.flush()
        elif final or not self._shown:  # a log file or a pipe: the first line, then the last
            self._out.write(text + "\n")
            self._out.flush()
        self._shown = text


class Store:
    """``<root>`` holding one verified file per pinned jar; ``legacy`` folders may hold one to move in."""

    def __init__(self, root: Path, pinned: dict[Coordinate, str], legacy: Sequence[Path] = ()) -> None:
        self.root, self.pinned, self.legacy = root, pinned, tuple(legacy)

    def expected(self, c: Coordinate) -> str:
        try:
            return self.pinned[c]
        except KeyError:
            raise JarResolutionError(
                f"no pinned sha1 for {':'.join(c)} (lakesession/_spark/versions.py, comet.py)"
            ) from None

    def path(self, c: Coordinate) -> Path:
        return self.root / jar_name(*c)

    def cached(self, c: Coordinate) -> Path | None:
        """The verified jar for ``c`` if the cache has it (moving in a verified legacy copy), else None."""
        expected, path = self.expected(c), self.path(c)
        if self._verified(path, expected):
            return path
        for folder in self.legacy:
            old = folder / path.name
            if old.is_file() and sha1(old) == expected:
                self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
                try:
                    os.replace(old, path)
                except OSError:
                    continue
                self._stamp(path, expected)
                return path
        return None

    def _verified(self, path: Path, expected: str) -> bool:
        try:
            st = path.stat()
        except OSError:
            return False
        stamp = path.with_suffix(".verified")
        try:
            if stamp.read_text() == f"{expected} {st.st_size} {st.st_mtime_ns}":
                return True
        except OSError:
            pass
        if sha1(path) != expected:
            return False
        self._stamp(path, expected)
        return True

    def _stamp(self, path: Path, expected: str) -> None:
        st = path.stat()
        _write_atomic(path.with_suffix(".verified"), f"{expected} {st.st_size} {st.st_mtime_ns}".encode())

    def missing(self, coords: Sequence[Coordinate]) -> list[Coordinate]:
        return [c for c in dict.fromkeys(coords) if self.cached(c) is None]

    def fetch(
        self,
        coords: Sequence[Coordinate],
        *,
        say: Callable[[str], None] | None = None,
        out: TextIO | None = None,
    ) -> list[Path]:
        """The jars for ``coords`` (in order), downloading what the cache lacks behind one progress line."""
        missing = self.missing(coords)
        if missing:
            total = sum(JAR_BYTES.get(c, 0) for c in missing)
            progress = Progress([c[1] for c in missing], total, out=out, say=say)
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            try:
                with ThreadPoolExecutor(min(4, len(missing)), thread_name_prefix="lakesession-maven") as pool:
                    for result in [pool.submit(self._download, c, progress) for c in missing]:
                        result.result()
            except BaseException:
                progress.end("failed")
                raise
            progress.end()
        return [self.path(c) for c in dict.fromkeys(coords)]

    def _download(self, c: Coordinate, progress: Progress) -> None:
        group, artifact, version = c
        expected, path = self.expected(c), self.path(c)
        url = f"{maven_url()}/{group.replace('.', '/')}/{artifact}/{version}/{artifact}-{version}.jar"
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=f".{artifact}-", suffix=".part")
        try:
            h = hashlib.sha1(usedforsecurity=False)
            with os.fdopen(fd, "wb") as f, urllib.request.urlopen(url, timeout=120) as resp:
                while chunk := resp.read(1 << 20):
                    f.write(chunk)
                    h.update(chunk)
                    progress.add(len(chunk))
            if h.hexdigest() != expected:
                raise JarResolutionError(f"{url}: sha1 {h.hexdigest()} does not match Maven Central's {expected}")
            os.replace(tmp, path)
        except OSError as exc:
            raise JarResolutionError(
                f"could not download {url} ({exc}); with no network, put the jar at {path} (or set {MAVEN_ENV} "
                "to a Maven mirror)"
            ) from exc
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        self._stamp(path, expected)


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
