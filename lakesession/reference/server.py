"""Run the reference catalog in-process (a uvicorn server in a background thread)."""

from __future__ import annotations

import logging
import os
import secrets
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .._wire.sockets import bind, url_host
from . import bootstrap as bootstrap_mod
from . import store
from .app import create_app
from .audit import AuditRecord
from .authz import Grant
from .context import Services
from .datadir import locked, undone_on_failure
from .directory import Principal
from .errors import Conflict
from .serving import BackgroundServer
from .settings import ServerSettings
from .vending import S3Settings
from .viewsecurity import check_trust_configuration

logger = logging.getLogger(__name__)

ADMIN_PRINCIPAL = "admin"
ADMIN_ROLE = "catalog_admin"


@dataclass(frozen=True)
class ClientCredentials:
    client_id: str
    client_secret: str

    def __repr__(self) -> str:
        return f"ClientCredentials(client_id={self.client_id!r}, client_secret='***')"


class Admin:
    """In-process administration: principals, roles, grants, tokens, device approval, audit."""

    def __init__(self, services: Services, issuer: Any):
        self._services = services
        self._issuer = issuer

    def create_principal(
        self, name: str, type: str = "user", *, client_id: str | None = None, client_secret: str | None = None
    ) -> Principal:
        return self._services.directory.create_principal(name, type, client_id, client_secret)

    def create_role(self, name: str, members: list[str] | None = None) -> None:
        self._services.directory.create_role(name, members)

    def add_member(self, role: str, principal: str) -> None:
        self._services.directory.add_member(role, principal)

    def grant(self, role: str, privilege: str, on: str) -> Grant:
        return self._services.directory.grant(role, privilege, on)

    def revoke(self, role: str, privilege: str, on: str) -> bool:
        return self._services.directory.revoke(role, privilege, on)

    def grants(self, role: str | None = None) -> list[Grant]:
        return self._services.directory.list_grants(role)

    def apply_bootstrap(self, source: str | Path | bootstrap_mod.Bootstrap) -> None:
        b = source if isinstance(source, bootstrap_mod.Bootstrap) else bootstrap_mod.load(source)
        bootstrap_mod.apply(b, self._services.directory, self._register_location if b.locations else None)

    def _register_location(self, url: str) -> str:
        from . import storage_locations
        from .routes.common import locations_of  # the catalog's index (imports pyiceberg: only when asked)

        return storage_locations.register(locations_of(self._services), url, self._services.extras)

    def register_location(self, url: str) -> str:
        """Register a raw storage prefix (``s3://bucket/prefix/``) that ``LOCATION_*`` grants can name."""
        return self._register_location(url)

    def token_for(self, principal: str, *, ttl: int | None = None, scope: str = "catalog") -> str:
        """Mint an access token for ``principal`` directly (tests, demos); needs the embedded issuer."""
        if self._issuer is None:
            raise RuntimeError("token_for needs the embedded issuer; this catalog trusts an external one")
        return self._issuer.issue_token(principal, ttl=ttl, scope=scope)["access_token"]

    def approve_device(self, user_code: str, principal: str) -> None:
        if self._issuer is None:
            raise RuntimeError("device approval needs the embedded issuer")
        self._issuer.approve_device(user_code, principal)

    def audit(
        self,
        *,
        principal: str | None = None,
        securable: str | None = None,
        since: float | None = None,
        action: str | None = None,
        limit: int = 1000,
    ) -> list[AuditRecord]:
        return self._services.audit.query(
            principal=principal, securable=securable, since=since, action=action, limit=limit
        )


def _ensure_admin(services: Services, data_dir: Path) -> ClientCredentials:
    """The built-in admin service principal; its secret lives in a 0600 file in the data dir."""
    secret_file = data_dir / "admin-credentials"
    directory = services.directory
    secret = secret_file.read_text().strip() if secret_file.exists() else ""
    if not secret:
        secret = secrets.token_urlsafe(32)
        fd = os.open(secret_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secret + "\n")
    # replicas sharing a database may start together: creating what another just created is fine
    created = False
    if directory.get_principal(ADMIN_PRINCIPAL) is None:
        try:
            directory.create_principal(ADMIN_PRINCIPAL, "service", ADMIN_PRINCIPAL, secret)
            created = True
        except Conflict:
            pass
    if not created and directory.authenticate_client(ADMIN_PRINCIPAL, secret) is None:
        directory.set_client_secret(ADMIN_PRINCIPAL, secret)
    if ADMIN_ROLE not in directory.list_roles():
        try:
            directory.create_role(ADMIN_ROLE)
        except Conflict:
            pass
    directory.add_member(ADMIN_ROLE, ADMIN_PRINCIPAL)
    directory.grant(ADMIN_ROLE, "CATALOG_MANAGE_ACCESS", "catalog")
    directory.grant(ADMIN_ROLE, "CATALOG_MANAGE_CONTENT", "catalog")
    return ClientCredentials(ADMIN_PRINCIPAL, secret)


def _check_web_identity_subject(settings: ServerSettings, services: Services, bootstrap: Any) -> None:
    """No principal may bear the subject of the catalog's storage identity (``s3.web_identity``): its tokens would
    differ from the catalog's own only by audience, the one claim a careless trust policy might not check."""
    web = getattr(settings.s3, "web_identity", None)
    if web is None:
        return
    names = [p["name"] for p in bootstrap.principals] if isinstance(bootstrap, bootstrap_mod.Bootstrap) else []
    if web.subject in names or services.directory.get_principal(web.subject) is not None:
        raise ValueError(
            f"a principal is named {web.subject!r}, the catalog's own storage identity (s3.web_identity.subject): "
            "rename the principal or choose another subject (and require it in the store's trust policy)"
        )


class ReferenceCatalog:
    """A running reference catalog. ``uri`` is what pyiceberg's RestCatalog takes as ``uri``."""

    def __init__(
        self,
        settings: ServerSettings,
        sock: Any,
        data_dir: Path,
        tmp: tempfile.TemporaryDirectory[str] | None,
        bootstrap: Any = None,
        wrap_app: Callable[[Any], Any] | None = None,
        lazy_catalog: bool = False,
        emulator: Any = None,
    ):
        self.settings = settings
        self.data_dir = data_dir
        self._tmp = tmp
        self.app = create_app(settings, key_path=data_dir / "issuer-key.json", lazy_catalog=lazy_catalog)
        services: Services = self.app.state.services
        self.services = services
        self.admin = Admin(services, self.app.state.issuer)
        self.s3_emulator: Any = emulator
        if emulator is not None:  # a registered location's bucket exists on the emulator, as on S3 (bootstrap too)
            from .storage_locations import BUCKET_MAKER

            services.extras[BUCKET_MAKER] = emulator.create_bucket
        self.sock = sock
        self.bind_url = settings.base_url
        if isinstance(bootstrap, bootstrap_mod.Bootstrap):  # refused before the admin principal is made
            bootstrap_mod.check(bootstrap, services.directory)
        self.admin_credentials = _ensure_admin(services, data_dir)
        _check_web_identity_subject(settings, services, bootstrap)
        if bootstrap is not None:
            self.admin.apply_bootstrap(bootstrap)
        others = [p.name for p in services.directory.list_principals() if p.name != ADMIN_PRINCIPAL]
        check_trust_configuration(settings, others)  # a multi-user catalog never trusts every token
        self._server = BackgroundServer(
            wrap_app(self.app) if wrap_app else self.app,
            sock,
            "lakesession-reference",
            trusted_proxies=settings.trusted_proxies,
        )

    def _start(self) -> None:
        self._server.start()

    def warm(self) -> None:
        """Load now what a ``lazy_catalog`` start deferred to the first catalog request (the catalog routers,
        pyiceberg's SqlCatalog, the S3 emulator's moto: ~0.8 CPU-s), e.g. on a thread once the machine is idle.

        Safe beside requests: one that needs the routers waits for the mount instead of routing without them.
        """
        getattr(self.app.state, "mount_catalog", lambda: None)()
        _ = self.services.catalog  # a Deferred is built here
        if self.s3_emulator is not None:
            self.s3_emulator.warm()

    @property
    def uri(self) -> str:
        return self.settings.base_url

    @property
    def issuer_uri(self) -> str:
        return self.settings.effective_issuer_url

    @property
    def warehouse(self) -> str:
        return self.settings.catalog_name

    def stop(self) -> None:
        self._server.stop()
        if self.s3_emulator is not None:
            self.s3_emulator.stop(clear=True)
        self.services.directory.engine.dispose()  # the catalog's engine too (one engine for everything)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> ReferenceCatalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ReferenceCatalog(uri={self.uri!r}, issuer={self.issuer_uri!r}, warehouse={self.settings.warehouse!r})"


def start(
    warehouse: str | None = None,
    *,
    port: int = 0,
    host: str = "127.0.0.1",
    db: str | None = None,
    data_dir: str | Path | None = None,
    bootstrap: str | Path | bootstrap_mod.Bootstrap | None = None,
    issuer_url: str | None = None,
    access_token_ttl: int = 3600,
    wrap_app: Callable[[Any], Any] | None = None,
    s3: S3Settings | None = None,
    s3_emulator: bool = False,
    s3_emulator_port: int | None = None,
    s3_emulator_persist: bool = False,
    credential_ttl: int | None = None,
    serve: bool = True,
    lazy_catalog: bool = False,
    **settings: Any,
) -> ReferenceCatalog:
    """Start a reference catalog in a background thread and return its handle.

    With no arguments everything lives in a temporary directory removed on ``stop()``:
    ``file://`` warehouse, SQLite state, issuer key. ``wrap_app`` wraps the ASGI app
    (e.g. a test recorder) before it is served.

    An ``s3://bucket/prefix`` warehouse vends credentials: pass ``s3=S3Settings(...)`` for real
    S3/STS, or ``s3_emulator=True`` for the embedded emulator (moto, enforcing session policies
    and expiry), which ``handle.s3_emulator`` then exposes; it listens on ``s3_emulator_port`` if
    given, and with ``s3_emulator_persist`` (``lakesession serve``) keeps its objects under
    ``DATA_DIR/s3-emulator``, so a restart with the same data dir serves them again.
    ``credential_ttl`` sets the lifetime of vended credentials (default: ``s3``'s own, else 3600 s).
    An ``abfss://container@account.dfs.core.windows.net/…`` warehouse vends SAS tokens (``adls=AdlsSettings``),
    a ``gs://bucket/…`` one OAuth tokens (``gcs=GcsSettings``): see ``cloudvending``.
    ``serve=False`` prepares everything (state, emulator, bound socket ``handle.sock``) but serves nothing
    in this process: ``serve --workers`` serves from worker processes. ``lazy_catalog`` (the embedded
    catalog) imports and mounts the Iceberg routers (pyiceberg) at the first request needing them, and
    starts the S3 emulator lazily (moto loaded at its first request).
    """
    if bootstrap is not None and not isinstance(bootstrap, bootstrap_mod.Bootstrap):
        bootstrap = bootstrap_mod.load(bootstrap)  # fail before binding anything
    trust = {k: settings[k] for k in ("trusted_engines", "single_user", "audience") if k in settings}
    # refuse a trust-everyone rule before binding anything (checked again with the principals below)
    check_trust_configuration(ServerSettings(warehouse="", db_url="", issuer_url=issuer_url, **trust), [])
    tmp = None
    if data_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="lakesession-")
        data_dir = tmp.name
    data_path = Path(data_dir).resolve()
    with undone_on_failure(data_path):  # a failed start leaves no half-made data dir
        if warehouse is None:
            (data_path / "warehouse").mkdir(exist_ok=True)
            warehouse = (data_path / "warehouse").as_uri()
        emulator = None
        if warehouse.startswith("s3") and s3 is None:
            if not s3_emulator:
                raise ValueError(
                    "an s3:// warehouse needs s3=S3Settings(...) for real S3/STS (serve: --s3-role-arn) "
                    "or s3_emulator=True (serve: --s3-emulator)"
                )
            persist = data_path / "s3-emulator" if s3_emulator_persist else None
            ttl = 3600 if credential_ttl is None else credential_ttl
            emulator, s3 = _start_emulator(warehouse, ttl, persist, s3_emulator_port or 0, lazy=lazy_catalog)
        elif s3 is not None and credential_ttl is not None and s3.credential_ttl != credential_ttl:
            s3 = replace(s3, credential_ttl=credential_ttl)
        for cloud in ("adls", "gcs"):  # cloudvending.AdlsSettings / GcsSettings (abfss:// and gs:// warehouses)
            if settings.get(cloud) is not None and credential_ttl is not None:
                settings[cloud] = replace(settings[cloud], credential_ttl=credential_ttl)
        if (
            warehouse.startswith(("abfss://", "abfs://", "gs://"))
            and settings.get("adls" if warehouse.startswith("abfs") else "gcs") is None
        ):
            raise ValueError(
                "an abfss:// warehouse needs adls=AdlsSettings(...) (serve: an adls: section), "
                "a gs:// warehouse gcs=GcsSettings(...) (serve: a gcs: section)"
            )
        sock = bind(host, port)
        bound_port = sock.getsockname()[1]
        # the public URL behind a proxy, else the bound address
        base_url = settings.pop("base_url", None) or f"http://{url_host(host)}:{bound_port}"
        cfg = ServerSettings(
            warehouse=warehouse.rstrip("/"),
            db_url=db or store.sqlite_url(data_path / "catalog.db"),
            base_url=base_url,
            issuer_url=issuer_url,
            access_token_ttl=access_token_ttl,
            s3=s3,
            **settings,
        )
        try:
            with locked(data_path):  # replicas sharing a data dir create its issuer key and admin secret once
                handle = ReferenceCatalog(cfg, sock, data_path, tmp, bootstrap, wrap_app, lazy_catalog, emulator)
            handle.bind_url = f"http://{url_host(host)}:{bound_port}"  # differs from uri behind a proxy
            if serve:
                handle._start()
        except BaseException:
            sock.close()
            if emulator is not None:
                emulator.stop(clear=True)
            if tmp is not None:
                tmp.cleanup()
            raise
    return handle


def _start_emulator(
    warehouse: str, credential_ttl: int, persist_dir: Path | None, port: int, *, lazy: bool = False
) -> tuple[Any, S3Settings]:
    from .storage.emulator import S3Emulator
    from .storage.policy import split_s3_location as split_s3

    try:
        emulator = S3Emulator(port=port, persist_dir=persist_dir, lazy=lazy).start()
    except OSError as e:
        raise ValueError(f"the S3 emulator cannot listen on 127.0.0.1:{port}: {e.strerror or e}") from None
    bucket, _ = split_s3(warehouse)
    try:
        emulator.create_bucket(bucket)
    except ValueError:
        emulator.stop(clear=True)
        raise
    admin = emulator.admin_credentials
    settings = S3Settings(
        role_arn=emulator.vending_role_arn,
        region=emulator.region,
        endpoint=emulator.endpoint,
        access_key_id=admin.access_key_id,
        secret_access_key=admin.secret_access_key,
        path_style=True,
        credential_ttl=credential_ttl,
        sts_realm=f"emulator-{secrets.token_hex(8)}",  # its STS sessions die with it
    )
    return emulator, settings
