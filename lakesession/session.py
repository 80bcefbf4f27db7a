"""``Session``: one identity, one catalog, one gateway, and the SparkSession and tables built on them."""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from .credentials import CredentialStore
from .gateway import AccessLog, Gateway

if TYPE_CHECKING:
    import pandas as pd
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame, SparkSession


class Session:
    """A user's session against one Iceberg REST catalog.

    Args:
        uri: The catalog's base URI (what pyiceberg takes as ``uri``).
        identity: A token source (``lakesession.identity``) that yields the user's fresh access token.
        warehouse: The warehouse to ask the catalog for.
        catalog_name: Name of the catalog inside Spark (``lake`` by default, also the default catalog).
        jars: Jar mode for Spark (``auto``, ``offline``, ``maven``, ``cache``) or explicit paths.
        master: Spark master (``local[*]`` by default); ``remote`` for Spark Connect.
        gateway_host: Bind address of the gateway (loopback by default; routable for cluster mode).
    """

    def __init__(
        self,
        uri: str | None,
        identity: Any,
        *,
        warehouse: str | None = None,
        catalog_name: str = "lake",
        jars: Any = None,
        master: str | None = None,
        remote: str | None = None,
        gateway_host: str | None = None,
        spark_conf: dict[str, str] | None = None,
        embedded: Any = None,
        pending: Future[tuple[Any, Any]] | None = None,
        gateway_options: dict[str, Any] | None = None,
    ):
        self._uri = uri.rstrip("/") if uri else None
        self._identity = identity
        self._pending = pending  # (embedded catalog, identity) still starting in the background
        self.warehouse = warehouse
        self.catalog_name = catalog_name
        self._jars = jars
        self._master = master
        self._remote = remote
        self._gateway_host = gateway_host or os.environ.get("LAKESESSION_GATEWAY_HOST", "127.0.0.1")
        self._spark_conf = dict(spark_conf or {})
        self._embedded = embedded
        self.access_log = AccessLog()
        self.credential_store = CredentialStore()
        self._gateway_options = dict(gateway_options or {})
        self._gateway: Gateway | None = None
        self._spark: SparkSession | None = None
        self._owns_spark = False
        self._catalog: RestCatalog | None = None
        self._lock = threading.RLock()
        self._chain_catalogs: set[str] = set()
        try:  # the JupyterLab panel: publish status() when inside an IPython kernel (no-op elsewhere, never raises)
            from .lab._publisher import start_publisher

            start_publisher(self)
        except Exception:
            pass

    def _resolve(self) -> None:
        pending = self._pending
        if pending is not None:
            emb, identity = pending.result()
            self._embedded, self._identity, self._uri = emb, identity, emb.uri
            self.warehouse = self.warehouse or emb.warehouse
            self._pending = None

    @property
    def embedded(self) -> Any:
        """The embedded catalog behind this session (waits for it to finish starting), or None."""
        self._resolve()
        return self._embedded

    @property
    def uri(self) -> str:
        self._resolve()
        assert self._uri is not None
        return self._uri

    @property
    def identity(self) -> Any:
        """The token source acting as the user (principal, issuer, expiry via ``describe()``)."""
        self._resolve()
        return self._identity

    def _token(self) -> str:
        return self.identity.token()

    def _invalidate(self) -> None:
        self.identity.invalidate()

    # -- the gateway the JVM talks to ---------------------------------------
    @property
    def gateway(self) -> Gateway:
        with self._lock:
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
            **self._gateway_options,
        ).start()

    # -- Spark ----------------------------------------------------------------
    def spark(self) -> SparkSession:
        """The SparkSession acting as this session's user (created once, then reused).

        The JVM (or the Connect channel) starts first; the gateway starts meanwhile in a thread and
        the catalog pointing at it is then registered as runtime SQL conf. An embedded catalog keeps
        starting in the background: the first catalog query waits for it, not this call.
        """
        with self._lock:
            if self._spark is None:
                from concurrent.futures import ThreadPoolExecutor

                from ._spark.jars import resolve_jars
                from ._spark.session import base_conf, build_spark, catalog_conf

                jars = None if self._remote else resolve_jars(self._jars)
                catalog_keys = {k: v for k, v in self._spark_conf.items() if k.startswith("spark.sql.catalog.")}
                launch = {**base_conf(self.catalog_name, jars), **self._spark_conf}
                # the JVM starts in this thread (Spark's active session is per thread); the gateway meanwhile
                with ThreadPoolExecutor(1, thread_name_prefix="lakesession-gateway") as pool:
                    pending = pool.submit(self._new_gateway) if self._gateway is None else None
                    try:
                        spark, owns = build_spark(launch, master=self._master, remote=self._remote)
                    finally:
                        if pending is not None:
                            self._gateway = pending.result()
                    gw = self.gateway
                for key, value in {
                    **catalog_conf(self.catalog_name, gw.uri, gw.secret, self.warehouse),
                    **catalog_keys,
                }.items():
                    spark.conf.set(key, value)
                self._spark, self._owns_spark = spark, owns
            return self._spark

    # -- Python-side access (pyiceberg) ----------------------------------------
    @property
    def catalog(self) -> RestCatalog:
        """pyiceberg's RestCatalog acting as this session's user (direct to the catalog)."""
        with self._lock:
            if self._catalog is None:
                from .catalog import rest_catalog

                self._catalog = rest_catalog(self.catalog_name, self.uri, self.identity, warehouse=self.warehouse)
            return self._catalog

    def table(self, name: str, *, access: str = "vended-credentials", mode: str | None = None) -> Table | DataFrame:
        """Load ``ns.table`` with pyiceberg, its storage credentials refreshed ahead of expiry.

        ``access="remote-signing"`` holds no storage credentials at all: the catalog signs each request.
        A view (pyiceberg cannot read views) gives a Spark DataFrame over it instead, with its chain
        evaluated by the catalog as in ``sql()``.
        """
        from pyiceberg.exceptions import ForbiddenError, NoSuchTableError

        from .catalog._tables import load_table

        try:
            return load_table(
                self.catalog, name, self.credential_store, self._token, self.uri, access=access, mode=mode
            )
        except (NoSuchTableError, ForbiddenError):  # catalogs may refuse before saying "no such table"
            if isinstance(name, str) and self.catalog.view_exists(name):
                from .catalog._expand import quoted

                return self.sql(f"SELECT * FROM {quoted((self.catalog_name, *name.split('.')))}")
            raise

    def sql(self, query: str, **kwargs: Any) -> DataFrame:
        """Spark SQL as this user, with view chains evaluated by the catalog (DEFINER views work).

        Each view the query reads is expanded into its SQL, and each table below it is loaded
        through a chain-scoped catalog (``<catalog>__chain_<id>``) whose loads carry the chain in
        ``referenced-by``: the catalog checks every step for the right user. Those tables are
        never loaded into the main catalog, so a direct reference to one (in this query or a
        later one) is still checked as the user alone. Plain ``spark.sql`` keeps INVOKER semantics.
        """
        from .catalog._chains import _Client

        spark = self.spark()
        expansion = self._expand(
            query,
            _Client(
                self.catalog,
                self.uri,
                self._catalog_prop("prefix", ""),
                self._catalog_prop("namespace-separator", "%1F"),
            ),
            spark,
        )
        return spark.sql(expansion.sql, **kwargs)

    def _catalog_prop(self, key: str, default: str) -> str:
        return str((getattr(self.catalog, "properties", {}) or {}).get(key, default))

    def _expand(self, query: str, client: Any, spark: SparkSession) -> Any:
        from .catalog._expand import expand

        current = None
        if spark.catalog.currentCatalog() == self.catalog_name:
            current = tuple(spark.catalog.currentDatabase().split("."))
        return expand(
            query,
            client=client,
            catalog_name=self.catalog_name,
            current_namespace=current,
            chain_catalog=self._chain_catalog,
        )

    def _chain_catalog(self, chain: tuple[Any, ...], table: Any) -> str:
        """The Spark catalog serving ``table`` through view ``chain`` (registered on first use)."""
        from ._spark.session import catalog_conf
        from .catalog._chains import encode_referenced_by

        gw = self.gateway
        route = gw.chains.register(
            chain, encode_referenced_by(list(chain), self._catalog_prop("namespace-separator", "%1F")), {table}
        )
        name = f"{self.catalog_name}__chain_{route.id}"
        with self._lock:
            if name not in self._chain_catalogs:
                spark = self.spark()
                for key, value in catalog_conf(name, f"{gw.uri}/chain/{route.id}", gw.secret, self.warehouse).items():
                    spark.conf.set(key, value)
                self._chain_catalogs.add(name)
        return name

    def resolve(self, name: str) -> Any:
        """The view chain behind ``ns.view`` as a tree: object, security model, user in effect, decision."""
        from .catalog._chains import resolve

        return resolve(self.catalog, name, token=self._token, uri=self.uri, catalog_names=(self.catalog_name,))

    def grants(self) -> pd.DataFrame:
        """The user's effective privileges per securable, from the catalog's grants endpoint.

        Catalogs without one (the endpoint is not part of the Iceberg spec) give a single row
        saying "unknown" — never invented grants.
        """
        import httpx
        import pandas as pd

        cols = ["securable", "privileges", "granted", "roles"]
        try:
            r = httpx.get(
                f"{self.uri}/management/v1/me/grants", headers={"Authorization": f"Bearer {self._token()}"}, timeout=30
            )
        except httpx.HTTPError:
            r = None
        if r is None or r.status_code != 200:
            return pd.DataFrame(
                [{"securable": "unknown", "privileges": "unknown", "granted": "unknown", "roles": "unknown"}],
                columns=cols,
            )
        rows = [
            {
                "securable": g["securable"],
                "privileges": ", ".join(g["privileges"]),
                "granted": ", ".join(g["granted"]),
                "roles": ", ".join(g["roles"]),
            }
            for g in r.json()["grants"]
        ]
        return pd.DataFrame(rows, columns=cols)

    def audit(self) -> pd.DataFrame:
        """What this session accessed: time, action, object, via-chain, decision, credential expiry."""
        import pandas as pd

        rows = [
            {
                "time": r.time,
                "action": r.action,
                "object": r.object,
                "via_chain": r.chain or "",
                "decision": "allow" if r.status < 400 else ("deny" if r.status in (401, 403) else f"error {r.status}"),
                "credentials_expire_at": r.credentials_expire_at,
            }
            for r in self.access_log.records()
        ]
        df = pd.DataFrame(rows, columns=["time", "action", "object", "via_chain", "decision", "credentials_expire_at"])
        df["time"] = pd.to_datetime(df["time"], unit="s", utc=True)
        df["credentials_expire_at"] = pd.to_datetime(df["credentials_expire_at"], unit="s", utc=True)
        return df

    def credentials(self) -> pd.DataFrame:
        """Per-table credential state: tables read from Python (``engine="python"``: the credential
        store) and tables Spark loaded through the gateway (``engine="spark"``: vended expiries seen
        in its loads and refreshes)."""
        import pandas as pd

        cols = [
            "engine",
            "table",
            "prefix",
            "mode",
            "state",
            "expires_at",
            "seconds_left",
            "last_refresh",
            "refreshes",
            "last_error",
        ]
        return pd.DataFrame(self._credential_rows(), columns=cols)

    def _credential_rows(self) -> list[dict[str, Any]]:
        """The rows of ``credentials()`` as plain dicts (no pandas: the kernel publisher calls this often)."""
        import time

        rows = [{"engine": "python", **r} for r in self.credential_store.snapshot()]
        now = time.time()
        spark: dict[str, dict[str, Any]] = {}
        for r in self.access_log.records():
            if r.action not in ("load_table", "create_table", "refresh_credentials") or not r.object.startswith(
                "table "
            ):
                continue
            row = spark.setdefault(
                r.object[6:],
                {
                    "engine": "spark",
                    "table": r.object[6:],
                    "prefix": None,
                    "mode": None,
                    "state": "unknown",
                    "expires_at": None,
                    "seconds_left": None,
                    "last_refresh": None,
                    "refreshes": 0,
                    "last_error": None,
                },
            )
            if r.action == "refresh_credentials":
                row["refreshes"] += 1
                row["last_refresh"] = r.time
            if r.status in (401, 403):
                row["state"], row["last_error"] = "revoked", f"catalog answered {r.status}"
            elif r.status == 200 and r.credentials_expire_at:
                row["expires_at"] = r.credentials_expire_at
                row["state"], row["last_error"] = ("valid" if r.credentials_expire_at > now else "expired"), None
        for row in spark.values():
            if row["expires_at"]:
                row["seconds_left"] = max(0.0, round(row["expires_at"] - now, 1))
                if row["state"] == "valid" and row["expires_at"] <= now:
                    row["state"] = "expired"
            rows.append(row)
        return rows

    def status(self) -> dict[str, Any]:
        """A secret-free, JSON-ready snapshot for widgets and the JupyterLab panel: who, where, and
        each table's credential state. Does not start anything (an embedded catalog still starting
        reports ``state="starting"``)."""
        import time

        if self._pending is not None and not self._pending.done():
            return {
                "state": "starting",
                "catalog_name": self.catalog_name,
                "uri": None,
                "identity": None,
                "credentials": [],
                "time": time.time(),
            }
        self._resolve()
        ident = self._identity.describe() if self._identity is not None else None
        creds = self._credential_rows()
        return {
            "state": "ready",
            "catalog_name": self.catalog_name,
            "uri": self._uri,
            "identity": ident,
            "spark": self._spark is not None,
            "credentials": creds,
            "time": time.time(),
        }

    # -- what happened ------------------------------------------------------------
    def accesses(self) -> pd.DataFrame:
        """What the Spark engine loaded, created, committed and dropped through the gateway."""
        import pandas as pd

        rows = [r.as_dict() for r in self.access_log.records()]
        df = pd.DataFrame(
            rows,
            columns=[
                "time",
                "action",
                "object",
                "status",
                "duration_ms",
                "request_id",
                "credentials_expire_at",
                "via",
                "chain",
            ],
        )
        df["time"] = pd.to_datetime(df["time"], unit="s", utc=True)
        return df

    def close(self) -> None:
        """Stop the gateway, and Spark if this session started it (a reused SparkSession keeps running)."""
        with self._lock:
            if self._spark is not None:
                if self._owns_spark:
                    self._spark.stop()
                self._spark = None
            if self._gateway is not None:
                self._gateway.stop()
                self._gateway = None
            self.credential_store.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._pending is not None:
            return f"Session(starting embedded catalog, catalog_name={self.catalog_name!r})"
        who = getattr(self._identity, "principal", None)
        return f"Session(uri={self._uri!r}, principal={who!r}, catalog_name={self.catalog_name!r})"


SESSION_OPTIONS = ("catalog_name", "jars", "master", "remote", "gateway_host", "spark_conf", "gateway_options")
EMBEDDED_OPTIONS = ("data_dir", "storage", "credential_ttl", "access_token_ttl")


def connect(catalog: str | None = None, **options: Any) -> Session:
    """A session on ``catalog`` — or, with nothing configured, on the embedded default.

    Settings come from arguments, then ``LAKESESSION_*`` variables, then the config file or
    pyiceberg's ``~/.pyiceberg.yaml`` (see ``lakesession.config``). Identity options:
    ``token`` (static), ``credential='client_id:secret'`` with ``token_url`` (client credentials),
    or ``issuer`` + ``client_id`` (OIDC discovery; device login without a secret, with
    ``on_prompt`` to show the code). Spark options: ``catalog_name``, ``jars``, ``master``,
    ``remote``, ``gateway_host``, ``spark_conf``.
    """
    from .config import resolve

    session_opts = {k: options.pop(k) for k in list(options) if k in SESSION_OPTIONS}
    embedded_opts = {k: options.pop(k) for k in list(options) if k in EMBEDDED_OPTIONS}
    settings = resolve(catalog, options)
    if settings.get("uri") is None:
        if catalog is not None:
            raise ValueError(f"catalog {catalog!r} has no uri: define it in the config file or pass uri=...")
        from .embedded import start_embedded_async

        if options:
            raise TypeError(f"unknown options for the embedded default: {', '.join(sorted(options))}")
        return Session(
            None,
            None,
            pending=start_embedded_async(embedded_opts.pop("data_dir", None), **embedded_opts),
            **session_opts,
        )
    uri = str(settings.pop("uri")).rstrip("/")
    warehouse = settings.pop("warehouse", None)
    identity = _identity(uri, settings)
    if settings:
        raise TypeError(f"unknown options: {', '.join(sorted(settings))}")
    return Session(uri, identity, warehouse=warehouse, **session_opts)


def _identity(uri: str, settings: dict[str, Any]) -> Any:
    """The token source the settings describe (consumes the identity keys from ``settings``)."""
    from .identity import ClientCredentials, StaticToken, from_issuer

    token = settings.pop("token", None)
    credential = settings.pop("credential", None)
    token_url = settings.pop("token_url", None)
    issuer = settings.pop("issuer", None)
    client_id = settings.pop("client_id", None)
    client_secret = settings.pop("client_secret", None)
    scope = settings.pop("scope", None)
    on_prompt = settings.pop("on_prompt", None)
    kind = settings.pop("identity", None)
    if token:
        return StaticToken(token)
    if not credential and not client_secret:  # a hub-spawned server: LAKESESSION_IDENTITY=jupyterhub
        from .hub import identity_from_env

        hub = identity_from_env(kind, issuer=issuer)
        if hub is not None:
            return hub
    if credential:
        client_id, _, client_secret = str(credential).partition(":")
    if issuer:
        flow = "client_credentials" if client_secret else "device"
        source = from_issuer(
            issuer,
            client_id=client_id or "lakesession-cli",
            client_secret=client_secret,
            flow=flow,
            **({"scope": scope} if scope else {}),
            **({"on_prompt": on_prompt} if on_prompt else {}),
        )
        if flow == "device":
            source.login()
        return source
    if client_id and client_secret:
        return ClientCredentials(
            token_url or f"{uri}/v1/oauth/tokens", client_id, client_secret, scope=scope or "catalog"
        )
    raise ValueError(
        "no identity: pass token=..., credential='client_id:secret' (with token_url=...), "
        "or issuer=... with client_id=... (device login)"
    )


_current: Session | None = None


def spark(**options: Any) -> SparkSession:
    """``connect(**options).spark()``: a SparkSession acting as you, on the configured or embedded catalog.

    The session stays alive (its gateway serves the JVM) and is what ``current_session()`` returns.
    """
    global _current
    if _current is None or options:
        _current = connect(**options)
    return _current.spark()


def current_session() -> Session | None:
    """The session behind the last ``lakesession.spark()``, if any."""
    return _current
