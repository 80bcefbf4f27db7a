"""The ``own_jvm`` runner itself (tests/_own_jvm.py), on a throwaway project: a marked module runs in a
child pytest of its own and the parent reports each of its tests' outcomes, as if it had run them.

Two fast pytest processes (the parent and its children), no JVM: what the Spark modules rely on.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from tests._own_jvm import CHILD_ENV, REPORT_ENV

ROOT = Path(__file__).resolve().parents[2]
INI = """\
[pytest]
markers =
    own_jvm: in a child pytest of its own
    slow: slow
"""
CONFTEST = """\
import os
from tests._own_jvm import CHILD_ENV, register

def pytest_configure(config):
    if not os.environ.get(CHILD_ENV):
        os.environ["PARENT_PID"] = str(os.getpid())
    register(config)
"""
ISOLATED = """\
import os
import pytest

pytestmark = [pytest.mark.own_jvm, pytest.mark.slow]

def test_passes_in_a_process_of_its_own():
    assert os.environ["LAKESESSION_TEST_CHILD"] and os.getpid() != int(os.environ["PARENT_PID"])

def test_fails():
    assert 1 == 2, "deliberately"
"""
DIES = """\
import os
import pytest

pytestmark = pytest.mark.own_jvm

def test_dies():
    os._exit(3)  # as a crashing JVM would take its interpreter down
"""
PLAIN = """\
import os

def test_in_the_parent():
    assert not os.environ.get("LAKESESSION_TEST_CHILD") and os.getpid() == int(os.environ["PARENT_PID"])
"""


def _run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """Run pytest on the throwaway project; the output and each test's outcome from the parent's JUnit XML."""
    for name, text in {
        "pytest.ini": INI,
        "conftest.py": CONFTEST,
        "test_isolated.py": ISOLATED,
        "test_dies.py": DIES,
        "test_plain.py": PLAIN,
    }.items():
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k not in (CHILD_ENV, REPORT_ENV)}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the venv's plugins (nbval, …) load for seconds, play no part
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    xml = tmp_path / "junit.xml"
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={xml}", *args]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    outcomes = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        failed = [c.tag for c in case if c.tag in ("failure", "error", "skipped")]
        outcomes[case.attrib["name"]] = failed[0] if failed else "passed"
    return done, outcomes


def test_a_marked_module_runs_in_a_child_and_the_parent_reports_each_outcome(tmp_path: Path) -> None:
    done, outcomes = _run(tmp_path, "-rfE", "--durations=0", "--durations-min=0")
    out = done.stdout
    assert done.returncode == 1, out
    assert outcomes == {
        "test_passes_in_a_process_of_its_own": "passed",
        "test_fails": "failure",
        "test_dies": "failure",
        "test_in_the_parent": "passed",
    }, out
    assert "2 failed, 2 passed" in out, out
    assert "FAILED test_isolated.py::test_fails - AssertionError: deliberately" in out, out
    assert "test_dies.py::test_dies: the own_jvm child exited with code 3 before reporting this test" in out, out
    assert "call     test_isolated.py::test_passes_in_a_process_of_its_own" in out, out  # --durations sees it


def test_markers_select_and_deselect_own_jvm_modules(tmp_path: Path) -> None:
    done, outcomes = _run(tmp_path, "-m", "not slow")
    assert outcomes == {"test_dies": "failure", "test_in_the_parent": "passed"}, done.stdout
    done, outcomes = _run(tmp_path, "-m", "slow", "-k", "passes")
    assert done.returncode == 0 and outcomes == {"test_passes_in_a_process_of_its_own": "passed"}, done.stdout
