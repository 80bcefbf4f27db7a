"""Where the Spark JVM's own log goes: a file per Python process, or the console on request.

A failing Spark job is raised in Python as one line (``errors``, ``_denials``), while Spark logs the same
failure three to five times, each with a Java trace: 100+ lines on a script's stderr above that one line.
So by default Spark logs to ``<cache>/logs/spark-<pid>.log`` (``log4j2.properties``), and the raised error
names that file. ``LAKESESSION_SPARK_LOG=console`` (a debug switch) or a server (the engine, ``lakesession
connect-server``) keeps Spark's ERROR lines and traces on stderr (``log4j2-console.properties``).
"""

from __future__ import annotations

import contextlib
import os
import time
from importlib import resources
from pathlib import Path

LOG_ENV = "LAKESESSION_SPARK_LOG"
LOG_PROPERTY = "lakesession.spark.log"
KEEP_DAYS = 7  # older Spark logs are removed when a JVM starts


def console_requested() -> bool:
    """Whether the user asked for Spark's log on the console (``LAKESESSION_SPARK_LOG=console``)."""
    return os.environ.get(LOG_ENV, "").strip().lower() == "console"


def log_dir() -> Path:
    from .jars import cache_dir

    return cache_dir() / "logs"


def log_file(pid: int | None = None) -> Path:
    """This Python process's Spark log (its JVM is a child of this process)."""
    return log_dir() / f"spark-{os.getpid() if pid is None else pid}.log"


def java_options(*, console: bool = False) -> str:
    """``-D`` options for a JVM started from here: the log configuration and the log file's path."""
    if console or console_requested():
        return _define("log4j2.configurationFile", resources.files(__package__).joinpath("log4j2-console.properties"))
    path = log_file()
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.parent.chmod(0o700)  # Spark's log may quote queries, paths and plans: the user's alone
        _prune(path.parent)
    config = resources.files(__package__).joinpath("log4j2.properties")
    return f"{_define('log4j2.configurationFile', config)} {_define(LOG_PROPERTY, path)}"


def _define(name: str, value: object) -> str:
    """``-Dname=value``, double-quoted when the value has spaces (Spark splits extraJavaOptions like a shell)."""
    text = str(value)
    return f'"-D{name}={text}"' if any(c.isspace() for c in text) else f"-D{name}={text}"


def written_log() -> Path | None:
    """The Spark log this process's JVM wrote to, if it wrote one (named by a raised error)."""
    path = log_file()
    return path if path.is_file() else None


def _prune(directory: Path) -> None:
    cutoff = time.time() - KEEP_DAYS * 86400
    for old in directory.glob("spark-*.log"):
        with contextlib.suppress(OSError):
            if old.stat().st_mtime < cutoff:
                old.unlink()
