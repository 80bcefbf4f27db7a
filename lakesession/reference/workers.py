"""``lakesession serve --workers N``: N server processes accepting on one listening socket.

One Python process serves on one core at most (the GIL), and a commit's work is mostly Python.
With PostgreSQL as the store, processes share everything durable exactly as replicas do
(``tests/catalog/test_replicas.py``): the database (tables, grants, audit, refresh tokens, the optimistic
commit check) and the data directory (issuer key, admin secret). The parent prepares all of that
once (migrations, admin principal, bootstrap, the S3 emulator if any), then starts the workers
(spawned, not forked: the parent has threads) and restarts any that dies.

What stays per process (see the README's serve section): pending device codes of the embedded
issuer, its rate-limit counters, and the caches (verified tokens, grants while the grants version holds,
immutable metadata files). Vended STS credentials are cached per process *and* in the database
(``vendcache``), so one worker's STS call serves all of them.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import socket
import time
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from .settings import ServerSettings

logger = logging.getLogger(__name__)

SWITCH_INTERVAL = 0.001  # seconds; Python's default is 0.005


class WorkersError(ValueError):
    """A ``--workers`` setting this store cannot honour; the message says what to change."""


def check_workers(workers: int, db_url: str | None) -> None:
    """Several processes only with PostgreSQL (SQLite has one writer at a time: they would just queue)."""
    if workers < 1:
        raise WorkersError(f"--workers must be at least 1, not {workers}")
    if workers == 1:
        return
    backend = make_url(db_url).get_backend_name() if db_url else "sqlite"
    if backend != "postgresql":
        raise WorkersError(
            f"--workers {workers} needs PostgreSQL as the catalog database (--db postgresql+psycopg://...): "
            f"the {backend} database in use allows one writer at a time, so more processes would only queue "
            "for its lock; run one worker, or point --db at PostgreSQL"
        )


def freeze_startup_objects() -> None:
    """Move everything built at start (≈ 220,000 objects: libraries, app, emulator) out of the garbage
    collector's reach: a full collection scanned them all and stalled every request for 0.2-0.3 s."""
    import gc
    import sys

    gc.collect()
    gc.freeze()
    # a short request waiting for the GIL behind a commit's Python work waits up to this long per handoff
    sys.setswitchinterval(SWITCH_INTERVAL)


def _serve(settings: ServerSettings, key_path: Path, sock: socket.socket, log_level: int) -> None:
    """A worker's body: build the app (no migrations left to run, no files to create) and serve."""
    import uvicorn

    from .app import create_app
    from .serving import server_config

    logging.basicConfig(level=log_level)
    _die_with_parent()
    app = create_app(settings, key_path=key_path)
    freeze_startup_objects()
    config = server_config(app, settings.trusted_proxies)
    uvicorn.Server(config).run(sockets=[sock])  # SIGTERM/SIGINT: a graceful stop


def _die_with_parent() -> None:
    """Linux: SIGTERM this worker when the parent dies (even by kill -9), so no orphan keeps the port."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Workers:
    """The worker processes of one ``serve``; ``poll()`` restarts the ones that died."""

    def __init__(self, settings: ServerSettings, key_path: Path, sock: socket.socket, n: int):
        self._args = (settings, key_path, sock, logging.getLogger().getEffectiveLevel())
        self._ctx = mp.get_context("spawn")
        self.n = n
        self.procs: list[Any] = []
        self.restarts = 0

    def _spawn(self) -> Any:
        proc = self._ctx.Process(target=_serve, args=self._args, name="lakesession-worker", daemon=True)
        proc.start()
        return proc

    def start(self, base_url: str, timeout: float = 120) -> None:
        """Start every worker and return once the socket answers (a worker is serving)."""
        import httpx

        self.procs = [self._spawn() for _ in range(self.n)]
        sock = self._args[2]
        host, port = sock.getsockname()[:2]
        url = f"http://{'[' + host + ']' if ':' in host else host}:{port}/healthz"
        deadline = time.monotonic() + timeout
        while True:
            if not any(p.is_alive() for p in self.procs):
                raise RuntimeError("every worker exited during start; see the errors above")
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"no worker answered {base_url} within {timeout:.0f} s")
            time.sleep(0.1)

    def poll(self) -> None:
        for i, proc in enumerate(self.procs):
            if not proc.is_alive():
                logger.warning("worker %d (pid %s) exited with %s; starting another", i, proc.pid, proc.exitcode)
                self.restarts += 1
                self.procs[i] = self._spawn()

    def stop(self, timeout: float = 10) -> None:
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()  # SIGTERM: uvicorn finishes what is in flight
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            proc.join(max(0.1, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(5)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]
