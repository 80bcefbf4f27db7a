"""The notebook side of the trusted engine (``lakesession engine``): a Spark Connect session acting as you.

``Session.engine()`` opens a Connect session on the platform's engine; every gRPC call carries
your current access token (refreshed by your identity, so long sessions keep working), and the
engine replaces whatever ``user_id`` the client claims with the principal of that token.
``Session.sql()`` sends a query there only when it reads a DEFINER view and the engine is
configured: your own tables keep running in your own Spark.

Off loopback the engine URL must use TLS (``sc://host:15002/;use_ssl=true``): the token would
otherwise travel in plaintext.

A dead engine is noticed in seconds: the channel pings the engine while a call runs (gRPC keepalive),
a failing call is retried for about 8 s (pyspark's default: 10 minutes), and then it fails in one line
naming the engine (``EngineUnavailableError``); the session is marked closed, so the next
``session.sql()`` / ``session.engine()`` opens a new one.
"""

from __future__ import annotations

import collections
import ipaddress
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from .errors import ConfigError, EngineUnavailableError

if TYPE_CHECKING:
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from .session import Session

__all__ = ["check_engine_url", "connect_engine", "definer_views", "run_if_definer"]

#: keepalive pings while a call runs (the engine's front door accepts them every 4 s): a killed engine or a
#: dead network path fails the call within seconds instead of at the next TCP timeout
CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 5_000),
    ("grpc.keepalive_timeout_ms", 4_000),
    ("grpc.http2.max_pings_without_data", 0),
]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_engine_url(url: str) -> str:
    """``url`` if it is a usable engine address (``sc://host:port[/;use_ssl=true]``); else a ConfigError."""
    parsed = urlparse(url)
    if parsed.scheme != "sc" or not parsed.hostname:
        raise ConfigError(f"engine must be a Spark Connect URL like sc://engine.internal:15002, not {url!r}")
    params = dict(p.split("=", 1) for p in parsed.path.lstrip("/").split(";") if "=" in p)
    if "token" in params or "user_id" in params:
        raise ConfigError(
            "the engine URL must not carry token= or user_id=: lakesession sends your own token with every call, "
            "and the engine names you from it"
        )
    if not _loopback(parsed.hostname) and params.get("use_ssl", "").lower() != "true":
        raise ConfigError(
            f"engine {url!r} is not on loopback: add ;use_ssl=true (sc://host:port/;use_ssl=true) so your access "
            "token is never sent in plaintext"
        )
    return url


_Details = collections.namedtuple(
    "_Details", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")
)


def _bearer_interceptor(token: Callable[[], str]) -> Any:
    """A gRPC client interceptor adding ``authorization: Bearer <current token>`` to every call."""
    import grpc

    class Bearer(
        grpc.UnaryUnaryClientInterceptor,
        grpc.UnaryStreamClientInterceptor,
        grpc.StreamUnaryClientInterceptor,
        grpc.StreamStreamClientInterceptor,
    ):
        def _details(self, d: Any) -> Any:
            metadata = [(k, v) for k, v in (d.metadata or ()) if k.lower() != "authorization"]
            metadata.append(("authorization", f"Bearer {token()}"))
            return _Details(
                d.method, d.timeout, metadata, d.credentials, getattr(d, "wait_for_ready", None), d.compression
            )

        def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
            return continuation(self._details(details), request)

        def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
            return continuation(self._details(details), request)

        def intercept_stream_unary(self, continuation: Any, details: Any, request_iterator: Any) -> Any:
            return continuation(self._details(details), request_iterator)

        def intercept_stream_stream(self, continuation: Any, details: Any, request_iterator: Any) -> Any:
            return continuation(self._details(details), request_iterator)

        def __repr__(self) -> str:  # never the token
            return "BearerInterceptor()"

    return Bearer()


def _engine_policy() -> Any:
    """pyspark's retry policy for an engine: ~8 s of retries on UNAVAILABLE (the default waits 10 minutes), none
    for an answer the engine itself gave (it says why in one line: the catalog is down, a limit)."""
    import grpc
    from pyspark.sql.connect.client.retries import DefaultPolicy

    class EnginePolicy(DefaultPolicy):
        def __init__(self) -> None:
            super().__init__(max_retries=5, backoff_multiplier=3.0, initial_backoff=100, max_backoff=3_000)

        def can_retry(self, e: BaseException) -> bool:
            if isinstance(e, grpc.RpcError) and "lakesession engine" in str(getattr(e, "details", lambda: "")()):
                return False
            return bool(super().can_retry(e))

    return EnginePolicy()


def _gone(error: BaseException) -> bool:
    """Whether ``error`` says the engine itself is unreachable (not an answer it gave)."""
    import grpc

    if not isinstance(error, grpc.RpcError) or not hasattr(error, "code"):
        return False
    details = str(error.details()) if hasattr(error, "details") else ""
    return error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) and (
        "lakesession engine" not in details
    )


def _fail_in_one_line(session: ConnectSession, url: str) -> None:
    """The session's client raises ``EngineUnavailableError`` naming ``url`` once the engine is gone, and again
    for every later call (pyspark's own ``[NO_ACTIVE_SESSION]`` once it knows the session is closed)."""
    client = session.client
    original = client._handle_error
    gone: list[str] = []

    def handle(error: Exception) -> Any:
        if _gone(error):
            client._closed = True  # its session died with the engine: the next engine() opens a new one
            why = str(error.details()).splitlines()[0] if hasattr(error, "details") else type(error).__name__
            gone[:] = [
                f"the trusted engine at {url} stopped answering ({why}); the query there is lost. "
                "Fix: run it again once the engine is back (a new engine session opens by itself)"
            ]
        if gone and (_gone(error) or _no_session(error)):  # pyspark may swallow the first (plan compression)
            raise EngineUnavailableError(gone[0], url) from None
        try:
            return original(error)
        except EngineUnavailableError as exc:
            if exc.address:
                raise
            raise EngineUnavailableError(f"{exc} (engine {url})", url) from None

    client._handle_error = handle  # type: ignore[method-assign]  # wraps pyspark's handler on this client only


def _no_session(error: BaseException) -> bool:
    get = getattr(error, "getCondition", None) or getattr(error, "getErrorClass", None)  # pyspark 4 / 3.5
    return callable(get) and get() == "NO_ACTIVE_SESSION"


def connect_engine(url: str, token: Callable[[], str]) -> ConnectSession:
    """A new Spark Connect session on the engine at ``url``, authenticated by ``token()`` on every call."""
    try:
        from pyspark.sql.connect.client import DefaultChannelBuilder
        from pyspark.sql.connect.session import SparkSession as _ConnectSession
    except ImportError as exc:
        raise ConfigError(
            f"the trusted engine needs Spark Connect's client ({exc.name} is missing): "
            "pip install 'pyspark[connect]>=4.1,<4.2' (the [connect] extra)"
        ) from None
    from ._spark.errors import install_connect_error_conversion  # pyspark's: only once a Connect session opens

    check_engine_url(url)
    builder = DefaultChannelBuilder(url, channelOptions=CHANNEL_OPTIONS)
    builder.add_interceptor(_bearer_interceptor(token))
    install_connect_error_conversion()
    session: ConnectSession = _ConnectSession.builder.channelBuilder(builder).create()
    session.client.set_retry_policies([_engine_policy()])
    # pyspark warns "[RETRIES_EXCEEDED]" before raising the last error: the one line below says it all
    warnings.filterwarnings("ignore", r"\[RETRIES_EXCEEDED\]", UserWarning, r"pyspark\.sql\.connect\.client")
    _fail_in_one_line(session, url)
    return session


def timed(func: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    result = func()
    return result, (time.perf_counter() - t0) * 1000


def definer_views(session: Session, query: str) -> list[str]:
    """The DEFINER views ``query`` reads (directly or through other views), as the session's user sees them."""
    from ._spark._viewsql import catalog_prop
    from .catalog._chains import _Client
    from .catalog._expand import expand

    client = _Client(
        session.catalog,
        session.uri,
        catalog_prop(session, "prefix", ""),
        catalog_prop(session, "namespace-separator", "%1F"),
    )
    expansion = expand(
        query,
        client=client,
        catalog_name=session.catalog_name,
        current_namespace=None,
        chain_catalog=lambda chain, table: session.catalog_name,  # a dry run: nothing is registered
        refuse_unreadable=True,  # a view the user may not read: its refusal, not only a table's (Spark's)
    )
    return list(dict.fromkeys(expansion.definers))


def run_if_definer(session: Session, query: str, kwargs: dict[str, Any]) -> Any:
    """Run ``query`` on the session's engine if it reads a DEFINER view (logged in ``accesses()``); else None."""
    from .gateway import AccessRecord

    try:
        definers = definer_views(session, query)
    except (OSError, TimeoutError) as exc:  # requests' ConnectionError (pyiceberg): one line, not its pool's story
        import requests

        if not isinstance(exc, (requests.ConnectionError, requests.Timeout)):
            raise
        from .errors import CatalogAccessError

        raise CatalogAccessError(
            f"the catalog at {session.uri} is unreachable ({type(exc).__name__}): cannot tell whether the query "
            "reads DEFINER views. Fix: run it again once the catalog is back",
            "catalog unavailable",
        ) from None
    if not definers:
        return None
    engine = session.engine()
    started = time.time()
    status = 200
    try:
        try:
            df, _ms = timed(lambda: engine.sql(query, **kwargs))
        except EngineUnavailableError:
            if not engine.is_stopped:
                raise
            engine = session.engine()  # the engine ended that session (idle, restarted): once more on a new one
            df, _ms = timed(lambda: engine.sql(query, **kwargs))
        return df
    except Exception as exc:
        from ._spark.errors import refused_error  # pyspark's: a Session with an engine= is created without it

        refused = refused_error(exc)
        status = 403 if refused is not None or "not authorized" in str(exc).lower() else 500
        if refused is not None:
            raise refused from None
        raise
    finally:
        session.access_log.add(
            AccessRecord(
                time=started,
                action="engine_query",
                object="view " + ", ".join(definers),
                status=status,
                duration_ms=(time.time() - started) * 1000,
                via="engine",
            )
        )
