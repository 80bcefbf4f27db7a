"""pyiceberg's HTTP session with an ``Idempotency-Key`` on every mutation, retried with that key.

pyiceberg 0.12 retries nothing after a dropped connection: a commit the catalog saved whose answer
was lost surfaces as ``ConnectionError``, and re-running the append duplicates the batch. This
adapter gives each mutation one key (a UUIDv7) and, when the catalog advertises key support,
resends it — same key — after a connection failure or a 502/503/504, for up to ``RETRY_WINDOW``
seconds: the catalog applies it once and replays the outcome to the retry.
"""

from __future__ import annotations

import logging
import time
from typing import Any
from urllib.parse import urlsplit

from requests import PreparedRequest, Response
from requests.adapters import HTTPAdapter
from requests.exceptions import ConnectionError, Timeout

from .._idempotency import HEADER, RETRY_STATUSES, RETRY_WINDOW, advertises_keys, backoff, is_mutation, new_key

logger = logging.getLogger("lakesession.catalog")


class KeySupport:
    """What the catalog's ``/v1/config`` said about keys (shared by the adapters of one catalog)."""

    def __init__(self) -> None:
        self.supported = False


class IdempotentAdapter(HTTPAdapter):
    """A requests adapter adding ``Idempotency-Key`` to mutations and retrying them with the same key."""

    def __init__(self, support: KeySupport, window: float = RETRY_WINDOW, **kwargs: Any):
        super().__init__(**kwargs)
        self.support = support
        self.window = window

    def send(self, request: PreparedRequest, *args: Any, **kwargs: Any) -> Response:
        method, path = request.method or "GET", urlsplit(request.url or "").path
        if not is_mutation(method, path):
            response = super().send(request, *args, **kwargs)
            if method == "GET" and path.rstrip("/").endswith("/v1/config") and response.status_code == 200:
                self.support.supported = advertises_keys(response.content)
            return response
        if HEADER not in request.headers:
            request.headers[HEADER] = new_key()
        if not self.support.supported:
            return super().send(request, *args, **kwargs)
        deadline = time.monotonic() + self.window
        attempt = 0
        while True:
            attempt += 1
            try:
                response = super().send(request, *args, **kwargs)
            except (ConnectionError, Timeout) as exc:
                if time.monotonic() >= deadline:
                    raise
                logger.warning("%s %s: %s; retrying with the same Idempotency-Key", method, path, type(exc).__name__)
                time.sleep(backoff(attempt))
                continue
            if response.status_code not in RETRY_STATUSES or time.monotonic() >= deadline:
                return response
            logger.info("%s %s: %d; retrying with the same Idempotency-Key", method, path, response.status_code)
            retry_after = response.headers.get("retry-after")
            response.close()
            time.sleep(backoff(attempt, retry_after))
