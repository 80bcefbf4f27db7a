"""A TCP forwarder on a fixed loopback port that the fault tests switch off and on.

``down()`` closes the listening socket and cuts every open connection, so clients get exactly what
they get from a stopped server (connection refused); ``up()`` listens on the same port again. It
forwards bytes only (no HTTP of its own), so whatever is behind it (an issuer, a catalog) is real.
"""

from __future__ import annotations

import socket
import threading
from typing import Any


class Outlet:
    """Forward ``127.0.0.1:<port>`` to ``target``; switchable."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self.port = 0
        self.accepted = 0
        self.up()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(64)
        self.port = sock.getsockname()[1]
        with self._lock:
            self._listener = sock
        threading.Thread(target=self._accept, args=(sock,), name="outlet-accept", daemon=True).start()

    def down(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, set()
        if listener is not None:
            _close(listener)
        for c in conns:
            _close(c)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by down()
            try:
                upstream = socket.create_connection(self.target, timeout=10)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                if self._listener is not listener:  # went down meanwhile
                    _close(client)
                    _close(upstream)
                    return
                self._conns.update((client, upstream))
                self.accepted += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), name="outlet-pump", daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                _close(s)
            with self._lock:
                self._conns.discard(src)
                self._conns.discard(dst)

    def __enter__(self) -> Outlet:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.down()


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()
