"""The ``own_jvm`` marker: a test module that needs a process (and a JVM) of its own runs in a child pytest.

Why: a SparkContext is launch-time for its class path and plugins (Comet, the cloud bundles, the engine
sandbox's extensions), and the suite shares one (the ``lake`` fixture) that earlier modules leave running.
As Spark's own ``run-tests.py`` does, the runner decides the isolation, not a hand-written launcher test:

- in the parent, a marked module's tests are collected and selected as usual (``-m``, ``-k``, node ids);
  at the first selected one, ONE child pytest starts for the whole module with exactly the selected node
  ids, and each test's setup/call/teardown reports are replayed in the parent as the child writes them
  (pass, fail, skip, durations, captured output), so ``-x``, ``-rfE``, ``--durations`` and the Spark
  matrix (``tests/_matrix.py``) see the real tests;
- in the child (``CHILD_ENV`` set) the tests run in-process and their reports go to ``REPORT_ENV``'s file.

A child that dies, or never reports a test, fails that test with the tail of the child's output.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

MARK = "own_jvm"
CHILD_ENV = "LAKESESSION_TEST_CHILD"  # set in a child pytest: run own_jvm modules in-process
REPORT_ENV = "LAKESESSION_OWN_JVM_REPORTS"  # the file a child appends its serialized reports to, one a line
DEADLINE = 2400  # seconds for a whole module's child (the old launchers' timeout)
TAIL = 6000  # characters of the child's output quoted when it dies or leaves a test unreported


def register(config: pytest.Config) -> None:
    """Register the parent's runner, or (in a child) the report writer: call from ``pytest_configure``."""
    if config.pluginmanager.has_plugin(MARK):
        return
    report_file = os.environ.get(REPORT_ENV)
    child = os.environ.get(CHILD_ENV) and report_file
    plugin: object = _ChildWriter(config, Path(report_file)) if child and report_file else _Parent()
    config.pluginmanager.register(plugin, MARK)


class _ChildWriter:
    """In the child: every report, serialized as pytest-reportlog does, appended to the parent's file."""

    def __init__(self, config: pytest.Config, path: Path) -> None:
        self.config, self.path = config, path

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = self.config.hook.pytest_report_to_serializable(config=self.config, report=report)
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(data, default=str) + "\n")


@dataclass
class _Child:
    """One module's child pytest: its process, its report file (read as it grows), the reports so far."""

    proc: subprocess.Popen[bytes]
    reports_file: Path
    log_file: Path
    started: float
    offset: int = 0
    reports: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)

    def read(self) -> None:
        """Take in the complete lines the child has written since the last read."""
        with self.reports_file.open("rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self.offset += len(complete)
        for line in complete.decode("utf-8").splitlines():
            data = json.loads(line)
            self.reports.setdefault(data["nodeid"], []).append(data)
            if data.get("when") == "teardown":
                self.finished.add(data["nodeid"])

    def wait_for(self, nodeid: str) -> None:
        """Until ``nodeid``'s teardown is reported, the child has exited, or the module's deadline passed."""
        while True:
            self.read()
            if nodeid in self.finished or self.proc.poll() is not None:
                self.read()
                return
            if time.monotonic() - self.started > DEADLINE:
                self.stop()
                return
            time.sleep(0.1)

    def tail(self) -> str:
        text = self.log_file.read_text(encoding="utf-8", errors="replace")
        return text[-TAIL:]

    def stop(self) -> None:
        """End the child and everything it started (its JVMs): it leads a process group of its own."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def child_nodeid(item: pytest.Item) -> str:
    """``item``'s id as the child pytest names it: pytest-xdist's ``--dist loadgroup`` appends ``@<groups>`` to
    the parent's ids of grouped tests (tests/conftest.py groups every slow module); the child runs no xdist."""
    groups = sorted(
        {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
    )
    suffix = "@" + "_".join(groups)
    return item.nodeid[: -len(suffix)] if groups and item.nodeid.endswith(suffix) else item.nodeid


class _Parent:
    """In the parent: own_jvm tests are run by one child pytest per module and their reports replayed."""

    def __init__(self) -> None:
        self.children: dict[Path, _Child] = {}
        self.tmp = Path(tempfile.mkdtemp(prefix="lakesession-own-jvm-"))

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """The child's own per-test timeout applies; the parent only waits (``DEADLINE`` for the module)."""
        if config.pluginmanager.hasplugin("timeout"):
            for item in items:
                if item.get_closest_marker(MARK) is not None:
                    item.add_marker(pytest.mark.timeout(0))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
        if item.get_closest_marker(MARK) is None:
            return None
        child = self.children.get(item.path) or self._start(item)
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        own = child_nodeid(item)
        child.wait_for(own)
        reports = [
            item.config.hook.pytest_report_from_serializable(config=item.config, data=data)
            for data in child.reports.get(own, [])
        ]
        if own not in child.finished:  # the child died, hung or never ran it
            reports.append(self._unreported(item, child))
        for report in reports:
            report.nodeid = item.nodeid  # as this run names the test (xdist's group suffix)
            item.ihook.pytest_runtest_logreport(report=report)
        # nothing was set up here for this item; what the previous item left (module, session fixtures) is
        # torn down as pytest's own teardown would (runtestprotocol), its errors reported on this item
        if item.session.shouldfail or item.session.shouldstop:
            nextitem = None
        teardown = pytest.CallInfo.from_call(lambda: item.session._setupstate.teardown_exact(nextitem), when="teardown")
        if teardown.excinfo is not None:
            item.ihook.pytest_runtest_logreport(report=pytest.TestReport.from_item_and_call(item, teardown))
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    def _start(self, item: pytest.Item) -> _Child:
        """One child for ``item``'s module, running exactly the module's selected tests, in their order."""
        config = item.config
        ids = [child_nodeid(i) for i in item.session.items if i.path == item.path and i.get_closest_marker(MARK)]
        n = len(self.children)
        reports_file, log_file = self.tmp / f"{n}-{item.path.stem}.jsonl", self.tmp / f"{n}-{item.path.stem}.log"
        reports_file.touch()
        cmd = [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", "-p", "no:randomly"]
        cmd += ["--rootdir", str(config.rootpath), "-m", MARK]  # -m: whatever addopts says, run what is named
        if config.inipath is not None:
            cmd += ["-c", str(config.inipath)]
        env = {**os.environ, CHILD_ENV: "1", REPORT_ENV: str(reports_file)}
        with log_file.open("wb") as log:
            proc = subprocess.Popen(
                [*cmd, *ids], cwd=config.rootpath, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        child = _Child(proc, reports_file, log_file, time.monotonic())
        self.children[item.path] = child
        return child

    @staticmethod
    def _unreported(item: pytest.Item, child: _Child) -> pytest.TestReport:
        """A failure naming the test and quoting the child (a call failure if the test never ran at all)."""
        code = child.proc.poll()
        why = "did not finish within the deadline" if code is None else f"exited with code {code}"
        message = f"{item.nodeid}: the own_jvm child {why} before reporting this test\n{child.tail()}"
        ran = any(data.get("when") == "call" for data in child.reports.get(child_nodeid(item), []))
        when: Literal["call", "teardown"] = "teardown" if ran else "call"
        keywords = {k: 1 for k in item.keywords}
        return pytest.TestReport(item.nodeid, item.location, keywords, "failed", message, when)

    def pytest_sessionfinish(self) -> None:
        """No child outlives the run (``-x`` stops the parent while a child may still be running)."""
        for child in self.children.values():
            child.stop()
