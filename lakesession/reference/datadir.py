"""The server's data dir: one creator of its state at a time, and nothing half-made after a failed start."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def locked(data_path: Path) -> Iterator[None]:
    """An exclusive lock on ``DATA_DIR/.lock`` while state files are read or created (POSIX ``flock``)."""
    try:
        import fcntl
    except ImportError:  # Windows: no replicas sharing a directory there
        yield
        return
    with open(data_path / ".lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def undone_on_failure(data_path: Path) -> Iterator[None]:
    """Create ``data_path``; if the block fails, remove what it created: the whole dir if it did not exist,
    else the entries it added (a database, an issuer key, an admin secret no running catalog uses).

    Why: an operator fixing a bootstrap mistake must not find a half-initialised dir (an admin secret for a
    catalog that never ran) that the next start silently adopts."""
    before = set(os.listdir(data_path)) if data_path.is_dir() else None
    data_path.mkdir(mode=0o700, parents=True, exist_ok=True)  # private from the start (no 'tightening' warning)
    try:
        yield
    except BaseException:
        if not data_path.is_dir():
            pass  # already gone (a temporary dir cleaned up by the start itself)
        elif before is None:
            shutil.rmtree(data_path, ignore_errors=True)
        else:
            for name in set(os.listdir(data_path)) - before:
                path = data_path / name
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
        raise
