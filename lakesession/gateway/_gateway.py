"""Start and stop a gateway in the background."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Any

from ._accesslog import AccessLog
from ._app import create_gateway_app
from ._chains import ChainRoutes
from ._credcache import CredentialCache
from ._upstream import Upstream


class Gateway:
    """A loopback REST endpoint forwarding Iceberg REST calls upstream with the user's token.

    Args:
        upstream: The catalog's base URI (what pyiceberg takes as ``uri``), or a callable returning it.
        token: Returns the user's current access token (refreshing as needed).
        invalidate: Called after an upstream 401, so the next ``token()`` fetches a new one.
        host: Bind address; loopback by default, a routable one for cluster mode.
        port: 0 picks a free port.
        wrap_app: Wraps the ASGI app before it is served (a seam for recorders in tests).
        assumed_credential_ttl: Lifetime (s) to stamp on keys vended with no stated expiry, so the JVM refreshes.
        access: ``remote-signing`` makes every forwarded call ask for remote signing and keeps storage
            credentials out of what the JVM receives; None passes the engine's choice through.
        allowed_clients: Peer addresses or CIDR networks allowed to connect (a gateway on a routable
            address for a Spark Connect server: its driver and executors); others get 403 before their
            body is read. None: any peer (the loopback default).
    """

    def __init__(
        self,
        upstream: str | Callable[[], str],
        token: Callable[[], str],
        *,
        invalidate: Callable[[], None] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        access_log: AccessLog | None = None,
        timeout: float = 60.0,
        wrap_app: Callable[[Any], Any] | None = None,
        assumed_credential_ttl: float | None = None,
        access: str | None = None,
        allowed_clients: Sequence[str] | None = None,
    ):
        self._upstream = upstream
        self._secret = secrets.token_urlsafe(32)
        self.access_log = access_log if access_log is not None else AccessLog()
        self.credential_cache = CredentialCache()
        self.chains = ChainRoutes()
        # the server only now, when a gateway is wanted: ``import lakesession`` stays light
        from .._wire.sockets import bind, url_host
        from ._server import GatewayServer

        self._sock = bind(host, port)
        self.uri = f"http://{url_host(host)}:{self._sock.getsockname()[1]}"
        self._app = app = create_gateway_app(
            Upstream(upstream, token, invalidate or (lambda: None), timeout),
            self._secret,
            self.access_log,
            lambda: self.uri,
            self.credential_cache,
            self.chains,
            assumed_ttl=assumed_credential_ttl,
            access=access,
            allowed_clients=allowed_clients,
        )
        self._server = GatewayServer(wrap_app(app) if wrap_app else app, self._sock, "lakesession-gateway")
        self._started = False

    @property
    def upstream(self) -> str:
        up = self._upstream() if callable(self._upstream) else self._upstream
        return up.rstrip("/")

    @property
    def secret(self) -> str:
        """The per-session secret the JVM presents (as its bearer token). Not the user's token."""
        return self._secret

    def start(self) -> Gateway:
        if not self._started:
            self._app.upstream.warm()
            self._server.start()
            self._started = True
        return self

    def stop(self) -> None:
        self._server.stop()
        self._app.close()
        self._started = False

    def __enter__(self) -> Gateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Gateway(uri={self.uri!r}, upstream={self.upstream!r}, secret='***')"
