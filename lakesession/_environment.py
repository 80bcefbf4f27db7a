"""The ``LAKESESSION_*`` variables that are not session options, each with where it is read and why there.

``lakesession._settings`` resolves every session option (``Settings``) from its variable once; the
variables here are the exceptions: process-wide switches read by code that runs before any Session
exists, without one (the CLI, a child process, the JVM-launch helpers), or at a moment a Session
cannot see (the excepthook of ``import lakesession``, which may import nothing). Each names its reader
in ``read_at`` (tests/client/test_settings.py fails on a reader that is neither ``_settings`` nor
listed here). The server-side variables (``side="server"``, read under ``lakesession/reference/``), the
JupyterHub spawner's (``side="hub"``) and the trusted engine's own (``side="engine"``,
``lakesession.engine._config``) are not the client's settings and stay with their readers.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PROCESS_VARIABLES", "Variable"]


@dataclass(frozen=True)
class Variable:
    """One ``LAKESESSION_*`` environment variable: its name, the option it sets (if any), what it means."""

    name: str
    doc: str
    option: str | None = None
    side: str = "client"  # client | hub | server | engine
    read_at: str = ""  # not a session option: the module reading it at use time, and why there


_BEFORE_SESSION = "before or without any Session (CLI, child process, JVM launch)"

PROCESS_VARIABLES: tuple[Variable, ...] = (
    Variable(
        "LAKESESSION_CONFIG",
        "The config file (default `~/.config/lakesession/config.yaml`).",
        read_at="lakesession.config: where Settings.resolve reads the config file from (part of resolving)",
    ),
    Variable(
        "LAKESESSION_JARS",
        "Comma- or path-separated jar paths Spark gets instead of resolving its own (the `jars` option's "
        "`auto` mode, the default, takes them).",
        option="jars",
        read_at="lakesession._spark.jars: resolve_jars('auto') runs "
        + _BEFORE_SESSION
        + ": `lakesession jars`, the Spark Connect server's child process, the engine, the notebook's progress",
    ),
    Variable(
        "LAKESESSION_CACHE_DIR",
        "Downloads, Maven jars (`maven/`), class and lab caches (default `~/.cache/lakesession`).",
        read_at="lakesession._spark.jars, lakesession.lab._build, lakesession (excepthook): caches used "
        + _BEFORE_SESSION,
    ),
    Variable(
        "LAKESESSION_MAVEN_URL",
        "A Maven Central mirror (same layout) for the jars lakesession downloads (default `https://repo1.maven.org/maven2`).",
        read_at="lakesession._spark._maven: jar downloads " + _BEFORE_SESSION,
    ),
    Variable(
        "LAKESESSION_SPARK_LOG",
        "`console`: Spark's own log (ERROR lines with Java traces) on stderr, for debugging Spark; by default it "
        "goes to `<cache>/logs/spark-<pid>.log`, which a Spark error names.",
        read_at="lakesession._spark._sparklog: a debug switch of the JVM launch (also the engine's)",
    ),
    Variable(
        "LAKESESSION_SPARK_SECRET_FILE",
        "On a Spark standalone cluster: a file only you may read holding the cluster's `spark.authenticate.secret` "
        "(or its properties file); local mode needs none (Spark makes a secret per start).",
        read_at="lakesession._spark._seal: the JVM-launch helper, which takes an explicit environ in tests",
    ),
    Variable(
        "LAKESESSION_JVM_CLASS_CACHE",
        "`0` turns off the local JVM's class-data-sharing archive.",
        read_at="lakesession._spark._classcache: the JVM launch (also the cold-start child processes)",
    ),
    Variable(
        "LAKESESSION_JVM_DIRS",
        "Folders (path-separated) searched for a supported Java when neither `JAVA_HOME` nor `java` on PATH is one "
        "(default: `/usr/lib/jvm`, `/usr/java`, macOS's and SDKMAN's JVM folders).",
        read_at="lakesession._spark._java: the Java search " + _BEFORE_SESSION,
    ),
    Variable(
        "LAKESESSION_TRACEBACK",
        "`1` prints the full traceback of an uncaught lakesession error in a script (by default: one line, and "
        "the traceback saved to `<cache>/last-traceback.txt`).",
        read_at="lakesession (excepthook): at exit, in `import lakesession`, which may import no other module",
    ),
    Variable(
        "LAKESESSION_JARS_VERBOSE",
        "`1` shows Spark's full Ivy resolution report (a `spark.jars.packages` of yours) instead of one progress line.",
        read_at="lakesession._spark._ivyprogress: the JVM launch's Ivy output",
    ),
    Variable(
        "LAKESESSION_WIDGETS",
        "`0` renders the notebook views as HTML instead of ipywidgets.",
        read_at="lakesession.notebook._views: at each render, sessions or not",
    ),
    Variable(
        "LAKESESSION_LAB_PUBLISH",
        "`0` stops a kernel publishing its sessions' status to the JupyterLab panel.",
        read_at="lakesession.lab._publisher: one kernel-wide publisher for all its sessions",
    ),
    Variable(
        "LAKESESSION_LAB_INTERVAL",
        "Seconds between the JupyterLab publisher's checks (default 2).",
        read_at="lakesession.lab._publisher: one kernel-wide publisher for all its sessions",
    ),
)
