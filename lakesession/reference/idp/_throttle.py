"""Rate limits of the issuer's unauthenticated endpoints, with the ``limits`` library (moving windows, in memory).

Counters are keyed so that a flooder exhausts only its own allowance: per (client id,
address) first, then per address (client ids are free to invent). Never per client id
alone: a flood on one id from many addresses would then lock that id's rightful owner
out (failed logins on ``broker``, device logins on the shared ``lakesession-cli``); a
distributed flood is bounded by its addresses instead. A call is admitted only when every
applicable limit has room, and only admitted calls are counted, so a throttled flooder
does not eat into the allowance of the others behind it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from limits import RateLimitItem, parse_many
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from ..settings import AbuseLimits

#: token-endpoint errors that count as a failed (guessing) attempt; polling answers such as
#: ``authorization_pending`` and ``slow_down`` do not
FAILURE_ERRORS = frozenset({"invalid_client", "invalid_grant", "unauthorized_client"})


@dataclass(frozen=True)
class Rule:
    """A named limit and which request attributes key its counter."""

    name: str
    items: tuple[RateLimitItem, ...]
    by_client: bool
    by_address: bool

    def keys(self, client_id: str, address: str) -> tuple[str, ...]:
        return (
            self.name,
            client_id if self.by_client else "*",
            address if self.by_address else "*",
        )


def _rule(name: str, spec: str, *, by_client: bool, by_address: bool) -> Rule:
    try:
        items = tuple(parse_many(spec)) if spec.strip() else ()
    except ValueError:
        raise ValueError(
            f"Invalid rate limit {name}={spec!r}: expected e.g. '10/minute' or '10/minute;100/hour'"
        ) from None
    return Rule(name, items, by_client, by_address)


class Throttle:
    """The issuer's rate limits; each check returns ``None`` (admitted) or seconds to wait (throttled)."""

    def __init__(self, limits: AbuseLimits):
        self._limiter = MovingWindowRateLimiter(MemoryStorage())
        # broadest-for-the-flooder first: a flood of invented client ids stops at its address
        self.device = (
            _rule("device-address", limits.device_rate_per_address, by_client=False, by_address=True),
            _rule("device-client-address", limits.device_rate_per_client_address, by_client=True, by_address=True),
        )
        self.token_calls = (_rule("token-address", limits.token_rate_per_address, by_client=False, by_address=True),)
        self.token_failures = (
            _rule("fail-address", limits.token_failures_per_address, by_client=False, by_address=True),
            _rule("fail-client-address", limits.token_failures_per_client_address, by_client=True, by_address=True),
        )

    def admit(self, rules: tuple[Rule, ...], client_id: str, address: str) -> int | None:
        """Count one call against ``rules`` if all have room; else the seconds until the tightest one has."""
        wait = self.blocked(rules, client_id, address)
        if wait is not None:
            return wait
        for rule in rules:
            for item in rule.items:
                if not self._limiter.hit(item, *rule.keys(client_id, address)):  # lost a race with another call
                    return self._retry_after(item, rule.keys(client_id, address))
        return None

    def blocked(self, rules: tuple[Rule, ...], client_id: str, address: str) -> int | None:
        """Seconds until ``rules`` admit a call again, or None if they would now (nothing is counted)."""
        for rule in rules:
            keys = rule.keys(client_id, address)
            for item in rule.items:
                if not self._limiter.test(item, *keys):
                    return self._retry_after(item, keys)
        return None

    def record(self, rules: tuple[Rule, ...], client_id: str, address: str) -> None:
        """Count one event (e.g. a failed authentication) against ``rules``, whatever their state."""
        for rule in rules:
            for item in rule.items:
                self._limiter.hit(item, *rule.keys(client_id, address))

    def _retry_after(self, item: RateLimitItem, keys: tuple[str, ...]) -> int:
        reset = self._limiter.get_window_stats(item, *keys).reset_time
        return max(1, math.ceil(reset - time.time()))
