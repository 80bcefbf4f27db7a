"""Start-up as one object (``_spark/_plan.StartPlan``, named warm-ups) and Ivy's report as one progress line."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import lakesession
from lakesession._settings import ENVIRONMENT
from lakesession._spark._ivyprogress import IvyFilter
from lakesession._spark._plan import WARMUPS, StartPlan, resolve_warmups
from lakesession.errors import ConfigError, JarResolutionError, UnknownWarmupError

ROOT = Path(__file__).resolve().parents[2]

# what spark-submit (pyspark 4.1, Ivy 2.5.3) printed resolving one package into an empty Ivy cache
IVY_REPORT = """\
WARNING: Using incubator modules: jdk.incubator.vector
:: loading settings :: url = jar:file:/venv/pyspark/jars/ivy-2.5.3.jar!/org/apache/ivy/core/settings/ivysettings.xml
Ivy Default Cache set to: /tmp/ivy/cache
The jars for the packages stored in: /tmp/ivy/jars
javax.inject#javax.inject added as a dependency
:: resolving dependencies :: org.apache.spark#spark-submit-parent-932aaa2c;1.0
\tconfs: [default]
\tfound javax.inject#javax.inject;1 in central
downloading https://repo1.maven.org/maven2/javax/inject/javax.inject/1/javax.inject-1.jar ...
\t[SUCCESSFUL ] javax.inject#javax.inject;1!javax.inject.jar (81ms)
:: resolution report :: resolve 726ms :: artifacts dl 87ms
\t:: modules in use:
\tjavax.inject#javax.inject;1 from central in [default]
\t---------------------------------------------------------------------
\t|      default     |   1   |   1   |   1   |   0   ||   1   |   1   |
:: retrieving :: org.apache.spark#spark-submit-parent-932aaa2c
\tconfs: [default]
\t1 artifacts copied, 0 already retrieved (2kB/21ms)
26/11/26 20:54:08 WARN NativeCodeLoader: Unable to load native-hadoop library for your platform
"""
IVY_FAILURE = """\
:: loading settings :: url = jar:file:/venv/pyspark/jars/ivy-2.5.3.jar!/ivysettings.xml
Ivy Default Cache set to: /tmp/ivy/cache
\t:: resolution report :: resolve 1000ms :: artifacts dl 0ms
\tServer access error at url https://repo1.maven.org/maven2/javax/inject/javax.inject/999/x.pom (java.net.UnknownHostException)
\t\t::          UNRESOLVED DEPENDENCIES         ::
\t\t:: javax.inject#javax.inject;999: not found
:: USE VERBOSE OR DEBUG MESSAGE LEVEL FOR MORE DETAILS
Exception in thread "main" java.lang.RuntimeException: [unresolved dependency: javax.inject#javax.inject;999: not found]
\tat org.apache.spark.util.MavenUtils$.resolveMavenCoordinates(MavenUtils.scala:539)
"""


# -- warm-ups: named, switchable, a wrong name says the right ones ------------------------------------------
def test_warmups_default_to_all_and_are_switched_by_argument_or_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    def resolved(given: object = None) -> frozenset[str]:  # what a session runs: Settings reads the variable
        return resolve_warmups(lakesession.Settings.resolve(None, {"warmups": given}).warmups)

    monkeypatch.delenv("LAKESESSION_WARMUPS", raising=False)
    assert resolved() == resolve_warmups(None) == frozenset(WARMUPS) == {"classcache", "catalog", "embedded"}
    assert resolve_warmups(["catalog"]) == {"catalog"} and resolve_warmups([]) == frozenset()
    monkeypatch.setenv("LAKESESSION_WARMUPS", "none")
    assert resolved() == frozenset()
    monkeypatch.setenv("LAKESESSION_WARMUPS", " Embedded, classcache ")
    assert resolved() == {"embedded", "classcache"}
    assert resolved("all") == frozenset(WARMUPS)  # the argument wins over the variable
    assert "LAKESESSION_WARMUPS" in {v.name for v in ENVIRONMENT}
    assert "LAKESESSION_JARS_VERBOSE" in {v.name for v in ENVIRONMENT}


def test_an_unknown_warmup_is_refused_before_anything_starts_naming_the_valid_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(UnknownWarmupError) as caught:
        lakesession.connect(uri="http://127.0.0.1:9", token="t", warmups=["jit", "catalog"])
    assert isinstance(caught.value, ConfigError)
    message = str(caught.value)
    assert "'jit'" in message and all(name in message for name in WARMUPS) and "LAKESESSION_WARMUPS" in message
    monkeypatch.setenv("LAKESESSION_WARMUPS", "classcash")
    with pytest.raises(UnknownWarmupError, match="classcash"):
        lakesession.connect(uri="http://127.0.0.1:9", token="t")


class _Launched(Exception):
    """Stands in for the JVM launch: ``bind`` is where the plan launches Spark."""


def test_the_plan_lists_its_steps_and_passes_only_the_warmups_switched_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from lakesession import _sparkbind
    from lakesession.session import Session

    seen: list[Any] = []

    def bind(*args: object, **kwargs: Any) -> None:
        seen.append(kwargs["warmups"])
        raise _Launched

    from pyspark import SparkContext

    monkeypatch.setattr(_sparkbind, "bind", bind)
    monkeypatch.setattr(_sparkbind, "catalog_can_wait", lambda remote: True)
    monkeypatch.setattr(SparkContext, "_active_spark_context", None)  # as in a process where Spark is not running
    session = Session("http://127.0.0.1:9", None, warmups=["embedded"])
    try:
        plan = session.start_plan()
        assert isinstance(plan, StartPlan) and plan.mode == "launch" and plan.warmups == {"embedded"}
        assert plan.steps[:2] == ("jars", "launch JVM") and plan.steps[-1] == "warm-up embedded"
        assert not any(s in plan.steps for s in ("warm-up classcache", "warm-up catalog"))
        full = StartPlan("launch", frozenset(WARMUPS), True, True).steps
        assert full.index("warm-up classcache") < full.index("launch JVM") < full.index("embedded catalog")
        assert StartPlan("connect", frozenset(), False, False).steps == ("connect session", "catalog")
        with pytest.raises(_Launched):
            session.spark()
    finally:
        session.close()
    assert seen == [frozenset({"embedded"})]


def test_the_session_owns_what_the_plan_started_and_a_failed_start_leaves_no_gateway(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The plan returns the SparkSession and the gateway it started (the Session sets its own fields from them);
    a launch that fails stops the gateway started beside it: its port refuses, and nothing is kept."""
    import socket
    from urllib.parse import urlparse

    from pyspark import SparkContext

    from lakesession import _sparkbind
    from lakesession.session import Session

    monkeypatch.setattr(_sparkbind, "catalog_can_wait", lambda remote: True)
    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    session = Session("http://127.0.0.1:9", None, warmups=[])
    started: list[Any] = []
    new_gateway = session._new_gateway

    def recording() -> Any:
        started.append(new_gateway())
        return started[-1]

    monkeypatch.setattr(session, "_new_gateway", recording)
    spark, named = object(), []

    def failing(*args: object, **kwargs: Any) -> None:
        raise _Launched

    def binding(holder: object, name: str, conf: Any, **kwargs: Any) -> object:
        assert holder is session
        named.append(conf()[f"spark.sql.catalog.{name}.uri"])
        return spark

    try:
        monkeypatch.setattr(_sparkbind, "bind", failing)
        with pytest.raises(_Launched):
            session.spark()
        assert len(started) == 1 and session._gateway is None and not session.spark_started
        address = urlparse(started[0].uri)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((address.hostname, address.port), timeout=5).close()
        monkeypatch.setattr(_sparkbind, "bind", binding)
        assert session.spark() is spark and session.spark() is spark  # started once, then the session's
        assert len(started) == 2 and session.gateway is started[1] and named == [started[1].uri]
    finally:
        session.close()


# -- Ivy's report as one progress line (the filter, fed what spark-submit printed) ------------------------------
def test_ivy_report_becomes_one_progress_line_and_the_rest_passes_through() -> None:
    out, forwarded = io.StringIO(), []
    filt = IvyFilter(["javax.inject:javax.inject:1"], out=out)
    for line in IVY_REPORT.splitlines(keepends=True):
        filt.feed(line, forwarded.append)
    # Spark's own line passes through; the JVM's start-up banner (#42: noise first in every notebook) does not
    assert forwarded == [IVY_REPORT.splitlines(keepends=True)[-1]]
    shown = out.getvalue()
    assert ":: loading settings" not in shown and "resolution report" not in shown and "found javax" not in shown
    assert "lakesession: resolving 1 Spark package(s) (javax.inject): 1 modules found, 1 downloaded" in shown
    assert "done: 1 jars (2 kB copied)" in shown and filt.failure() is None
    assert shown.count("\n") == 2  # not a terminal: the first line and the last, nothing in between


def test_the_report_is_asked_for_by_variable_or_debug_logging(monkeypatch: pytest.MonkeyPatch) -> None:
    import logging

    from lakesession._spark._ivyprogress import verbose

    monkeypatch.delenv("LAKESESSION_JARS_VERBOSE", raising=False)
    logger = logging.getLogger("lakesession")
    before = logger.level
    try:
        logger.setLevel(logging.WARNING)
        assert not verbose()
        monkeypatch.setenv("LAKESESSION_JARS_VERBOSE", "1")
        assert verbose()
        monkeypatch.delenv("LAKESESSION_JARS_VERBOSE")
        logger.setLevel(logging.DEBUG)
        assert verbose()
    finally:
        logger.setLevel(before)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_in_a_terminal_the_line_is_updated_in_place() -> None:
    out = _Terminal()
    filt = IvyFilter(["org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.10.1", "a:b:1", "c:d:2"], out=out)
    for line in IVY_REPORT.splitlines(keepends=True):
        filt.feed(line, lambda _line: None)
    shown = out.getvalue()
    assert shown.count("\n") == 1 and shown.count("\r") >= 3  # one line, rewritten per module and download
    assert "resolving 3 Spark package(s) (iceberg-spark-runtime-4.1_2.13, b …)" in shown


def test_a_warm_cache_resolution_shows_nothing() -> None:
    out, forwarded = io.StringIO(), []
    warm = [
        line for line in IVY_REPORT.splitlines(keepends=True) if "downloading" not in line and "SUCCESS" not in line
    ]
    filt = IvyFilter(["javax.inject:javax.inject:1"], out=out)
    for line in (w.replace("1 artifacts copied, 0 already", "0 artifacts copied, 1 already") for w in warm):
        filt.feed(line, forwarded.append)
    assert out.getvalue() == "" and len(forwarded) == 1 and filt.phase == "after"
    assert not any("incubator" in line for line in forwarded)


def test_a_failed_resolution_is_one_error_naming_the_artifact() -> None:
    out, forwarded = io.StringIO(), []
    filt = IvyFilter(["javax.inject:javax.inject:999"], out=out)
    for line in IVY_FAILURE.splitlines(keepends=True):
        filt.feed(line, forwarded.append)
    assert forwarded == []  # the unresolved block and the launcher's stack trace are the error's to say
    error = filt.failure()
    assert isinstance(error, JarResolutionError)
    assert "javax.inject#javax.inject;999" in str(error) and "https://repo1.maven.org" in str(error)
    assert "LAKESESSION_JARS_VERBOSE" in str(error) and "\n" not in str(error)


# -- a real launcher resolving into an empty Ivy cache (Maven Central; one 2 kB jar) ---------------------------
CHILD = textwrap.dedent("""
    import sys
    from lakesession._spark.session import build_spark
    conf = {"spark.jars.packages": sys.argv[1], "spark.jars.ivy": sys.argv[2], "spark.ui.enabled": "false"}
    try:
        spark, created = build_spark(conf, master="local[1]")
    except Exception as e:
        print(f"RAISED {type(e).__name__}: {e}")
        raise SystemExit(3)
    print("JARS", spark.sparkContext.getConf().get("spark.jars"))
    print("ROWS", spark.range(3).count())
    spark.stop()
""")


def _launch(package: str, ivy: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "LAKESESSION_JARS_VERBOSE"}
    full["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), full.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-c", CHILD, package, str(ivy)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**full, **env},
    )


@pytest.mark.slow
@pytest.mark.spark
def test_fresh_ivy_cache_shows_one_progress_line_unless_verbose(tmp_path: Path) -> None:
    quiet = _launch("javax.inject:javax.inject:1", tmp_path / "ivy-quiet")
    both = quiet.stdout + quiet.stderr
    assert quiet.returncode == 0, both[-3000:]
    assert "ROWS 3" in quiet.stdout and "javax.inject_javax.inject-1.jar" in quiet.stdout  # resolved, on the classpath
    assert ":: loading settings" not in both and ":: resolution report" not in both and "[SUCCESSFUL ]" not in both
    assert "lakesession: resolving 1 Spark package(s) (javax.inject)" in quiet.stderr and "done: 1 jars" in both
    assert "WARN" in quiet.stderr  # Spark's own lines still pass through

    verbose = _launch("javax.inject:javax.inject:1", tmp_path / "ivy-verbose", LAKESESSION_JARS_VERBOSE="1")
    both = verbose.stdout + verbose.stderr
    assert verbose.returncode == 0, both[-3000:]
    assert ":: loading settings" in both and ":: resolution report" in both and "lakesession: resolving" not in both


@pytest.mark.slow
@pytest.mark.spark
def test_unresolvable_package_is_one_clear_error(tmp_path: Path) -> None:
    failed = _launch("javax.inject:javax.inject:999", tmp_path / "ivy")
    assert failed.returncode == 3, (failed.stdout + failed.stderr)[-3000:]
    assert "RAISED JarResolutionError: Spark could not resolve javax.inject#javax.inject;999" in failed.stdout
    assert "UNRESOLVED DEPENDENCIES" not in failed.stderr and "MavenUtils" not in failed.stderr
