"""Local caches the JVM maps or loads code from (class cache, jars, Ivy) must be the user's alone.

Why: a class-data archive or a jar in a directory another user can write is code that user runs in
this user's JVM (a planted ``.jsa`` is mapped as is; a swapped jar is loaded as is). So each cache
directory must be owned by the user and not writable by group or others. One that is the user's but
was left writable is tightened and emptied (anything in it may have been planted; it is rebuilt);
one owned by someone else is moved aside when its parent is the user's, else refused. Each case is
logged as a warning naming the directory and the fix.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import time
from pathlib import Path

logger = logging.getLogger("lakesession.cache")

LOOSE = stat.S_IWGRP | stat.S_IWOTH


class _UntrustedCache(OSError):
    """A cache directory that cannot be made the user's alone (another user's, or a file, or another user's link)."""


def _uid() -> int | None:
    return os.getuid() if hasattr(os, "getuid") else None  # Windows: ACLs, not modes (not checked here)


def private_dir(path: Path, what: str) -> Path:
    """``path`` as a directory only this user can write (created 0700 if missing), or ``_UntrustedCache``."""
    uid = _uid()
    if uid is None:
        path.mkdir(parents=True, exist_ok=True)
        return path
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass  # created meanwhile (by us or someone else): checked below like any existing one
        st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):  # e.g. a cache moved to another disk: the link must be ours, its target is checked
        if st.st_uid != uid:
            raise _UntrustedCache(f"the {what} {path} is a symlink owned by uid {st.st_uid}, not by you: remove it")
        try:
            st = os.stat(path)
        except OSError as exc:
            raise _UntrustedCache(f"the {what} {path} is a symlink to nothing usable ({exc}): remove it") from None
    if not stat.S_ISDIR(st.st_mode):
        raise _UntrustedCache(f"the {what} {path} is not a directory: remove it")
    if st.st_uid != uid:
        _set_aside(path, what, f"owned by uid {st.st_uid}, not by you (uid {uid})")
        return private_dir(path, what)
    if st.st_mode & LOOSE:
        logger.warning(
            "the %s %s was writable by other users (mode %o): tightened to 0700 and emptied, since any file "
            "in it may have been planted; it is rebuilt as needed",
            what,
            path,
            stat.S_IMODE(st.st_mode),
        )
        os.chmod(path, 0o700)
        _empty(path)
    return path


def trusted_file(path: Path) -> bool:
    """Whether ``path`` is a regular file of this user that nobody else can write."""
    uid = _uid()
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if uid is None:
        return stat.S_ISREG(st.st_mode)
    return stat.S_ISREG(st.st_mode) and st.st_uid == uid and not st.st_mode & LOOSE


def _set_aside(path: Path, what: str, why: str) -> None:
    """Move another user's directory out of the way, possible only when its parent is ours and private."""
    parent = path.parent
    try:
        pst = os.lstat(parent)
    except OSError as exc:
        raise _UntrustedCache(f"the {what} {path} is {why}, and its parent cannot be checked: {exc}") from None
    if pst.st_uid != _uid() or pst.st_mode & LOOSE:
        raise _UntrustedCache(
            f"the {what} {path} is {why}: refusing to use it. Fix: remove it, or point LAKESESSION_CACHE_DIR "
            "at a directory of your own"
        )
    aside = parent / f".untrusted-{path.name}-{os.getpid()}-{int(time.time())}"
    os.rename(path, aside)
    logger.warning("the %s %s was %s: moved aside to %s and rebuilt; remove it when convenient", what, path, why, aside)


def _empty(path: Path) -> None:
    for child in list(path.iterdir()):
        try:
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        except OSError as exc:  # e.g. another user's subdirectory we cannot empty: still never trusted
            logger.warning("could not remove %s from a tightened cache: %s", child, exc)
