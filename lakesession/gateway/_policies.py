"""How a session's access mode shapes the gateway's answers: vended credentials, or remote signing.

Why two objects: the mode is fixed when the session starts, and it touches several endpoints at once (what
the engine may ask for, which storage credentials it may hold, how table answers are rewritten). One policy
chosen at construction keeps those decisions together instead of an ``access == SIGNING`` test per handler.

* ``VendedPolicy`` (the default): the engine's delegation header passes through; table loads feed the
  credential-refresh cache; a loaded table's config gets the gateway's own ``…/credentials`` refresh endpoint.
* ``SigningPolicy`` (``access="remote-signing"``): every call asks for remote signing; no storage credential
  reaches the JVM (refreshes and the ``/lakesession/`` routes are refused, vended keys are stripped); a load the
  catalog cannot sign (ADLS/GCS, or a catalog that ignored the request) is a 400 naming the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from . import _signer
from ._rewrite import rewrite_table_config, signing_unsupported, stamp_expiry
from ._signer import SignerRoutes, rewrite_signing
from ._upstream import Reply, Upstream, error_reply

__all__ = ["SIGNING", "AccessPolicy", "SigningPolicy", "VendedPolicy", "policy_for"]

SIGNING = "remote-signing"
DELEGATION = "x-iceberg-access-delegation"


class Gateway(Protocol):
    """What a policy reads of its gateway (live: ``endpoints`` arrive with the first ``/v1/config``)."""

    upstream: Upstream
    signers: SignerRoutes
    region: str
    assumed_ttl: float | None
    endpoints: list[str] | None
    _gateway_base: Callable[[], str]

    def _note_load(self, path: str, query: str, req_headers: dict[str, str], reply: Reply) -> None: ...


class AccessPolicy:
    """The decisions that depend on the access mode (see the module docstring); subclasses pick them."""

    strip_credentials = False

    def __init__(self, gateway: Gateway):
        self.gateway = gateway

    def headers(self, forwarded: dict[str, str]) -> dict[str, str]:
        """The headers forwarded upstream (the engine's, filtered)."""
        return forwarded

    def refuse_storage(self) -> Reply | None:
        """A refusal for the ``/lakesession/`` credential routes, or None to serve them."""
        return None

    def refuse_refresh(self) -> Reply | None:
        """A refusal for a table's ``…/credentials`` refresh, or None to serve it."""
        return None

    def loaded(self, path: str, query: str, req_headers: dict[str, str], reply: Reply, obj: str, load: bool) -> Reply:
        """A table load's (``load``) or create's answer for ``obj`` (``table ns.t``), before it is rewritten."""
        return reply

    def refresh_endpoint(self, base: str, path: str, loaded: bool) -> str | None:
        """The gateway's own refresh endpoint for a loaded table's config, or None."""
        return None

    def table_answer(self, content: bytes, base: str, path: str, obj: str, chain_id: str | None, loaded: bool) -> bytes:
        """A 200 table answer (load, create, credentials, listing…) as the JVM gets it: the catalog's signer
        and URLs pointed at the gateway, its region, and for a loaded table the refresh endpoint and expiry."""
        gw = self.gateway
        if loaded or self.strip_credentials:
            content = rewrite_signing(
                content,
                gw.upstream.base_url,
                base,
                gw._gateway_base(),
                gw.signers,
                obj,
                chain_id,
                strip_credentials=self.strip_credentials,
            )
        own = self.refresh_endpoint(base, path, loaded)
        if own is not None:
            content = stamp_expiry(content, gw.assumed_ttl)
        return rewrite_table_config(content, gw.upstream.base_url, base, gw.region, own)


class VendedPolicy(AccessPolicy):
    """Vended credentials (the default): the engine's choice passes through, the gateway refreshes keys."""

    def loaded(self, path: str, query: str, req_headers: dict[str, str], reply: Reply, obj: str, load: bool) -> Reply:
        if load:
            self.gateway._note_load(path, query, req_headers, reply)
        return reply

    def refresh_endpoint(self, base: str, path: str, loaded: bool) -> str | None:
        return f"{base}{path}/credentials" if loaded else None


class SigningPolicy(AccessPolicy):
    """Remote signing: the JVM holds no storage credential, whatever the engine or the catalog would do."""

    strip_credentials = True
    _NO_KEYS = "This session uses remote signing: "

    def headers(self, forwarded: dict[str, str]) -> dict[str, str]:
        return {**forwarded, DELEGATION: SIGNING}  # whatever the engine asks: never vended credentials

    def refuse_storage(self) -> Reply | None:
        return error_reply(403, "ForbiddenException", self._NO_KEYS + "no storage credentials")

    def refuse_refresh(self) -> Reply | None:
        why = "Spark gets no storage credentials (the catalog signs each request)"
        return error_reply(403, "ForbiddenException", self._NO_KEYS + why)

    def loaded(self, path: str, query: str, req_headers: dict[str, str], reply: Reply, obj: str, load: bool) -> Reply:
        status, content, _ = reply
        refusal = signing_unsupported(content) if status == 200 else None
        if refusal is not None:  # Spark would fail later with an opaque Azure/Google auth error
            return error_reply(400, "BadRequestException", refusal)
        if not load or status != 200:
            return reply
        gw = self.gateway
        refused = _signer.refuse_unsigned(content, gw.upstream.base_url, obj, gw.endpoints, gw.signers.ever)
        return refused or reply


def policy_for(access: str | None, gateway: Gateway) -> AccessPolicy:
    """The policy for a session's ``access`` mode (``remote-signing``, else vended credentials), chosen once."""
    return SigningPolicy(gateway) if access == SIGNING else VendedPolicy(gateway)
