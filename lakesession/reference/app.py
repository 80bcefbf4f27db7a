"""The reference catalog's ASGI app: services wired once, routers mounted, errors mapped.

``lazy_catalog=True`` (the embedded catalog, started beside a launching JVM that wants every core): the catalog
routers and pyiceberg's SqlCatalog, about a third of a start's CPU, are imported and mounted by the
first request that needs them (with the management API); ``/v1/config`` and the issuer serve from the start.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from pathlib import Path
from typing import Any, cast

from fastapi import APIRouter, FastAPI, Request, Response
from sqlalchemy.engine import make_url
from starlette.routing import Route

from .._wire.redact import quiet_botocore_bodies
from . import store
from .admission import AdmissionGate, check_limits, client_key
from .audit import AuditLog
from .cloudvending import ADLS_SCHEMES, AdlsVendor
from .context import CachingVerifier, Deferred, Services
from .directory import Directory
from .errors import BadRequest, install_error_handlers
from .gcsvending import GcsVendor
from .guard import RequestGuard
from .idp import EmbeddedIssuer, RemoteVerifier
from .logout import PATH as LOGOUT_PATH
from .logout import LogoutStore, RevokingVerifier
from .openapi import install_openapi
from .routes import config
from .settings import ServerSettings
from .timing import ServerTiming
from .timing import enabled as timing_enabled
from .vending import CredentialVendor
from .webidentity import CatalogIdentity

logger = logging.getLogger(__name__)

API_PREFIX = "/v1/{prefix}"


# paths served before the catalog routers are mounted (everything else mounts them first)
_LIGHT_PATHS = ("/v1/config", "/v1/oauth/tokens", "/healthz", LOGOUT_PATH)
_LIGHT_PREFIXES = ("/oidc/",)


def catalog_routers() -> tuple[APIRouter, ...]:
    """The Iceberg catalog's routers (importing them imports pyiceberg)."""
    from .routes import credentials, namespaces, signing, storage_locations, tables, views

    return (
        namespaces.router,
        tables.router,
        credentials.router,
        signing.router,
        views.router,
        storage_locations.router,
    )


def hot_routes() -> list[Route]:
    """Plain Starlette routes matched before FastAPI's for the hottest reads (``routes.tables.HOT_ROUTES``).

    Their FastAPI twins stay mounted: they document the endpoint (OpenAPI, ``implemented_endpoints``) and
    answer nothing the plain route answers. GET only: Starlette would add HEAD, which is tableExists."""
    from .routes import tables

    out = []
    for path, method, endpoint in tables.HOT_ROUTES:
        route = Route(path, endpoint, methods=[method], include_in_schema=False)
        route.methods = {method}
        out.append(route)
    return out


def _management_router() -> APIRouter:
    from .routes import management

    return management.router


def implemented_endpoints() -> list[str]:
    """``METHOD /v1/{prefix}/...`` for every catalog route (``config.CATALOG_ENDPOINTS`` must equal it)."""
    out: set[str] = set()
    for router in catalog_routers():
        for route in router.routes:
            path = getattr(route, "path", "")
            if path.startswith(API_PREFIX):
                for method in getattr(route, "methods", ()) or ():
                    out.add(f"{method} {path}")
    return sorted(out, key=lambda e: (e.split(" ", 1)[1], e))


def _tighten(path: Path, mode: int) -> None:
    current = stat.S_IMODE(path.stat().st_mode)
    if current & ~mode:
        logger.warning("%s had permissions %o; tightening to %o", path, current, mode)
        os.chmod(path, mode)


def private_state(db_url: str, data_dir: Path | None) -> None:
    """The catalog's own files 0600 in a 0700 data directory (they hold secret hashes, tokens' keys, audit).

    The data directory (where the issuer key lives) is the catalog's own, so it is tightened;
    an SQLite file elsewhere is created 0600 (SQLite gives its WAL and shared-memory files the
    database file's mode) and its directory, not ours to change, only warned about.
    """
    if data_dir is not None:
        data_dir.mkdir(parents=True, exist_ok=True)
        _tighten(data_dir, 0o700)
    url = make_url(db_url)
    name = url.database
    if not url.drivername.startswith("sqlite") or not name or name == ":memory:" or name.startswith("file:"):
        return
    db = Path(name).resolve()
    db.parent.mkdir(parents=True, exist_ok=True)
    os.close(os.open(db, os.O_WRONLY | os.O_CREAT, 0o600))
    for f in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm"), db.with_name(db.name + "-journal")):
        if f.exists():
            _tighten(f, 0o600)
    if (data_dir is None or db.parent != data_dir.resolve()) and stat.S_IMODE(db.parent.stat().st_mode) & 0o077:
        logger.warning("the catalog database's directory %s is accessible to other users; make it 0700", db.parent)


def build_services(
    settings: ServerSettings, *, key_path: Path | None = None, lazy_catalog: bool = False
) -> tuple[Services, EmbeddedIssuer | None]:
    private_state(settings.db_url, key_path.parent if key_path is not None else None)
    engine = store.make_engine(settings.db_url)
    cloud_vendor: Any = None  # ADLS SAS / GCS token vending (S3: CredentialVendor below)
    if settings.warehouse.startswith(ADLS_SCHEMES) and settings.adls is not None:
        cloud_vendor = AdlsVendor(settings.adls)
    elif settings.warehouse.startswith("gs://") and settings.gcs is not None:
        cloud_vendor = GcsVendor(settings.gcs)
    file_io = (
        settings.s3.catalog_file_io()
        if settings.s3 is not None
        else cloud_vendor.catalog_file_io()
        if cloud_vendor is not None
        else {}
    )
    directory = Directory(engine)
    directory.token_privileged_roles = frozenset(settings.token_privileged_roles)
    issuer: EmbeddedIssuer | None = None
    logouts: LogoutStore | None = None
    remote: RemoteVerifier | None = None
    if settings.uses_embedded_issuer:
        if settings.backchannel_logout_clients:
            raise ValueError(
                "backchannel_logout_clients is for an external issuer (issuer_url): the embedded issuer ends its "
                "own sessions. Remove backchannel_logout_clients, or set issuer_url."
            )
        issuer = EmbeddedIssuer(settings, directory, engine, key_path=key_path)
        verifier: Any = issuer
    else:  # tokens of a session the issuer logged out (back-channel logout, any replica) are refused
        remote = RemoteVerifier(settings.effective_issuer_url, settings.audience)
        logouts = LogoutStore(engine)
        verifier = RevokingVerifier(remote, logouts)
    vendor: Any = _vendor(settings, issuer)
    if vendor is not None and key_path is not None:  # the data directory workers and replicas share holds its key
        from .vendcache import SharedVendCache, load_key

        vendor.shared = SharedVendCache(
            engine, load_key(key_path.parent), vendor.s3.min_remaining, realm=vendor.s3.sts_realm
        )
    own_session = vendor.identity.file_io if vendor is not None and vendor.identity is not None else None
    if vendor is None:
        vendor = cloud_vendor

    def make_catalog() -> Any:
        from .sqlcatalog import CachingSqlCatalog

        catalog = CachingSqlCatalog(
            settings.catalog_name,
            uri=settings.db_url,
            warehouse=settings.warehouse,
            storage_credentials=own_session,
            **file_io,
        )
        catalog.engine.dispose()
        catalog.engine = engine  # one engine (WAL pragmas, one pool) for everything
        return catalog

    cache = CachingVerifier(verifier)
    if issuer is not None:  # a revocation here is seen by the next request here at once (elsewhere within 1 s)
        issuer.refresh_store.on_revoke.append(cache.forget_generation)
    if logouts is not None:
        logouts.on_record.append(cache.forget_generation)
    services = Services(
        settings=settings,
        directory=directory,
        audit=AuditLog(engine),
        catalog=cast(Any, Deferred(make_catalog)) if lazy_catalog else make_catalog(),
        verifier=cache,
        vendor=vendor,
    )
    if logouts is not None:
        services.extras.update(logouts=logouts, remote_verifier=remote)
    return services, issuer


def _vendor(settings: ServerSettings, issuer: EmbeddedIssuer | None) -> CredentialVendor | None:
    """The credential vendor; with ``s3.web_identity`` it proves the catalog's identity with its issuer's tokens."""
    s3 = settings.s3
    if s3 is None:
        return None
    quiet_botocore_bodies()  # the vending and signing clients hold the catalog's own and vended keys
    if s3.web_identity is None:
        return CredentialVendor(s3)
    if issuer is None:
        raise ValueError(
            "s3.web_identity needs the embedded issuer (it signs the catalog's tokens); this catalog trusts "
            f"the external issuer issuer_url={settings.issuer_url!r}: remove issuer_url or s3.web_identity"
        )
    if s3.web_identity.audience == settings.audience:
        raise ValueError(
            f"s3.web_identity.audience {settings.audience!r} is the catalog's own audience: its storage tokens "
            "would be access tokens to this catalog; use the audience the store's OIDC provider expects"
        )
    issuer.directory.reserved[s3.web_identity.subject] = (
        "it is the catalog's own storage identity (s3.web_identity.subject); choose another name"
    )
    identity = CatalogIdentity(
        s3.web_identity, issuer.workload_token, vending_role=s3.role_arn, region=s3.region, sts_endpoint=s3.sts_url
    )
    return CredentialVendor(s3, identity=identity)


class _MountOnFirstUse:
    """ASGI middleware: before the first request that needs the catalog routers, mount them (once).

    The mount runs on the event loop before that request is routed; if ``ReferenceCatalog.warm()`` is
    mounting them on another thread, the request waits for it (one lock), so none routes without them.
    """

    def __init__(self, app: Any, mount: Any):
        self.app, self._mount = app, mount

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if self._mount is not None and scope["type"] == "http" and _needs_catalog(scope.get("path", "")):
            self._mount()
            self._mount = None
        await self.app(scope, receive, send)


def _needs_catalog(path: str) -> bool:
    return path not in _LIGHT_PATHS and not path.startswith(_LIGHT_PREFIXES)


def create_app(settings: ServerSettings, *, key_path: Path | None = None, lazy_catalog: bool = False) -> FastAPI:
    services, issuer = build_services(settings, key_path=key_path, lazy_catalog=lazy_catalog)
    app = FastAPI(
        title="lakesession reference catalog",
        version="0.1.0",
        description="Apache Iceberg REST catalog with an embedded OIDC issuer, RBAC and a durable audit log.",
    )
    app.state.services = services
    app.state.issuer = issuer
    install_error_handlers(app)
    limits = settings.abuse
    app.add_middleware(RequestGuard, max_body_bytes=limits.max_body_bytes, max_json_depth=limits.max_json_depth)
    app.include_router(config.router)
    mounted = threading.Lock()

    def mount_catalog() -> None:
        with mounted:
            if not getattr(app.state, "catalog_mounted", False):
                for router in (*catalog_routers(), _management_router()):
                    app.include_router(router)
                app.router.routes[0:0] = hot_routes()
                app.state.catalog_mounted = True

    if lazy_catalog:
        app.add_middleware(_MountOnFirstUse, mount=mount_catalog)
    else:
        mount_catalog()
    # the outermost own layer (added last): see admission.py; a single-user catalog (the embedded default) has no one
    # to be fair to, and its one user's Spark may run many requests at once
    if settings.admission.enabled and not settings.single_user:
        check_limits(settings.admission)  # at start, not at the first request (Starlette builds middleware late)
        key_of = client_key(services.verifier, settings.principal_claim)
        app.add_middleware(AdmissionGate, limits=settings.admission, key_of=key_of)
    if timing_enabled():  # measurements only (benchmarks/load.py); outside the gate, so its wait is timed
        app.add_middleware(ServerTiming)
    if issuer is not None:
        app.include_router(issuer.router, prefix="/oidc")
    if settings.backchannel_logout_clients and "logouts" in services.extras:
        from .logout import router as logout_router

        extras = services.extras
        clients = list(settings.backchannel_logout_clients)
        app.include_router(logout_router(extras["remote_verifier"], extras["logouts"], clients, services.audit))

    @app.post("/v1/oauth/tokens", include_in_schema=False)
    async def oauth_tokens(request: Request) -> Response:
        """Deprecated Iceberg token endpoint (Iceberg Java posts form-encoded bodies here)."""
        if issuer is None:
            raise BadRequest(
                f"This catalog trusts the external issuer {settings.effective_issuer_url}; get tokens there"
            )
        return await issuer.token_endpoint(request)

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    app.state.endpoints = list(config.CATALOG_ENDPOINTS)
    app.state.mount_catalog = mount_catalog  # the OpenAPI document describes every route
    install_openapi(app)
    return app
