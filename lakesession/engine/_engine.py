"""``Engine``: the Spark JVM with its Connect server on loopback, and the front door users talk to.

One process: the JVM (started by pyspark, the Connect server as a Spark plugin bound to
127.0.0.1 with a pre-shared token only the front door knows), the per-user gateways, and the gRPC
front door on ``host:port``. The JVM's sessions hold vended storage credentials in Iceberg's
FileIO; nothing the front door returns, logs or raises contains them.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import sys
import threading
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import httpx

from .._wire.enginerules import SESSION_USER_CONF, chain_prefix
from ..errors import ConfigError
from ._auth import Authenticator
from ._config import EngineConfig
from ._proxy import FrontDoor
from ._sandbox import ConfPolicy
from ._users import EngineUser, Users

__all__ = ["SANDBOX_EXTENSIONS", "Engine", "sandbox_jar"]

logger = logging.getLogger("lakesession.engine")

SANDBOX_EXTENSIONS = "dev.lakesession.engine.SandboxExtensions"
SANDBOX_JAR = "lakesession-engine.jar"  # built by java/build.py; needs the client's lakesession-jvm.jar beside it
_CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
_CLOSED = "http://127.0.0.1:9/no-user"  # the catalog of a session the front door has not configured
_TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"  # Spark Connect's pre-shared token, when its conf key is unset
_SQL_KEY = "spark.lakesession.engine.sqlKey"  # dev.lakesession.engine.Signature.KEY


def sandbox_jar() -> Path:
    """The engine's compiled sandbox (``dev.lakesession.engine``, its rulebook), shipped with lakesession-engine."""
    return Path(str(resources.files("lakesession.engine").joinpath("jvm", SANDBOX_JAR)))


def _tls_credentials(config: EngineConfig) -> Any:
    """The front door's TLS credentials (None: plaintext), read now so a bad file fails before Spark starts."""
    if not config.tls_cert and not config.tls_key:
        return None
    if not (config.tls_cert and config.tls_key):
        raise ConfigError("TLS needs both tls_cert and tls_key (PEM files)")
    import grpc

    try:
        with open(config.tls_key, "rb") as k, open(config.tls_cert, "rb") as c:
            return grpc.ssl_server_credentials([(k.read(), c.read())])
    except OSError as exc:
        raise ConfigError(f"cannot read the engine's TLS files: {exc.strerror}: {exc.filename}") from None


def _die_with_this_process() -> Callable[[], None] | None:
    """A ``preexec_fn`` making the JVM receive SIGKILL when the engine dies, ``kill -9`` included (Linux).

    The kernel sends it when the *thread* that started the JVM exits, so only the main thread (which lives
    as long as the process) may start it this way; elsewhere None (the JVM still exits on its stdin's EOF,
    after its shutdown hooks, ~25 s). SIGKILL, not SIGTERM: those hooks are the slow part.
    """
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not in the forked child
    parent = os.getpid()

    def preexec() -> None:
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the engine died between fork and prctl
            os._exit(1)

    return preexec


def _loopback(host: str) -> bool:
    return host in ("127.0.0.1", "::1", "localhost")


class Engine:
    """The trusted engine. ``start()`` brings it up; ``address`` is what notebooks pass as ``engine=``."""

    def __init__(self, config: EngineConfig) -> None:
        if not _loopback(config.host) and not config.tls_cert and not config.insecure:
            raise ConfigError(
                f"the engine would receive users' access tokens in plaintext on {config.host}: give it "
                "tls_cert/tls_key, or set insecure: true behind a TLS-terminating proxy"
            )
        from ..gateway import gateway_clients

        # a routable gateway acts as its user for anyone holding its secret: name the cluster's hosts (fails here)
        try:
            self._gateway_clients = gateway_clients(
                config.gateway_host, list(config.gateway_clients) if config.gateway_clients else None, None
            )
        except ConfigError:
            raise ConfigError(
                f"the per-user gateways on {config.gateway_host!r} would act as their users for anyone on the "
                "network holding a secret: name the cluster's hosts (the engine's own included) with "
                "--gateway-client (repeatable) or gateway_clients"
            ) from None
        self._tls = _tls_credentials(config)  # unreadable files fail here, before Spark starts
        self.config = config
        self._sql_key = secrets.token_bytes(32)
        self._backend_token = secrets.token_urlsafe(32)
        self.spark: Any = None
        self.front: FrontDoor | None = None
        self._server: Any = None
        self.port = 0
        self._stopped = threading.Event()

    @property
    def address(self) -> str:
        """What notebooks pass as ``engine=`` (``;use_ssl=true`` when serving TLS; a wildcard bind shows loopback)."""
        host = self.config.host if self.config.host not in ("0.0.0.0", "::") else "127.0.0.1"
        return f"sc://{host}:{self.port}" + ("/;use_ssl=true" if self._tls is not None else "")

    # -- start --------------------------------------------------------------------------------
    def start(self) -> Engine:
        cfg = self.config
        secret = cfg.secret()
        # read once: nothing the engine starts (its JVM, a worker a user could ever reach) inherits it
        os.environ.pop("LAKESESSION_ENGINE_CLIENT_SECRET", None)
        token_url = cfg.token_url or self._discover_token_url()
        authenticator = Authenticator(cfg.issuer_url, cfg.audiences, principal_claim=cfg.principal_claim)
        users = Users(
            cfg.catalog.rstrip("/"),
            token_url,
            cfg.client_id,
            secret,
            warehouse=cfg.warehouse,
            catalog_name=cfg.catalog_name,
            gateway_host=cfg.gateway_host,
            gateway_clients=self._gateway_clients,
            on_evict=self._evicted,
            idle_timeout=cfg.idle_timeout if cfg.idle_timeout and cfg.idle_timeout > 0 else None,
            max_users=cfg.max_users if cfg.max_users and cfg.max_users > 0 else None,
            max_sessions=cfg.max_sessions_per_user
            if cfg.max_sessions_per_user and cfg.max_sessions_per_user > 0
            else None,
        )
        backend_port = self._start_spark()
        policy = ConfPolicy.of(cfg.settable_confs, cfg.protected_conf_prefixes)
        self.front = FrontDoor(
            f"127.0.0.1:{backend_port}",
            self._backend_token,
            authenticator,
            users,
            policy,
            self._sql_key,
            self._session_conf,
            self._chain_conf,
        )
        # the TLS credentials Engine() read: the files are read once, and a bad one failed before Spark started
        self._server, self.port = self.front.server(
            f"{cfg.host}:{cfg.port}", workers=cfg.workers, credentials=self._tls
        )
        users.start_reaper()
        logger.info("lakesession engine serving %s (Spark Connect on 127.0.0.1:%d)", self.address, backend_port)
        return self

    def _discover_token_url(self) -> str:
        url = f"{self.config.issuer_url}/.well-known/openid-configuration"
        try:
            doc = httpx.get(url, timeout=10.0).raise_for_status().json()
        except (httpx.HTTPError, ValueError) as exc:
            raise ConfigError(f"cannot read the issuer's discovery document {url}: {type(exc).__name__}") from None
        endpoint = doc.get("token_endpoint") if isinstance(doc, dict) else None
        if not isinstance(endpoint, str):
            raise ConfigError(f"{url} names no token_endpoint; pass token_url")
        return endpoint

    def jvm_conf(self, backend_port: int) -> dict[str, str]:
        """The JVM's configuration: Iceberg, the sandbox, the Connect plugin on loopback, no UI or event log."""
        from .._spark import comet
        from .._spark.jars import resolve_jars
        from .._spark.session import EXTENSIONS, base_conf

        cfg = self.config
        jar_set = resolve_jars(cfg.jars)
        conf = base_conf(cfg.catalog_name, jar_set, server=True)
        extra_jars = cfg.spark_conf.get("spark.jars", "")
        jars = [j for j in conf.get("spark.jars", "").split(",") if j]
        ours = [str(comet.provider_jar()), str(sandbox_jar())]
        conf["spark.jars"] = ",".join([*jars, *ours, *[j for j in extra_jars.split(",") if j]])
        conf.update(
            {
                "spark.sql.extensions": f"{EXTENSIONS},{SANDBOX_EXTENSIONS}",
                "spark.plugins": _CONNECT_PLUGIN,
                "spark.connect.grpc.binding.address": "127.0.0.1",
                "spark.connect.grpc.binding.port": str(backend_port),
                "spark.sql.connect.serverStacktrace.enabled": "false",
                "spark.sql.artifact.isolation.enabled": "true",
                "spark.ui.enabled": "false",
                "spark.eventLog.enabled": "false",
                "spark.lakesession.engine.sandbox": "true",
                "spark.lakesession.engine.settableConfs": ",".join(cfg.settable_confs),
                "spark.lakesession.engine.protectedConfPrefixes": ",".join(
                    ConfPolicy.of((), cfg.protected_conf_prefixes).protected_prefixes
                ),
                "spark.lakesession.engine.internalCatalogPrefix": chain_prefix(cfg.catalog_name),
                f"spark.sql.catalog.{cfg.catalog_name}": "org.apache.iceberg.spark.SparkCatalog",
                f"spark.sql.catalog.{cfg.catalog_name}.type": "rest",
                f"spark.sql.catalog.{cfg.catalog_name}.uri": _CLOSED,
            }
        )
        # the operator's extra conf first: it may tune Spark, never switch off what keeps users apart
        return {**cfg.spark_conf, **conf} if cfg.spark_conf else conf

    def _start_spark(self) -> int:
        from .._spark.session import SECRET_ENV, build_spark
        from .._wire.sockets import bind

        with bind("127.0.0.1", 0) as probe:
            backend_port = int(probe.getsockname()[1])
        conf = self.jvm_conf(backend_port)
        # the JVM inherits the environment: nothing in it may act for anyone (the engine's secret included)
        hidden = [
            k for k in os.environ if k.startswith(("AWS_", "LAKESESSION_ENGINE_CLIENT_SECRET")) or k in SECRET_ENV
        ]
        saved = {k: os.environ.pop(k) for k in hidden}
        # pyspark puts every conf key on the JVM's command line, which every account of the host can read
        # (ps): the Connect server's token goes in the JVM's environment (Spark reads it there), the SQL
        # signing key into its live conf once it runs (read for every statement), neither into ``conf``
        os.environ[_TOKEN_ENV] = self._backend_token
        try:
            self.spark, _ = build_spark(
                conf,
                master=self.config.master,
                app_name="lakesession engine",
                classcache=False,
                user_conf=self.config.spark_conf,
                ui=False,  # its UI would show every user's queries to whoever reaches it
                jvm_preexec=_die_with_this_process(),  # no orphan JVM after kill -9 of the engine
            )
        finally:
            os.environ.pop(_TOKEN_ENV, None)
            os.environ.update(saved)
        self.spark._jsc.sc().conf().set(_SQL_KEY, self._sql_key.hex())
        return backend_port

    # -- per user ---------------------------------------------------------------------------------
    def _session_conf(self, user: EngineUser) -> dict[str, str]:
        from .._spark.session import catalog_conf

        conf = catalog_conf(user.catalog_name, user.gateway.uri, user.gateway.secret, user.warehouse)
        conf["spark.sql.defaultCatalog"] = user.catalog_name
        conf[SESSION_USER_CONF] = user.principal  # current_user()/session_user() (dev.lakesession.engine.UserFacing)
        return conf

    def _chain_conf(self, user: EngineUser, name: str, uri: str) -> dict[str, str]:
        from .._spark.session import catalog_conf

        return catalog_conf(name, uri, user.gateway.secret, user.warehouse)

    def _evicted(self, user: EngineUser, why: str) -> None:
        """An evicted user's Connect sessions end in the JVM too (their catalogs point at the stopped gateway)."""
        front = self.front
        if front is None:
            return
        for session_id in front.sessions.drop(user.principal, why):
            front.release_backend(session_id, user.principal)

    # -- stop ---------------------------------------------------------------------------------------
    def stop(self, grace: float = 10.0) -> None:
        """Stop taking calls, let running ones finish for ``grace`` seconds, then stop Spark and the gateways."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self._server is not None:
            self._server.stop(grace).wait()
        if self.front is not None:
            self.front.close()
            self.front.users.close()
        if self.spark is not None:
            self.spark.stop()
            self.spark = None

    def wait(self) -> None:
        self._stopped.wait()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Engine(address={self.address!r}, catalog={self.config.catalog!r})"
