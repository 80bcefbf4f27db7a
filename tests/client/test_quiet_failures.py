"""A store denial in Spark, as a plain script sees it: one line, not Spark's 133 lines of log above it.

Before: a read-only principal's ``INSERT`` raised the one good ``StorageAccessError`` line, but Spark had
already printed its own ERROR lines for the failed task, stage and write (with 116 Java frames) to stderr,
and ``traceback.format_exception(e)`` / ``logging.exception`` gave 296 lines (the Java error was the
chained cause). Now Spark's log goes to a file the error names; the traceback is a few lines; the Java
error is ``e.java_error``.

The script runs in a child process (a JVM of its own, its stderr counted as a terminal would show it)
against a reference catalog on the S3 emulator, whose moto enforces the read-only session policy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakesession._spark import _sparklog
from lakesession.reference import ReferenceCatalog
from tests.factories import ROWS, SCHEMA, make_catalog, shop_policy, vended_catalog

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import json, logging, sys, traceback
    import lakesession
    from lakesession.errors import StorageAccessError

    session = lakesession.connect(uri=sys.argv[1], credential="reader:reader-secret-qf", token_url=sys.argv[2],
                                  warehouse="lakesession", catalog_name="lake", spark_conf={"spark.ui.enabled": "false"})
    spark = session.spark()
    rows = spark.sql("SELECT count(*) FROM lake.shop.orders").collect()[0][0]
    try:
        spark.sql("INSERT INTO lake.shop.orders VALUES (3, 'fig')")
    except StorageAccessError as e:
        print(e, file=sys.stderr)  # what a script that reports the error shows
        handler = logging.StreamHandler(sys.stdout)
        logging.getLogger("script").addHandler(handler)
        logging.getLogger("script").exception("the insert failed")
        report = {"rows": rows, "traceback": traceback.format_exception(e), "log": e.log,
                  "java": type(e.java_error).__name__, "table": e.table, "secret": session.gateway.secret}
        print("REPORT " + json.dumps(report))
    session.close()
    """
)


@pytest.fixture(scope="module")
def cat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    with make_catalog(shop_policy("qf"), bucket="quiet", data_dir=tmp_path_factory.mktemp("quiet")) as handle:
        etl = vended_catalog(handle, "etl", "etl:etl-secret-qf")
        etl.create_namespace("shop")
        etl.create_table(("shop", "orders"), SCHEMA).append(ROWS)
        yield handle


def test_a_store_denial_in_a_script_is_a_few_lines(cat: ReferenceCatalog, tmp_path: Path) -> None:
    script = tmp_path / "insert.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LAKESESSION_SPARK_LOG"))}
    done = subprocess.run(
        [sys.executable, str(script), cat.uri, f"{cat.issuer_uri}/token"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    report_lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and report_lines, done.stdout[-3000:] + done.stderr[-6000:]
    report = json.loads(report_lines[0].removeprefix("REPORT "))
    assert report["rows"] == 2 and report["table"] == "shop.orders" and report["java"] == "Py4JJavaError"
    stderr = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(stderr) <= 5, "\n".join(stderr)
    assert any("refused to write table shop.orders as reader" in line for line in stderr), stderr
    assert not any("\tat " in line or line.startswith("java.") for line in stderr), stderr
    formatted = "".join(report["traceback"]).splitlines()
    assert len(formatted) <= 30 and "Py4JJavaError" not in "\n".join(formatted), "\n".join(formatted)
    logged = done.stdout.split("the insert failed", 1)[1].split("REPORT ", 1)[0].strip().splitlines()
    assert 1 <= len(logged) <= 30, logged  # logging.exception: the same short traceback
    # Spark's own lines about it are in the log file the error names (and no secret is)
    log = Path(report["log"])
    assert log.is_file() and str(log) in stderr[-1] and log.name == "spark-" + log.stem.split("-", 1)[1] + ".log"
    text = log.read_text()
    assert "ERROR" in text and "Access Denied" in text and "\tat " in text
    assert report["secret"] not in text and "reader-secret-qf" not in text
    log.unlink()


def test_the_debug_switch_puts_spark_s_log_back_on_the_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_sparklog.LOG_ENV, raising=False)
    quiet = _sparklog.java_options()
    assert "log4j2.properties" in quiet and f"-D{_sparklog.LOG_PROPERTY}={_sparklog.log_file()}" in quiet
    monkeypatch.setenv(_sparklog.LOG_ENV, "console")
    loud = _sparklog.java_options()
    assert "log4j2-console.properties" in loud and _sparklog.LOG_PROPERTY not in loud
    config = Path(loud.split("=", 1)[1]).read_text()
    assert "appender.console.target = SYSTEM_ERR" in config and "%ex" in config  # traces on stderr
