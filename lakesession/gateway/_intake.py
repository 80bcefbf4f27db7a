"""What the gateway settles before a request's body is read: who is calling, and how much it may send.

Why first: an unauthenticated caller (any local user, or anyone on the network for a Connect-mode
gateway) must not make the notebook's process buffer anything.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Sequence
from typing import Any

from ._upstream import Reply, error_reply

logger = logging.getLogger("lakesession.gateway")

MAX_BODY_BYTES = 32 * 1024 * 1024  # a commit or create body is kilobytes; anything near this is a flood (413)
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def refuse_client(allowed: Sequence[Network] | None, client: Any) -> Reply | None:
    """403 for a peer outside ``allowed_clients`` (a gateway bound to a routable address, Connect mode)."""
    if allowed is None:
        return None
    host = client[0] if client else ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None and any(address in net for net in allowed):
        return None
    logger.warning("gateway refused a connection from %s (not in its allowed clients)", host or "an unknown peer")
    return error_reply(
        403, "ForbiddenException", "This lakesession gateway accepts connections only from its allowed clients"
    )


def network(spec: str) -> Network:
    """An address or CIDR network (``10.0.0.7``, ``10.0.0.0/24``); ValueError names a bad one."""
    try:
        return ipaddress.ip_network(spec.strip(), strict=False)
    except ValueError:
        raise ValueError(f"not an IP address or network: {spec!r} (e.g. 10.0.0.7 or 10.0.0.0/24)") from None


async def read_body(receive: Any, headers: dict[str, str], limit: int) -> tuple[bytes, Reply | None] | None:
    """The request body, or a 413 as soon as it is known to exceed ``limit`` (Content-Length, else while
    streaming): an authenticated caller still cannot make the gateway buffer without bound. None: the
    client went away."""
    too_large = error_reply(413, "BadRequestException", f"Request body larger than {limit} bytes")
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return b"", too_large
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if len(body) > limit:
            return b"", too_large
        if not message.get("more_body"):
            return bytes(body), None
