"""``TokenCache``: an opt-in JSON file of tokens (refresh and access), readable by the owner only.

One file holds entries keyed by ``issuer|client_id``. Every write goes to a
temporary file created with mode 0600 (``os.open``) in the same directory and
then atomically replaces the cache, so a crash never leaves a half-written or
world-readable file. The directory is created with mode 0700.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import stat
import threading
from pathlib import Path
from typing import Any

from ._errors import IdentityError

logger = logging.getLogger("lakesession.identity")


def default_cache_path() -> Path:
    """``$XDG_CACHE_HOME/lakesession/tokens.json`` (``~/.cache/lakesession/tokens.json``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "lakesession" / "tokens.json"


def cache_key(issuer: str, client_id: str) -> str:
    return f"{issuer.rstrip('/')}|{client_id}"


class TokenCache:
    """Tokens on disk (mode 0600, atomic replace), keyed by issuer + client id. Thread-safe in a process."""

    def __init__(self, path: str | os.PathLike[str] | None = None):
        self.path = Path(path) if path is not None else default_cache_path()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"TokenCache({str(self.path)!r})"

    def load(self, key: str) -> dict[str, Any] | None:
        """The entry stored under ``key`` (``access_token``, ``refresh_token``, ``expires_at``), or ``None``."""
        with self._lock:
            entry = self._read().get(key)
        return dict(entry) if isinstance(entry, dict) else None

    def save(self, key: str, entry: dict[str, Any]) -> None:
        with self._lock:
            data = self._read()
            data[key] = entry
            self._write(data)

    def delete(self, key: str) -> None:
        with self._lock:
            data = self._read()
            if data.pop(key, None) is not None:
                self._write(data)

    def keys(self) -> list[str]:
        with self._lock:
            return sorted(self._read())

    def clear(self) -> None:
        with self._lock:
            self._write({})

    def _read(self) -> dict[str, Any]:
        try:
            st = self.path.stat()
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise IdentityError(
                f"Cannot read the token cache {self.path} ({exc.strerror}). "
                "Fix its permissions or delete it and log in again."
            ) from None
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            logger.warning(
                "token cache %s is accessible to other users (mode %o); it is rewritten as 0600 on "
                "the next save — consider deleting it and logging in again",
                self.path,
                stat.S_IMODE(st.st_mode),
            )
        try:
            data = json.loads(text) if text.strip() else {}
        except ValueError:
            logger.warning("token cache %s is not valid JSON; ignoring it", self.path)
            return {}
        return data if isinstance(data, dict) else {}

    def _write(self, data: dict[str, Any]) -> None:
        directory = self.path.parent
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        name = os.path.join(directory, f".{self.path.name}.{os.getpid()}.{threading.get_ident()}.{next(_seq)}.tmp")
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(name, self.path)
        except OSError as exc:
            try:
                os.unlink(name)
            except OSError:
                pass
            raise IdentityError(
                f"Cannot write the token cache {self.path} ({exc.strerror}). "
                "Choose a writable path for TokenCache(path)."
            ) from None


_seq = itertools.count(1)  # unique temporary names within this process
