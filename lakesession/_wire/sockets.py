"""Listening sockets bound before their server starts: the URL is known before the app is built, and
port 0 picks a free port without races. Used by the catalog's uvicorn and the gateway's hypercorn alike."""

from __future__ import annotations

import socket


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (IPv6 when ``host`` has a colon)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio only sets TCP_NODELAY on accepted sockets whose listening socket
    # names the protocol; without it every response waits ~40 ms for the client's delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(512)
    sock.set_inheritable(True)
    return sock


def url_host(host: str) -> str:
    """``host`` as it stands in a URL: the wildcard address becomes loopback, IPv6 gets brackets."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host
