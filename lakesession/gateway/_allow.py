"""Who may connect to a gateway that is not on loopback (Spark Connect, cluster mode)."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from ..errors import ConfigError


def gateway_clients(host: str, clients: list[str] | None, remote: str | None) -> list[str] | None:
    """Who may connect to a gateway bound to ``host``: ``clients`` if given; None (anyone, i.e. local
    processes) on loopback; else the Spark Connect server's host (``remote``) and loopback. A routable
    gateway acts as the user for anyone holding its secret, which travels in the Connect session's conf."""
    if clients is not None:
        return clients
    try:
        if ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:
        if host == "localhost":
            return None
    if remote is None:
        raise ConfigError(
            f"a gateway bound to {host!r} would act as you for anyone on the network holding its secret. "
            "Fix: pass gateway_clients=[...] (the addresses of your Spark driver and executors), "
            "or set LAKESESSION_GATEWAY_CLIENTS"
        )
    remote_host = urlsplit(remote.replace("sc://", "http://", 1)).hostname or ""
    try:
        resolved = {str(info[4][0]) for info in socket.getaddrinfo(remote_host, None)}
    except OSError:
        raise ConfigError(
            f"cannot resolve the Spark Connect host {remote_host!r} to allow it through the gateway. "
            "Fix: pass gateway_clients=[...] with its driver and executor addresses"
        ) from None
    return [*sorted(resolved), "127.0.0.0/8", "::1"]
