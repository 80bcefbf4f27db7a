"""pytest plugin: record which Spark tests passed under which Spark, jar mode and deployment.

With ``LAKESESSION_MATRIX_DIR`` set (``.ci/run`` sets it), each run writes
``<dir>/spark-<version>.json``; ``python -m tests._matrix <dir>`` renders the README's support matrix
from those files. Without the variable nothing is recorded.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

DIR_ENV = "LAKESESSION_MATRIX_DIR"
_passed: dict[str, str] = {}  # nodeid -> outcome


def _where(nodeid: str) -> tuple[str, str] | None:
    """(jar mode, deployment) a Spark test exercises; the jar mode "auto" is resolved at the end."""
    if "test_connect.py" in nodeid:
        return "auto", "Connect"
    if "test_cluster.py" in nodeid:
        return "auto", "cluster"
    if "test_spark_session_with_maven_jars" in nodeid:
        return "maven", "local"
    if "test_spark_session_with_assembled_jars" in nodeid:
        return "offline", "local"
    return "auto", "local"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not os.environ.get(DIR_ENV) or "spark" not in report.keywords:
        return
    if report.when == "call" or report.outcome != "passed":
        previous = _passed.get(report.nodeid)
        if previous in (None, "passed"):
            _passed[report.nodeid] = report.outcome


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get(DIR_ENV)
    if not out or not _passed or os.environ.get("PYTEST_XDIST_WORKER"):
        return  # under pytest-xdist the controller, which sees every worker's reports, writes the file
    import pyspark

    from lakesession._spark.jars import resolve_jars

    try:
        js = resolve_jars("auto")
        auto = (
            js.source
            if js.source != "cache"
            else ("cache (maven)" if "maven" in str(js.jars[0]) else "cache (offline)")
        )
    except Exception as exc:  # the matrix must not fail the run
        auto = f"auto ({type(exc).__name__})"
    target = Path(out) / f"spark-{pyspark.__version__}.json"
    try:  # a later run of some tests (same Spark) updates their rows and keeps the others
        tests = json.loads(target.read_text())["tests"]
    except (OSError, ValueError, KeyError):
        tests = {}
    for nodeid, outcome in _passed.items():
        mode, deployment = _where(nodeid) or ("auto", "local")
        tests[nodeid] = [auto if mode == "auto" else mode, deployment, outcome]
    Path(out).mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps({"spark": pyspark.__version__, "tests": tests}, indent=1))


def render(directory: Path) -> str:
    """The support matrix as a Markdown table: one row per (Spark, jar mode), one column per deployment."""
    lines = ["| Spark | jar mode | local | cluster | Connect |", "|---|---|---|---|---|"]
    for path in sorted(directory.glob("spark-*.json"), reverse=True):
        doc = json.loads(path.read_text())
        cells: dict[tuple[str, str], dict[str, int]] = {}
        for mode, deployment, outcome in doc["tests"].values():
            cell = cells.setdefault((mode, deployment), {"passed": 0, "failed": 0, "skipped": 0})
            cell[outcome] = cell.get(outcome, 0) + 1
        rows: dict[str, dict[str, str]] = {}
        for (mode, deployment), c in cells.items():
            if not c["passed"] and not c["failed"]:
                rows.setdefault(mode, {})[deployment] = "skipped"
                continue
            ok = "❌" if c["failed"] else "✅"
            rows.setdefault(mode, {})[deployment] = f"{ok} {c['passed']}/{c['passed'] + c['failed']} tests"
        for mode, d in sorted(rows.items()):
            cols = [d.get(x, "—") for x in ("local", "cluster", "Connect")]
            lines.append(f"| {doc['spark']} | {mode} | " + " | ".join(cols) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get(DIR_ENV, "."))))
