"""Kernel side of the JupyterLab panel: publish this kernel's sessions' ``status()`` for the server.

``start_publisher(session)`` is called at the end of every ``Session.__init__``. Outside an
IPython kernel it does nothing. Inside one, a daemon thread writes the secret-free
``Session.status()`` of every live session of this kernel to
``<dir of the kernel's connection file>/lakesession/kernel-<kernel id>.json`` (the connection
file lives in the Jupyter server's runtime dir, which is where the server extension reads):
at once, whenever it changes, and at least every ``HEARTBEAT`` seconds. The file is removed when
the kernel exits. Nothing here ever raises into the caller.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._status import SUBDIR, kernel_id_of, scrub, write_atomic

if TYPE_CHECKING:
    from ..session import Session

HEARTBEAT = 30.0
_VOLATILE = frozenset({"time", "seconds_left", "updated"})

_lock = threading.Lock()
_publisher: Publisher | None = None


def interval() -> float:
    """Seconds between checks (``LAKESESSION_LAB_INTERVAL``, default 2)."""
    try:
        return max(0.2, float(os.environ.get("LAKESESSION_LAB_INTERVAL", "2")))
    except ValueError:
        return 2.0


def kernel_context() -> tuple[str, Path] | None:
    """``(kernel id, status directory)`` when running inside an IPython kernel, else None."""
    if "ipykernel" not in sys.modules:  # cheap: plain scripts never import IPython for this
        return None
    try:
        from IPython import get_ipython

        shell = get_ipython()
        if shell is None or getattr(shell, "kernel", None) is None:
            return None
        from ipykernel.connect import get_connection_file

        connection_file = Path(get_connection_file()).resolve()
    except Exception:
        return None
    kid = kernel_id_of(connection_file)
    if kid is None:
        return None
    return kid, connection_file.parent / SUBDIR


def _fingerprint(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _fingerprint(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_fingerprint(v) for v in value]
    return value


def session_status(session: Session) -> dict[str, Any]:
    try:
        return dict(session.status())
    except Exception as e:  # a session that failed to start still shows up, without details that might leak
        return {
            "state": "error",
            "error": type(e).__name__,
            "catalog_name": getattr(session, "catalog_name", None),
            "identity": None,
            "credentials": [],
            "time": time.time(),
        }


class Publisher:
    """Publishes the status of this kernel's sessions to one file (one per process)."""

    def __init__(self, kernel_id: str, directory: Path, every: float | None = None):
        self.kernel_id = kernel_id
        self.path = directory / f"kernel-{kernel_id}.json"
        self.every = every if every is not None else interval()
        self._sessions: weakref.WeakSet[Session] = weakref.WeakSet()
        self._order: dict[int, int] = {}
        self._wake = threading.Event()
        self._publishing = threading.Lock()
        self._stop = threading.Event()
        self._last: Any = None
        self._last_write = 0.0
        self.writes = 0
        self._thread = threading.Thread(target=self._run, name="lakesession-lab-publisher", daemon=True)
        self._thread.start()
        atexit.register(self.stop)

    def add(self, session: Session) -> None:
        with _lock:
            self._order.setdefault(id(session), len(self._order))
            self._sessions.add(session)
        self._wake.set()

    def document(self) -> dict[str, Any]:
        with _lock:
            sessions = sorted(self._sessions, key=lambda s: self._order.get(id(s), 0))
        return {
            "kernel_id": self.kernel_id,
            "pid": os.getpid(),
            "updated": time.time(),
            "sessions": [session_status(s) for s in sessions],
        }

    def publish(self, force: bool = False) -> bool:
        """Write the document if it changed (or on the heartbeat); whether it wrote."""
        with self._publishing:
            doc = scrub(self.document())
            fp = json.dumps(_fingerprint(doc), sort_keys=True, default=str)
            now = time.monotonic()
            if not force and fp == self._last and now - self._last_write < HEARTBEAT:
                return False
            if self._stop.is_set():
                return False
            write_atomic(self.path, doc)
            self._last, self._last_write = fp, now
            self.writes += 1
            return True

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.publish()
            except Exception:
                pass  # a full disk or a vanished runtime dir must not disturb the kernel; retry next tick
            self._wake.wait(self.every)
            self._wake.clear()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        with self._publishing:
            pass  # a write in flight lands before the file is removed
        try:
            self.path.unlink()
        except OSError:
            pass


def start_publisher(session: Session) -> Publisher | None:
    """Publish ``session``'s status for the JupyterLab panel; a no-op outside an IPython kernel."""
    global _publisher
    try:
        if os.environ.get("LAKESESSION_LAB_PUBLISH", "1").lower() in ("0", "false", "no", "off"):
            return None
        ctx = kernel_context()
        if ctx is None:
            return None
        with _lock:
            if _publisher is None or _publisher.kernel_id != ctx[0]:
                _publisher = Publisher(*ctx)
            pub = _publisher
        pub.add(session)
        return pub
    except Exception:
        return None
