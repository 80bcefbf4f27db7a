"""One progress line instead of Ivy's resolution report when the Spark launcher resolves ``spark.jars.packages``,
and no JVM start-up banner (``WARNING: Using incubator modules: jdk.incubator.vector``) on the user's stderr.

lakesession's own jars no longer go through Ivy (``_maven`` downloads them once, with a progress line of its
own); this is for a ``spark.jars.packages`` the user passes in ``spark_conf``.

spark-submit resolves Maven packages with Ivy before the driver JVM starts and prints Ivy's whole
report (``:: loading settings``, every ``found``/``downloading`` line, the module table) on its
stdout and stderr — into a newcomer's notebook. ``launch_gateway`` starts that JVM with both on
pipes, each read by a thread: Ivy's lines become one line (``lakesession: resolving 2 Spark
packages …``, updated in place where the output renders ``\\r``; none at all when a warm cache
resolves at once) and go to this module's logger at DEBUG; every other line (Spark's own
warnings, a JVM crash) is written on unchanged. A resolution that fails becomes one
``JarResolutionError`` naming the artifact. ``LAKESESSION_JARS_VERBOSE=1`` (or the ``lakesession``
logger at DEBUG) shows the report as before.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from .versions import JarResolutionError

logger = logging.getLogger(__name__)

VERBOSE_ENV = "LAKESESSION_JARS_VERBOSE"
QUIET_SECONDS = 2.0  # a resolution that downloads nothing and ends sooner shows no line at all
_START = re.compile(r"^(:: loading settings ::|Ivy Default Cache set to:)")
_FOUND = re.compile(r"^\s+found (\S+?);(\S+) in ")
_DONE_ARTIFACT = re.compile(r"^\s+\[SUCCESSFUL \] (\S+?);")
_RETRIEVED = re.compile(r"^\s+(\d+) artifacts copied, (\d+) already retrieved \((\d+)kB/")
_NOT_FOUND = re.compile(r"^\s+:: (\S+;\S+): not found")
_UNRESOLVED = re.compile(r"unresolved dependency: ([^:\]]+): ([^\]]+)")
_SERVER_ERROR = re.compile(r"^\s*Server access error at url (\S+)")
# the JVM's own start-up notice for the modules Spark 4 adds (--add-modules=jdk.incubator.vector): noise to a user
BANNER = re.compile(r"^WARNING: Using incubator modules: ")


def verbose() -> bool:
    """Whether the user asked for Ivy's full report."""
    asked = os.environ.get(VERBOSE_ENV, "").strip().lower() in {"1", "true", "yes", "on"}
    return asked or logging.getLogger("lakesession").isEnabledFor(logging.DEBUG)


def _write(fd: int, line: str) -> None:
    """Where the JVM's line would have gone had it inherited this process's stdout (1) or stderr (2)."""
    try:
        os.write(fd, line.encode(errors="replace"))
    except OSError:  # a closed stdout/stderr: the line is lost, but the pipe keeps being read (the JVM never stalls)
        pass


def _mb(n: int) -> str:
    return f"{n / 1e6:.0f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB"


class IvyFilter:
    """Turns the launcher's stderr into one progress line plus everything that is not Ivy's report.

    ``feed`` takes one line at a time (the thread in ``launch_gateway`` calls it; tests may directly).
    """

    def __init__(
        self,
        packages: list[str],
        *,
        out: TextIO | None = None,
        cache: Path | None = None,
    ) -> None:
        self.packages = packages
        self._out = out if out is not None else sys.stderr
        self._lock = threading.Lock()  # stdout and stderr are read by a thread each
        self._cache = cache  # Ivy's cache: its size is the "MB so far"
        # a terminal, or a notebook (ipykernel's stream renders "\r"): one line updated in place
        self._in_place = bool(getattr(self._out, "isatty", lambda: False)()) or type(self._out).__module__.startswith(
            "ipykernel"
        )
        self.phase = "before"  # before | ivy | failed | after
        self.found = 0
        self.downloaded = 0
        self.downloading = False
        self.unresolved: list[str] = []
        self.unreachable: list[str] = []
        self.started = 0.0
        self._shown = ""

    def feed(self, line: str, forward: Callable[[str], None] = lambda line: _write(2, line)) -> None:
        """One line of the launcher's output (with its newline); ``forward`` writes on what is not Ivy's."""
        with self._lock:
            self._feed(line, forward)

    def _feed(self, line: str, forward: Callable[[str], None]) -> None:
        if self.phase == "before" and _START.match(line):
            self.phase, self.started = "ivy", time.monotonic()
            self._show()
        if self.phase == "failed":  # the launcher exits; ``failure()`` says it in one line
            logger.debug("ivy: %s", line.rstrip())
            return
        if self.phase != "ivy":
            if BANNER.match(line):
                logger.debug("jvm: %s", line.rstrip())
            else:
                forward(line)
            return
        logger.debug("ivy: %s", line.rstrip())
        if m := _FOUND.match(line):
            self.found += 1
            self._show()
        elif line.startswith("downloading "):
            self.downloading = True
            self._show()
        elif _DONE_ARTIFACT.match(line):
            self.downloaded += 1
            self._show()
        elif m := _NOT_FOUND.match(line):
            self.unresolved.append(m.group(1))
        elif m := _SERVER_ERROR.match(line):
            self.unreachable.append(m.group(1))
        elif m := _UNRESOLVED.search(line):
            if m.group(1) not in self.unresolved:
                self.unresolved.append(m.group(1))
            self.phase = "failed"
            self._end("failed")
        elif m := _RETRIEVED.match(line):
            self.phase = "after"
            self._end(f"done: {int(m.group(1)) + int(m.group(2))} jars ({_mb(int(m.group(3)) * 1024)} copied)")

    def _progress(self) -> str:
        names = ", ".join(p.split(":")[1] for p in self.packages[:2]) + (" …" if len(self.packages) > 2 else "")
        text = f"lakesession: resolving {len(self.packages)} Spark package(s) ({names}): {self.found} modules found"
        if self.downloaded:
            text += f", {self.downloaded} downloaded"
            size = self._cache_size()
            if size:
                text += f" ({_mb(size)} so far)"
        return text

    def _cache_size(self) -> int:
        if self._cache is None:
            return 0
        try:
            return sum(f.stat().st_size for f in self._cache.rglob("*.jar"))
        except OSError:
            return 0

    def _show(self) -> None:
        if not self._shown and not self.downloading and time.monotonic() - self.started < QUIET_SECONDS:
            return  # a warm Ivy cache resolves in a moment and downloads nothing: nothing to show
        text = self._progress()
        if self._in_place:
            pad = " " * max(0, len(self._shown) - len(text))
            self._out.write(f"\r{text}{pad}")
            self._out.flush()
        elif not self._shown:  # a log file or a pipe: the first line, then the last
            self._out.write(text + "\n")
        self._shown = text

    def _end(self, outcome: str) -> None:
        if not self._shown:
            return  # nothing was shown (a warm cache; a failure is the error's to say)
        took = time.monotonic() - self.started
        text = f"{self._progress()} — {outcome} in {took:.0f} s"
        self._out.write(f"\r{text}\n" if self._in_place else text + "\n")
        self._out.flush()

    def failure(self) -> JarResolutionError | None:
        """The one error to raise if Ivy could not resolve the packages (None when it did)."""
        if not self.unresolved:
            return None
        what = ", ".join(self.unresolved)
        hosts = sorted({re.sub(r"^(\w+://[^/]+).*", r"\1", u) for u in self.unreachable})
        why = f" (could not reach {', '.join(hosts)}: no network?)" if hosts else " (not found in Maven Central)"
        return JarResolutionError(
            f"Spark could not resolve {what}{why}. Fix: check the network (or a proxy) and the coordinates in "
            f"spark.jars.packages, use jars='offline' (Spark 3.5) or jars=[paths]; {VERBOSE_ENV}=1 shows Ivy's report"
        )

    def pump(self, fd: int, to: int) -> None:
        """Read ``fd`` to its end (the JVM's exit), feeding each line; what is not Ivy's goes to fd ``to``."""

        def forward(line: str) -> None:
            _write(to, line)

        with os.fdopen(fd, "r", encoding="utf-8", errors="replace", newline="") as stream:
            for line in stream:
                try:
                    self.feed(line, forward)
                except Exception:  # never lose the JVM's output to a bug here
                    forward(line)


def launch_gateway(options: Mapping[str, str], packages: list[str], cache: Path | None) -> Any:
    """pyspark's ``launch_gateway`` for ``options`` with Ivy's report turned into one progress line."""
    from pyspark import SparkConf
    from pyspark.java_gateway import launch_gateway as launch

    conf = SparkConf(loadDefaults=False)
    for key, value in options.items():
        conf.set(key, value)
    filt = IvyFilter(packages, cache=cache)
    pipes = {to: os.pipe() for to in (1, 2)}  # Ivy writes on both (pyspark 3.5: ":: loading settings" on stdout)
    readers = [
        threading.Thread(target=filt.pump, args=(read, to), name=f"lakesession-ivy-progress-{to}", daemon=True)
        for to, (read, _) in pipes.items()
    ]
    for reader in readers:  # reading from before the launch: a full pipe would stall the JVM (and the launch)
        reader.start()
    try:
        gateway = launch(conf, popen_kwargs={"stdout": pipes[1][1], "stderr": pipes[2][1]})
    except Exception:
        for _, write in pipes.values():
            os.close(write)
        for reader in readers:
            reader.join(timeout=10)  # the launcher exited: its last lines are in the pipes
        error = filt.failure()
        if error is not None:
            raise error from None
        raise  # not Ivy's failure: pyspark's own error, the JVM's output above it
    for _, write in pipes.values():
        os.close(write)  # the JVM holds its own copies until it exits
    return gateway
