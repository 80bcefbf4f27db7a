"""The built JupyterLab extension is committed, so that no install needs Node.js (issue #42: an editable install
built it with JupyterLab in an isolated build environment plus yarn, minutes on a loaded machine).

The build hook (extension/hatch_build.py) asks for no build dependency and builds nothing when the committed
output is a build of exactly the current ``extension/`` sources; this test keeps it so.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from lakesession.lab import _build

FIX = "rebuild with `python -m lakesession.lab._build --force` and commit lakesession/lab/labextension"


def test_the_committed_extension_is_a_build_of_the_current_sources() -> None:
    assert (_build.OUTPUT / "package.json").is_file(), f"no built extension: {FIX}"
    assert _build.is_fresh(), f"extension/ changed since lakesession/lab/labextension was built: {FIX}"


def test_the_built_extension_is_tracked_by_git() -> None:
    git = shutil.which("git")
    if git is None or not (_build.ROOT / ".git").exists():
        pytest.skip("not a git checkout: an sdist carries the built extension as an artifact")
    tracked = subprocess.run(
        [git, "ls-files", "lakesession/lab/labextension"], cwd=_build.ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert "lakesession/lab/labextension/package.json" in tracked, f"not committed: {FIX}"
    assert "lakesession/lab/labextension/.lakesession-build" in tracked
    assert any(name.endswith(".js") for name in tracked), tracked
