"""A throwaway PostgreSQL server on loopback for the tests: Debian's binaries driven by pytest-postgresql.

One server per test process, started on first use and stopped at exit; each test module gets fresh
databases from :func:`new_database`. As root (CI containers) pg_ctl runs as the ``postgres`` user
through ``tests/pg_ctl_as_postgres``, with its data directory owned by that user.
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
_lock = threading.Lock()
_server: Any = None


def pg_ctl() -> str:
    """Debian's newest ``pg_ctl`` (``/usr/lib/postgresql/<v>/bin``), or a clear failure naming the fix."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    if not found:
        pytest.fail("PostgreSQL is not installed: run .ci/postgres (apt-get install -y postgresql)", pytrace=False)
    return found[-1]


def server() -> Any:
    """The running ``PostgreSQLExecutor`` (host, port, user ``postgres``, trust auth on loopback)."""
    global _server
    with _lock:
        if _server is not None:
            return _server
        from port_for import get_port
        from pytest_postgresql.executors import PostgreSQLExecutor

        executable = pg_ctl()
        base = Path(tempfile.mkdtemp(prefix="lakesession-pg-"))
        if os.geteuid() == 0:
            os.environ["LAKESESSION_PG_CTL"] = executable
            executable = str(HERE / "pg_ctl_as_postgres")
            pw = pwd.getpwnam("postgres")
            os.chown(base, pw.pw_uid, pw.pw_gid)
        executor = PostgreSQLExecutor(
            executable=executable,
            host="127.0.0.1",
            port=get_port(None),
            datadir=str(base / "data"),
            unixsocketdir=str(base),
            logfile=str(base / "postgresql.log"),
            startparams="-w",
            dbname="lakesession",
            postgres_options="-c fsync=off -c max_connections=200",
        )
        executor.start()

        def stop() -> None:
            try:
                executor.stop()
            finally:
                shutil.rmtree(base, ignore_errors=True)

        atexit.register(stop)
        _server = executor
        return executor


def new_database(prefix: str = "ls") -> str:
    """A fresh, empty database on the shared server; returns its SQLAlchemy URL (psycopg 3)."""
    import psycopg

    pg = server()
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    deadline = time.monotonic() + 60
    while True:  # the port opens before the server accepts sessions ("the database system is starting up")
        try:
            with psycopg.connect(host=pg.host, port=pg.port, user=pg.user, dbname="postgres", autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            break
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    return f"postgresql+psycopg://{pg.user}@{pg.host}:{pg.port}/{name}"
