"""Command-line tools from the npm registry for tests (e.g. ``configurable-http-proxy``).

``npm_tool("configurable-http-proxy", "5.3.0")`` returns the path of the tool's
executable: the one on ``PATH`` if there is one, else a copy installed with npm
into ``$LAKESESSION_CACHE_DIR/npm/<package>@<version>`` (default
``~/.cache/lakesession/npm/...``). The cache only saves time: when it is missing
or broken the tool is installed again. Concurrent test processes take a file
lock so that only one of them runs ``npm install`` for a given package.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

from lakesession._spark.jars import cache_dir

NPM_TIMEOUT = 300.0


class NodeToolError(RuntimeError):
    """npm or node is missing, or installing the package failed."""


def npm_cache_root() -> Path:
    """Where npm tools are installed: ``<lakesession cache dir>/npm``."""
    return cache_dir() / "npm"


def npm_tool(package: str, version: str, command: str | None = None, *, use_path: bool = True) -> Path:
    """The executable ``command`` (default: the package name) of ``package@version``, installing it if needed."""
    command = command or package.rsplit("/", 1)[-1]
    if use_path:
        found = shutil.which(command)
        if found:
            return Path(found)
    prefix = npm_cache_root() / f"{package.replace('/', '__')}@{version}"
    exe = prefix / "node_modules" / ".bin" / command
    if _works(exe):
        return exe
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise NodeToolError(f"{package} needs Node.js and npm on PATH (install them, e.g. apt-get install nodejs npm)")
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix.parent / f".{prefix.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _works(exe):  # another process installed it while we waited
            return exe
        shutil.rmtree(prefix / "node_modules", ignore_errors=True)
        proc = subprocess.run(
            [
                npm,
                "install",
                "--prefix",
                str(prefix),
                "--no-audit",
                "--no-fund",
                "--no-save",
                "--loglevel=error",
                f"{package}@{version}",
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=NPM_TIMEOUT,
            env={**os.environ, "npm_config_update_notifier": "false"},
        )
        if proc.returncode != 0 or not _works(exe):
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
            raise NodeToolError(f"npm install {package}@{version} failed (exit {proc.returncode}): " + " | ".join(tail))
    return exe


def _works(exe: Path) -> bool:
    if not exe.exists():
        return False
    try:
        proc = subprocess.run([str(exe), "--version"], check=False, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0
