"""``Session``: one identity, one catalog, one gateway, and the SparkSession and tables built on them."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ._reports import Reports
from ._settings import check_access
from .credentials import CredentialStore
from .errors import ConfigError, SessionClosedError
from .gateway import AccessLog, Gateway, gateway_clients

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pandas as pd
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame, SparkSession

    from ._spark._plan import StartInput, StartPlan
    from .embedded import EmbeddedStart
    from .identity import TokenSource


class Session:
    """A user's session against one Iceberg REST catalog.

    One identity per Spark catalog: the SparkSession ``spark()`` returns acts for this session's
    identity only. Its catalog is bound to this session's gateway; a second Session in the
    process (another user, ``%lakesession login`` as someone else) gets a SparkSession of its
    own (``newSession()`` of the running SparkContext, with a fresh catalog manager) — Spark
    caches catalog plugins by name, so re-pointing one shared SparkSession would keep serving
    the first user. Closing a session stops its gateway: its SparkSession's catalog then fails
    on first use instead of acting for anyone. See ``lakesession._sparkbind``.

    Args:
        uri: The catalog's base URI (what pyiceberg takes as ``uri``).
        identity: A token source (``lakesession.identity``) that yields the user's fresh access token.
        warehouse: The warehouse to ask the catalog for.
        catalog_name: Name of the catalog inside Spark (``lake`` by default, also the default catalog
            of this session's SparkSession — and of no other).
        jars: Jar mode for Spark (``auto``, ``offline``, ``maven``, ``cache``) or explicit paths.
        master: Spark master (``local[*]`` by default); ``remote`` for Spark Connect.
        engine: The platform's trusted engine (``sc://engine.internal:15002/;use_ssl=true``, ``lakesession
            engine``): ``sql()`` runs queries that read DEFINER views there (your own Spark is not a trusted
            engine in a multi-user catalog); ``engine()`` opens a Connect session on it acting as you.
        gateway_host: Bind address of the gateway (loopback by default; routable for cluster mode).
        gateway_clients: Addresses or CIDR networks allowed to connect to a gateway on a routable address
            (the Spark Connect server's driver and executors; ``connect()`` also reads ``LAKESESSION_GATEWAY_CLIENTS``,
            comma-separated). Default: the Connect server's host, and loopback.
        assumed_credential_ttl: Seconds to assume vended keys live when the catalog states no expiry
            (Nessie 0.99): pyiceberg tables and the JVM then refresh them (by reload) ahead of it. Set it at
            most to the catalog's real lifetime; by default pyiceberg refreshes such keys only on demand
            and the JVM keeps each load's keys (every query reloads its tables).
        access: How Spark and ``table()`` reach storage: ``vended-credentials`` (per-table credentials
            from the catalog) or ``remote-signing`` (no storage credentials at all: the catalog signs
            each S3 request; Spark's signer calls go through the gateway, as the user).
        comet: Apache DataFusion Comet's native scans, with credentials from the gateway, and raw
            ``s3a://`` paths (docs/how-to/comet.md). Spark 4.1 only; a ConfigError elsewhere.
        clouds: Iceberg's Azure/GCP bundles to give Spark (``adls``, ``gcs``, ``all``; ``connect()``: ``LAKESESSION_CLOUDS``),
            beyond those the warehouse and catalog settings call for (docs/how-to/jars.md).
        warmups: Start-up warm-ups to run (``lakesession._spark._plan.WARMUPS``; default all;
            ``connect()``: ``LAKESESSION_WARMUPS``); an unknown name is an ``UnknownWarmupError``.
    """

    def __init__(
        self,
        uri: str | None,
        identity: TokenSource | None,
        *,
        warehouse: str | None = None,
        catalog_name: str = "lake",
        jars: Any = None,
        master: str | None = None,
        remote: str | None = None,
        engine: str | None = None,
        gateway_host: str | None = None,
        gateway_clients: list[str] | None = None,
        spark_conf: dict[str, str] | None = None,
        embedded: Any = None,
        pending: EmbeddedStart | None = None,
        gateway_options: dict[str, Any] | None = None,
        assumed_credential_ttl: float | None = None,
        access: str = "vended-credentials",
        comet: bool = False,
        warmups: Sequence[str] | None = None,
        clouds: str | Sequence[str] | None = None,
    ):
        if comet:
            from ._spark.comet import check_available

            check_available(remote)  # before anything starts: a Spark line without Comet is a ConfigError
        self._comet = comet
        from ._spark.versions import parse_clouds

        self._clouds = None if clouds is None else parse_clouds(clouds)  # a bad name fails here
        from ._spark._plan import resolve_warmups

        self.warmups = resolve_warmups(warmups)  # a name that does not exist fails here, before anything starts
        self.access = check_access(access)
        self._uri = uri.rstrip("/") if uri else None
        self._identity = identity
        self._pending = pending  # (embedded catalog, identity) still starting in the background
        self.warehouse = warehouse
        self.catalog_name = catalog_name
        self._jars = jars
        self._master = master
        self._remote = remote
        if engine:
            from ._engineclient import check_engine_url

            check_engine_url(engine)  # a plaintext token off loopback fails here, before anything starts
        self._engine_url = engine or None
        self._engine_spark: Any = None
        self._gateway_host = gateway_host or "127.0.0.1"  # its variable: Settings
        self._gateway_clients = list(gateway_clients) if gateway_clients is not None else None
        self._spark_conf = dict(spark_conf or {})
        self._embedded = embedded
        self.access_log = AccessLog()
        self.credential_store = CredentialStore(assumed_ttl=assumed_credential_ttl)
        self.reports = Reports(self)
        self._gateway_options = dict(gateway_options or {})
        self._gateway: Gateway | None = None
        self._spark: SparkSession | None = None
        self._closed = False
        self._catalog: RestCatalog | None = None
        self._lock = threading.RLock()
        self._chain_catalogs: set[str] = set()
        try:  # the JupyterLab panel: publish status() when inside an IPython kernel (no-op elsewhere, never raises)
            from .lab._publisher import start_publisher

            start_publisher(self)
        except Exception:
            pass

    def _await_embedded(self) -> None:
        """Wait for the embedded catalog still starting in the background (if any) and take its uri and identity."""
        pending = self._pending
        if pending is not None:
            emb, identity = pending.result()
            self._embedded, self._identity, self._uri = emb, identity, emb.uri
            self.warehouse = self.warehouse or emb.warehouse
            self._pending = None

    @property
    def embedded(self) -> Any:
        """The embedded catalog behind this session (waits for it to finish starting), or None."""
        self._await_embedded()
        return self._embedded

    @property
    def uri(self) -> str:
        self._await_embedded()
        assert self._uri is not None
        return self._uri

    @property
    def identity(self) -> TokenSource:
        """The token source acting as the user (principal, issuer, expiry via ``describe()``)."""
        self._await_embedded()
        assert self._identity is not None
        return self._identity

    @property
    def starting(self) -> bool:
        """True while the embedded catalog behind this session is still starting."""
        return self._pending is not None and not self._pending.done()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def spark_started(self) -> bool:
        """Whether ``spark()`` has built this session's SparkSession (without building it)."""
        return self._spark is not None

    def _token(self) -> str:
        return self.identity.token()

    def _invalidate(self) -> None:
        self.identity.invalidate()

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError(
                f"This session ({self!r}) was closed, so it no longer acts for anyone. "
                "Fix: use lakesession.current_session(), or lakesession.connect(...) again."
            )

    # -- the gateway the JVM talks to ---------------------------------------
    @property
    def gateway(self) -> Gateway:
        with self._lock:
            self._check_open()
            if self._gateway is None:
                self._gateway = self._new_gateway()
            return self._gateway

    def _new_gateway(self) -> Gateway:
        # upstream and token resolve lazily: an embedded catalog may still be starting
        return Gateway(
            lambda: self.uri,
            self._token,
            invalidate=self._invalidate,
            host=self._gateway_host,
            access_log=self.access_log,
            assumed_credential_ttl=self.credential_store.assumed_ttl,
            access=self.access if self.access == "remote-signing" else None,
            allowed_clients=gateway_clients(self._gateway_host, self._gateway_clients, self._remote),
            **self._gateway_options,
        ).start()

    # -- Spark ----------------------------------------------------------------
    def spark(self) -> SparkSession:
        """The SparkSession acting as this session's user (created once, then reused).

        The first Session of a process starts Spark; later ones get their own SparkSession on the
        running SparkContext (one identity per Spark catalog), so no other SparkSession's catalogs
        or default catalog change. How it comes up — jars, JVM, gateway, embedded catalog, warm-ups —
        is a ``StartPlan`` (``lakesession._spark._plan``): ``start_plan()`` shows it without running it.
        """
        with self._lock:
            self._check_open()
            if self._spark is None:
                from ._spark._plan import StartPlan

                start = self._start_input()
                started = StartPlan.of(start).run(start)  # the plan returns what it started; this session owns it
                self._gateway, self._spark = started.gateway, started.spark
            from . import _sparkbind

            # as pyspark's getOrCreate(): the session asked for is this thread's active one, or the catalog
            # API (spark.catalog.currentCatalog()) resolves through whichever Session last ran createDataFrame
            _sparkbind.activate(self._spark)
            return self._spark

    def start_plan(self) -> StartPlan:
        """The steps ``spark()`` would take now (``.steps``), and which warm-ups run; starts nothing."""
        from ._spark._plan import StartPlan

        return StartPlan.of(self._start_input())

    def _start_input(self) -> StartInput:
        """What a start reads of this session, once: the plan gets this, never the session's fields."""
        from ._spark._plan import StartInput

        return StartInput(
            holder=self,
            catalog_name=self.catalog_name,
            warehouse=self.warehouse,
            access=self.access,
            uri=self._uri,
            token=self._token,
            jars=self._jars,
            master=self._master,
            remote=self._remote,
            comet=self._comet,
            clouds=self._clouds,
            spark_conf=self._spark_conf,
            warmups=self.warmups,
            new_gateway=self._new_gateway,
            gateway=self._gateway,
            pending=self._pending,
            embedded=self._embedded is not None,
        )

    # -- Python-side access (pyiceberg) ----------------------------------------
    @property
    def catalog(self) -> RestCatalog:
        """pyiceberg's RestCatalog acting as this session's user (direct to the catalog)."""
        with self._lock:
            if self._catalog is None:
                from .catalog import rest_catalog

                self._catalog = rest_catalog(self.catalog_name, self.uri, self.identity, warehouse=self.warehouse)
            return self._catalog

    def table(self, name: str | Sequence[str], *, access: str | None = None, mode: str | None = None) -> Table:
        """Load ``ns.table`` with pyiceberg, its storage credentials refreshed ahead of expiry.

        ``name`` may also be a tuple or list of levels, e.g. ``("a.b", "c", "t")``: the way to name a
        namespace level that contains '.' (the string form splits on every dot).

        ``access="remote-signing"`` holds no storage credentials at all: the catalog signs each request
        (default: the session's ``access``). A view is not a table: ``view()`` reads one (through Spark).
        """
        from pyiceberg.exceptions import NoSuchTableError, RESTError

        from .catalog._tablerefusal import explain_refusal
        from .catalog._tables import load_table

        catalog = self.catalog  # first: its start fetches the token that names the principal
        principal = getattr(self.identity, "principal", None)
        try:
            return load_table(
                catalog,
                name,
                self.credential_store,
                self._token,
                self.uri,
                access=access or self.access,
                mode=mode,
                principal=principal,
            )
        except (NoSuchTableError, RESTError) as exc:
            explained = explain_refusal(self, name, exc, principal)
            if explained is None:
                raise
            raise explained[0] from explained[1]

    # -- "did you mean" (catalog/_names.py): also what Spark's error conversion asks of a session -----------------
    def _listable(self, namespace: tuple[str, ...]) -> list[str]:
        from .catalog._names import listable

        return listable(self.catalog, self.reports, namespace)

    def _listed(self, namespace: tuple[str, ...]) -> list[str] | None:
        from .catalog._names import listed

        return listed(self.catalog, namespace)

    def _granted(self) -> list[str]:
        from .catalog._names import granted

        return granted(self.reports)

    def _is_view(self, ident: tuple[str, ...]) -> bool:
        """Whether ``ident`` is a view (False when the catalog will not say: a revoked user may not ask)."""
        from pyiceberg.exceptions import RESTError

        try:
            return bool(self.catalog.view_exists(ident))
        except RESTError:
            return False

    def view(self, name: str | Sequence[str]) -> DataFrame:
        """A Spark DataFrame over view ``ns.view``, its chain evaluated by the catalog as in ``sql()``."""
        from .catalog._expand import quoted

        ident = tuple(name.split(".")) if isinstance(name, str) else tuple(name)
        return self.sql(f"SELECT * FROM {quoted((self.catalog_name, *ident))}")

    def sql(self, query: str, **kwargs: Any) -> DataFrame:
        """Spark SQL as this user, with view chains evaluated by the catalog (DEFINER views work).

        With an ``engine`` configured, a query that reads a DEFINER view runs on the platform's trusted
        engine (a Connect DataFrame; ``accesses()`` lists it with ``via="engine"``): in a multi-user
        catalog your own Spark is not trusted to act as a view's owner. Everything else runs here.

        Each view the query reads is expanded into its SQL, and each table below it is loaded
        through a chain-scoped catalog (``<catalog>__chain_<id>``) whose loads carry the chain in
        ``referenced-by``: the catalog checks every step for the right user. Those tables are
        never loaded into the main catalog, so a direct reference to one (in this query or a
        later one) is still checked as the user alone. Plain ``spark.sql`` keeps INVOKER semantics.
        """
        from ._spark._viewsql import expanded_sql

        if self._engine_url is not None:
            from ._engineclient import run_if_definer

            ran = run_if_definer(self, query, kwargs)
            if ran is not None:
                return ran
        spark = self.spark()
        return spark.sql(expanded_sql(self, spark, query), **kwargs)

    def engine(self) -> Any:
        """A Spark Connect session on the platform's trusted engine, acting as this session's user
        (``engine=`` / ``LAKESESSION_ENGINE``). Every call carries the user's current token; the engine
        refuses user code, path access and protected settings (``EngineRefusedError`` names the rule)."""
        with self._lock:
            self._check_open()
            if self._engine_url is None:
                raise ConfigError(
                    "no trusted engine configured for this session. Fix: lakesession.connect(..., "
                    "engine='sc://engine.internal:15002/;use_ssl=true') or set LAKESESSION_ENGINE"
                )
            if self._engine_spark is not None and self._engine_spark.is_stopped:
                self._engine_spark = None  # the engine restarted (its sessions ended): open a new one
            if self._engine_spark is None:
                from ._engineclient import connect_engine

                self._engine_spark = connect_engine(self._engine_url, self._token)
            return self._engine_spark

    def chain(self, name: str | Sequence[str]) -> Any:
        """The view chain behind ``ns.view`` (or a tuple of levels and name) as a tree: object, security
        model, user in effect, decision (this client's: with an ``engine``, its notes say to run the query there)."""
        from .catalog._chains import chain_tree

        return chain_tree(
            self.catalog,
            name,
            token=self._token,
            uri=self.uri,
            catalog_names=(self.catalog_name,),
            engine=self._engine_url,
        )

    def resolve(self, name: str | Sequence[str]) -> Any:
        """The same as ``chain(name)`` (its first name, kept for compatibility)."""
        return self.chain(name)

    def filesystem(self, location: str, mode: str = "read", min_valid_seconds: float = 60.0) -> Any:
        """A pyarrow filesystem for a granted raw location (``s3://bucket/prefix``); ``credentials._pathfs``."""
        from .credentials._pathfs import location_filesystem

        principal = getattr(self.identity, "principal", None)
        return location_filesystem(self.gateway.uri, self.gateway.secret, location, mode, min_valid_seconds, principal)

    def locations(self) -> list[str]:
        """Prefixes path credentials can be had for: loaded tables and granted registered locations."""
        from .credentials._pathfs import policy_locations

        return policy_locations(self.gateway.uri, self.gateway.secret)

    # -- reports (lakesession._reports) -------------------------------------------
    def grants(self, *, strict: bool = False) -> pd.DataFrame:
        """``reports.grants()``: the user's effective privileges ("unknown" only without a grants endpoint;
        ``strict=True``: a ``CapabilityError`` instead)."""
        return self.reports.grants(strict=strict)

    def audit(self) -> pd.DataFrame:
        """``reports.audit()``: what this session accessed, with decisions."""
        return self.reports.audit()

    def credentials(self) -> pd.DataFrame:
        """``reports.credentials()``: per-table credential state (Python and Spark)."""
        return self.reports.credentials()

    def accesses(self) -> pd.DataFrame:
        """``reports.accesses()``: what Spark loaded, created, committed and dropped through the gateway."""
        return self.reports.accesses()

    def status(self) -> dict[str, Any]:
        """``reports.status()``: a secret-free, JSON-ready snapshot (starts nothing)."""
        return self.reports.status()

    def close(self) -> None:
        """Stop the gateway (this session's SparkSession can no longer reach the catalog), and Spark
        if lakesession started it and no other Session uses it (a SparkContext you started keeps running)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._spark is not None:
                from . import _sparkbind

                _sparkbind.release(self)
                self._spark = None
            if self._engine_spark is not None:
                try:
                    self._engine_spark.stop()  # releases the engine-side session (its temp views, settings)
                except Exception:  # the engine may be gone: closing must still finish
                    pass
                self._engine_spark = None
            if self._gateway is not None:
                self._gateway.stop()
                self._gateway = None
            self.credential_store.close()
            # HTTP connections only (both reconnect if used again): a closed session leaves no socket open
            http = getattr(self._catalog, "_session", None)
            if http is not None:
                http.close()
            if self._identity is not None:
                self._identity.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._pending is not None:
            return f"Session(starting embedded catalog, catalog_name={self.catalog_name!r})"
        who = getattr(self._identity, "principal", None)
        return f"Session(uri={self._uri!r}, principal={who!r}, catalog_name={self.catalog_name!r})"
