"""The embedded default: an in-process reference catalog and a demo user, for a fresh machine.

This and ``lakesession serve`` are the client's two doors to the catalog server (lazily, only when no
catalog is configured); the rest of the client half never imports ``lakesession.reference``. The slim
``lakesession-client`` distribution leaves the server out: ``require_catalog_server`` says so in one
line instead of an ImportError from deep inside a background thread.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import secrets
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._settings import check_storage, from_environment
from .errors import CatalogServerMissingError

logger = logging.getLogger(__name__)

#: what the catalog server imports beyond the client's dependencies (the full distribution brings them)
SERVER_MODULES = ("lakesession.reference", "fastapi", "uvicorn", "sqlalchemy", "alembic", "moto")

DEMO_USER = "demo"
DEMO_ROLE = "demo_users"

_lock = threading.Lock()
_running: dict[str, Any] = {}


def home() -> Path:
    """Where the embedded catalog keeps its state by default: ``~/.local/share/lakesession/embedded`` (or under
    ``$XDG_DATA_HOME``); ``Settings`` turns the home variable into ``data_dir``."""
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg) / "lakesession" / "embedded"


def _secret(path: Path) -> str:
    """A stable per-installation demo secret, stored 0600."""
    if path.exists():
        value = path.read_text().strip()
        if value:
            return value
    value = secrets.token_urlsafe(24)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    return value


def _schema_template(base: Path) -> Path:
    """An empty catalog database at the newest schema revision: migrated (Alembic) once per revision, then copied.

    Every ``s3-emulator`` start is a brand-new database; copying this file instead of migrating saves
    the Alembic import and run (~0.2 CPU-s). It *is* a migrated database (not a ``create_all``), made
    before any principal exists, so it holds no secret.
    """
    from lakesession.reference import migrations, store

    template = base / f"schema-{migrations.HEAD}.db"
    if template.exists():
        return template
    work = Path(tempfile.mkdtemp(prefix=".schema-", dir=base))
    try:
        engine = store.make_engine(store.sqlite_url(work / "catalog.db"))  # the real migrations
        try:
            if not migrations.at_head(engine):
                raise RuntimeError(f"the migrated catalog database is not at revision {migrations.HEAD}")
        finally:
            engine.dispose()
        src, dst = sqlite3.connect(work / "catalog.db"), sqlite3.connect(work / "template.db")
        try:
            src.backup(dst)  # one consistent file, whatever the WAL held
        finally:
            src.close()
            dst.close()
        os.chmod(work / "template.db", 0o600)
        os.replace(work / "template.db", template)  # atomic: a concurrent start sees no half-written file
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for old in base.glob("schema-*.db"):  # an older lakesession's revision
        if old != template:
            old.unlink(missing_ok=True)
    return template


def _seed_database(base: Path, data: Path) -> None:
    """A new data directory's ``catalog.db`` starts as a copy of the schema template (created 0600)."""
    db = data / "catalog.db"
    if db.exists():
        return
    content = _schema_template(base).read_bytes()
    try:
        fd = os.open(db, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another start in this directory made it first
        return
    with os.fdopen(fd, "wb") as f:
        f.write(content)


@dataclass(frozen=True)
class EmbeddedCatalog:
    uri: str
    issuer: str
    warehouse: str
    handle: Any  # lakesession.reference.ReferenceCatalog
    demo_secret: str = field(repr=False)

    @property
    def token_endpoint(self) -> str:
        return f"{self.issuer}/token"


def storage_mode(storage: str | None = None) -> str:
    """``storage`` or the default, checked (``Settings`` already did for ``connect()``: ``_settings.check_storage``)."""
    return check_storage(storage)


def start_embedded(
    data_dir: str | Path | None = None,
    storage: str | None = None,
    credential_ttl: int | None = None,
    access_token_ttl: int | None = None,
) -> EmbeddedCatalog:
    """Start (once per process and data dir) the reference catalog with a demo user who may manage content.

    ``s3-emulator`` (default): an ``s3://`` warehouse on the embedded S3/STS emulator, so every
    table read and write uses vended, expiring, prefix-scoped credentials — a sandbox whose
    state lives only as long as the process. ``file``: a persistent ``file://`` warehouse in
    ``data_dir`` (no vending). Unset arguments take their ``LAKESESSION_*`` variable as ``Settings`` reads it.
    """
    from lakesession.reference import bootstrap, start

    env = from_environment()  # connect() passes its Settings' values; a direct call (benchmarks) reads them so
    mode = storage_mode(storage or env.get("storage"))
    data = Path(data_dir or env.get("data_dir") or home()).expanduser().resolve()
    ttl = credential_ttl or env.get("credential_ttl") or 3600
    token_ttl = access_token_ttl or 3600
    # a catalog started with other lifetimes is another catalog: reusing it would silently ignore them
    key = f"{data}|{mode}|{ttl}|{token_ttl}"
    with _lock:
        running = _running.get(key)
        if running is not None:
            return running
        data.mkdir(parents=True, exist_ok=True)
        base = data
        if mode == "s3-emulator":
            data = Path(tempfile.mkdtemp(prefix="session-", dir=data))  # the emulator forgets on exit: so does this
        _seed_database(base, data)
        secret = _secret(data / "demo-credentials")
        policy = bootstrap.Bootstrap(
            principals=[{"name": DEMO_USER, "type": "user", "client_id": DEMO_USER, "client_secret": secret}],
            roles=[{"name": DEMO_ROLE, "members": [DEMO_USER]}],
            grants=[{"role": DEMO_ROLE, "privilege": "CATALOG_MANAGE_CONTENT", "on": "catalog"}],
        )
        # lakesession is the engine here: its view chains (referenced-by) are honoured, so DEFINER views work
        common: dict[str, Any] = {
            "data_dir": data,
            "bootstrap": policy,
            "access_token_ttl": token_ttl,
            "trusted_engines": [{"audience": "lakesession"}],
            "trusted_proxies": [],  # loopback, no proxy: X-Forwarded-For from any local process is never believed
            "single_user": True,  # one demo user, who owns everything anyway: its own engine may be trusted
            "lazy_catalog": True,  # pyiceberg and the catalog routers at the first catalog request, not beside the JVM
        }
        if mode == "s3-emulator":
            bucket = f"lakesession-{secrets.token_hex(4)}"
            handle = start(warehouse=f"s3://{bucket}/warehouse", s3_emulator=True, credential_ttl=ttl, **common)
        else:
            handle = start(**common)
        emb = EmbeddedCatalog(handle.uri, handle.issuer_uri, handle.warehouse, handle, secret)
        _running[key] = emb
        return emb


def demo_identity(emb: EmbeddedCatalog) -> Any:
    """The demo user, logged in through the embedded issuer's client-credentials flow."""
    from lakesession.identity import ClientCredentials

    return ClientCredentials(emb.token_endpoint, DEMO_USER, emb.demo_secret, scope="catalog")


class EmbeddedStart:
    """The embedded catalog starting (and the demo user logging in) on a background thread.

    ``begin()`` starts it (idempotent); ``result()`` begins if nobody has, then waits. ``lakesession.spark()``
    begins only once the JVM is launched: the catalog's start (FastAPI, SQLite, the issuer) would otherwise
    compete for CPU with the JVM's, which is the longer of the two, and only the first catalog query needs it
    (the ``embedded`` warm-up; benchmarks/session_start.py measures it).
    """

    def __init__(self, run: Callable[[], tuple[EmbeddedCatalog, Any]]):
        self._run = run
        self._future: Future[tuple[EmbeddedCatalog, Any]] = Future()
        self._lock = threading.Lock()
        self._begun = False
        self._warming = False

    def begin(self) -> None:
        with self._lock:
            if self._begun:
                return
            self._begun = True
        threading.Thread(target=self._target, name="lakesession-embedded-start", daemon=True).start()

    def _target(self) -> None:
        try:
            self._future.set_result(self._run())
        except BaseException as e:  # surfaced to whoever waits on the session
            self._future.set_exception(e)

    def warm_later(self) -> None:
        """Once started, load on a background thread, at low OS priority, what the lazy start deferred.

        The catalog's routes, pyiceberg's SqlCatalog and the emulator's moto (~0.8 CPU-s) otherwise load
        at the user's first catalog query; niced, the JVM's own start-up work keeps the CPU first."""
        with self._lock:
            if self._warming:
                return
            self._warming = True

        def warm() -> None:
            with contextlib.suppress(OSError, AttributeError):  # per-thread nice: Linux
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
            try:
                emb, _ = self._future.result()
                emb.handle.warm()
            except Exception as exc:  # the start's own failure reaches whoever waits on the session
                logger.debug("warming the embedded catalog failed: %s", type(exc).__name__)

        threading.Thread(target=warm, name="lakesession-embedded-warm", daemon=True).start()

    def done(self) -> bool:
        return self._future.done()

    def result(self, timeout: float | None = None) -> tuple[EmbeddedCatalog, Any]:
        self.begin()
        return self._future.result(timeout)


def require_catalog_server(wanted: str) -> None:
    """Raise ``CatalogServerMissingError`` unless the catalog server and its stack are installed.

    Looks the modules up without importing them: the embedded start imports them on a background thread."""
    import importlib.util

    for name in SERVER_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise CatalogServerMissingError(wanted, f"no module {name!r}")


def start_embedded_async(data_dir: str | Path | None = None, *, begin: bool = True, **options: Any) -> EmbeddedStart:
    """Start the embedded catalog and log the demo user in on a background thread (now, or at
    ``begin()`` / the first ``result()`` when ``begin=False``)."""
    require_catalog_server("The embedded default catalog")

    def run() -> tuple[EmbeddedCatalog, Any]:
        emb = start_embedded(data_dir, **options)
        identity = demo_identity(emb)
        identity.token()  # log in now: the first catalog call then finds a token ready
        return emb, identity

    start = EmbeddedStart(run)
    if begin:
        start.begin()
    return start


def stop_all() -> None:
    with _lock:
        for emb in _running.values():
            emb.handle.stop()
            if emb.handle.s3_emulator is not None:
                shutil.rmtree(emb.handle.data_dir, ignore_errors=True)
        _running.clear()


atexit.register(stop_all)
