"""A newcomer's clone has no ``../shared`` beside it: the project's own tests must pass there too.

The repository is cloned (its committed HEAD) into a temporary folder with nothing beside it, and
``tests/project``'s fast set runs there in a fresh interpreter importing the clone's ``lakesession``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_tests_project_passes_on_a_plain_clone(tmp_path: Path) -> None:
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an sdist or a copy): nothing to clone")
    clone = tmp_path / "repo"
    subprocess.run([git, "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    assert not (tmp_path / "shared").exists()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESESSION_")}
    env["PYTHONPATH"] = str(clone)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-m",
            "not slow",
            "-p",
            "no:cacheprovider",
            "tests/project",
            "--deselect",
            "tests/project/test_plain_clone.py",
        ],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout.splitlines()[-1] and " failed" not in done.stdout.splitlines()[-1]
