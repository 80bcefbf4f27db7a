"""What the front door refuses for bounded state, and how the engine gives memory back.

Raised by ``_users`` and turned into gRPC statuses by ``_proxy``: ``Exhausted`` (RESOURCE_EXHAUSTED, a
limit), ``ExchangeRefused`` (UNAUTHENTICATED, the issuer no longer acts for the user), ``CatalogUnavailable``
(UNAVAILABLE, the catalog or its issuer down), ``SessionEnded`` (the engine ended an evicted user's session).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CatalogUnavailable", "ExchangeRefused", "Exhausted", "SessionEnded", "trim_memory"]


@dataclass
class Exhausted(Exception):
    """A limit of the engine reached (gRPC RESOURCE_EXHAUSTED): one line naming the limit and the fix."""

    what: str
    rule: str
    hint: str

    def __str__(self) -> str:
        return f"lakesession engine refused {self.what}: rule '{self.rule}'; {self.hint}"


class ExchangeRefused(Exception):
    """The issuer refused to exchange the user's token (revoked, deleted, unknown principal)."""


class SessionEnded(Exception):
    """A Connect session the engine ended (its user was evicted): the client must open a new one."""


class CatalogUnavailable(Exception):
    """The catalog or its issuer could not be reached: the engine cannot act for the user now."""

    @classmethod
    def of(cls, exc: BaseException, where: str) -> CatalogUnavailable | None:
        """The one-line refusal for ``exc`` if it is a connection failure (pyiceberg's ``requests``), else None."""
        import requests

        if not isinstance(exc, (requests.ConnectionError, requests.Timeout)):
            return None
        return cls(f"the catalog at {where} is unreachable ({type(exc).__name__}); try again once it is back")


def trim_memory() -> None:
    """Give freed memory back to the OS: glibc keeps it in per-thread arenas (each gateway had threads), so
    without this the engine's RSS stays at its peak after the users who caused it have gone."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim this way
        pass
