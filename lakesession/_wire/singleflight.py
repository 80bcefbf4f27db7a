"""Single flight: concurrent calls for the same key share one execution.

Neutral ground shared by the gateway (credential refreshes from many JVM threads)
and the reference catalog's vendor (STS calls on a cache miss).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class _Flight(Generic[T]):
    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: T | None = None
        self.error: BaseException | None = None


class SingleFlight(Generic[T]):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flights: dict[object, _Flight[T]] = {}

    def do(self, key: object, fn: Callable[[], T]) -> tuple[T, bool]:
        """Run ``fn`` unless a call for ``key`` is in flight; returns (result, shared)."""
        with self._lock:
            flight = self._flights.get(key)
            leader = flight is None
            if flight is None:
                flight = self._flights[key] = _Flight()
        if not leader:
            flight.done.wait()
            if flight.error is not None:
                raise flight.error
            return flight.result, True  # type: ignore[return-value]
        try:
            flight.result = fn()
            return flight.result, False
        except BaseException as e:
            flight.error = e
            raise
        finally:
            with self._lock:
                self._flights.pop(key, None)
            flight.done.set()
