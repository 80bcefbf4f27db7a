"""Refreshing a table's vended credentials through the catalog, lazily, before each file open.

``ensure(table)`` is cheap while the credentials are fresh. Once a table is due
(``refresh_at``: expiry minus min(300 s, 20 % of the lifetime), at least 1 s), the
first caller fetches ``GET {client.refresh-credentials-endpoint}`` with the user's
current token and ``X-Iceberg-Access-Delegation: vended-credentials``; concurrent
callers keep using the still-valid credentials meanwhile (single flight per table).

* 200 → new credentials, state ``valid``.
* 403 → state ``revoked``; every later use raises ``CredentialsRevokedError``.
* connection error, timeout, 401, 408, 429, 5xx → transient: while the current credentials
  are valid they keep being served and the next attempt waits a full-jitter backoff;
  once they have expired a use retries in place a few times, then the table is ``failed``.
* other answers (404, malformed bodies) → not retried before expiry.

No thread runs in the background: tables nobody uses are not refreshed (``refresh_all``
does it on demand).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any, Protocol

import httpx

from .._wire.cloudkeys import holds_credential
from ..errors import LakesessionError
from ._errors import CredentialsError, CredentialsRefreshError, CredentialsRevokedError
from ._states import FAILED, REFRESHING, REVOKED, VALID, TableCredentials

log = logging.getLogger("lakesession.credentials")

OK, DENIED, TRANSIENT, PERMANENT = "ok", "denied", "transient", "permanent"
_TRANSIENT_STATUS = frozenset({401, 408, 425, 429})


def resolve_endpoint(catalog_uri: str, endpoint: str) -> str:
    """An absolute URL for ``endpoint`` (absolute, or relative to the catalog URI as Iceberg resolves it)."""
    if endpoint.startswith(("http://", "https://")):
        return endpoint
    return f"{catalog_uri.rstrip('/')}/{endpoint.lstrip('/')}"


def _error_detail(response: httpx.Response) -> str:
    detail = f"HTTP {response.status_code}"
    try:
        err = response.json().get("error") or {}
        parts = [str(err.get("type") or ""), str(err.get("message") or "")]
        text = ": ".join(p for p in parts if p)
    except (ValueError, AttributeError):
        text = ""
    return f"{detail} {text[:300]}".strip() if text else detail


class StoreView(Protocol):
    """What the refresher needs of its store (``CredentialStore`` is one): entries, the clock, and state changes."""

    @property
    def _lock(self) -> AbstractContextManager[Any]: ...
    @property
    def clock(self) -> Callable[[], float]: ...

    def entry(self, table: str) -> TableCredentials: ...
    def tables(self) -> list[str]: ...
    def _set_state(self, entry: TableCredentials, state: str, error: str | None = None) -> None: ...
    def _replace(self, entry: TableCredentials, storage_credentials: Iterable[Any]) -> None: ...


def _scrub(text: str, secrets: list[str]) -> str:
    for s in secrets:
        if s and len(s) >= 6:
            text = text.replace(s, "***")
    return text


class Refresher:
    """Refreshes the entries of one ``CredentialStore`` (see the module docstring)."""

    def __init__(
        self,
        store: StoreView,
        *,
        transport: Any = None,
        timeout: float = 10.0,
        max_attempts: int = 3,
        base_delay: float = 0.2,
        max_delay: float = 5.0,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self._store = store
        self._transport = transport
        self._timeout = timeout
        self.max_attempts = max(1, max_attempts)
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._sleep = sleep
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()
        self.requests = 0  # refresh requests sent to catalogs (all tables)

    # -- public -----------------------------------------------------------------------
    def ensure(self, table: str) -> TableCredentials:
        store = self._store
        e = store.entry(table)
        if e.state == REVOKED:
            raise CredentialsRevokedError(table, e.last_error)
        now = store.clock()
        if self._due(e, now):
            if e.flight.acquire(blocking=False):
                try:
                    self._run(e, force=False)
                finally:
                    e.flight.release()
            elif not e.usable(store.clock()):
                with e.flight:  # nothing usable: wait for the refresh in flight
                    pass
        if e.state == REVOKED:
            raise CredentialsRevokedError(table, e.last_error)
        if not e.usable(store.clock()):
            raise self._unusable(e)
        return e

    def refresh(self, table: str) -> str:
        e = self._store.entry(table)
        with e.flight:
            self._run(e, force=True)
        return e.effective_state(self._store.clock())

    def refresh_all(self, force: bool = False) -> dict[str, str]:
        states: dict[str, str] = {}
        for name in self._store.tables():
            try:
                e = self._store.entry(name)
            except CredentialsError:
                continue  # forgotten meanwhile
            if force or (e.state != REVOKED and self._due(e, self._store.clock())):
                with e.flight:
                    try:
                        self._run(e, force=force)
                    except Exception as exc:
                        log.warning("refreshing credentials of %s failed: %s", name, type(exc).__name__)
            states[name] = e.effective_state(self._store.clock())
        return states

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    # -- internals -------------------------------------------------------------------------
    @property
    def client(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(transport=self._transport, timeout=self._timeout, follow_redirects=False)
            return self._client

    @staticmethod
    def _refreshable(e: TableCredentials) -> bool:
        return e.refresh_url is not None and e.token is not None

    def _due(self, e: TableCredentials, now: float) -> bool:
        if not self._refreshable(e) or now < e.next_attempt_at:
            return False
        return now >= e.refresh_at or not e.usable(now)

    def _unusable(self, e: TableCredentials) -> CredentialsRefreshError:
        if not self._refreshable(e):
            detail = "the catalog gave no refresh endpoint for it"
        else:
            detail = e.last_error or "the catalog did not answer"
        if e.state != FAILED:
            self._store._set_state(e, FAILED, detail)
        return CredentialsRefreshError(e.table, detail)

    def _backoff(self, e: TableCredentials, attempt: int, now: float) -> float:
        cap = min(self.max_delay, self.base_delay * 2**attempt)
        exp = e.expires_at
        if e.usable(now) and exp is not None:
            cap = min(cap, max(0.05, (exp - now) / 3))  # leave room for more tries before expiry
        return random.uniform(0, cap)

    def _run(self, e: TableCredentials, *, force: bool) -> None:
        """One refresh (caller holds ``e.flight``): a single try while usable, a few with jitter once expired."""
        try:
            self._attempt(e, force=force)
        finally:
            if e.state == REFRESHING:  # an unexpected error escaped: never leave the table "refreshing"
                usable = e.usable(self._store.clock())
                self._store._set_state(e, VALID if usable else FAILED, "refresh failed unexpectedly")

    def _attempt(self, e: TableCredentials, *, force: bool) -> None:
        store = self._store
        now = store.clock()
        if not force and not self._due(e, now):
            return  # refreshed by the previous flight
        if not self._refreshable(e):
            return
        store._set_state(e, REFRESHING)
        attempts = 1 if e.usable(now) else self.max_attempts
        kind, payload = PERMANENT, "no attempt made"
        for i in range(attempts):
            kind, payload = self._fetch(e)
            if kind == OK:
                store._replace(e, payload)
                log.debug("refreshed credentials of %s", e.table)
                return
            if kind == DENIED:
                store._set_state(e, REVOKED, payload)
                log.warning("credentials of %s revoked: %s", e.table, payload)
                return
            if kind == PERMANENT or i + 1 == attempts:
                break
            self._sleep(self._backoff(e, i, store.clock()))
        now = store.clock()
        usable = e.usable(now)
        with store._lock:
            e.failures += 1
            if kind == PERMANENT and usable:
                e.next_attempt_at = e.expires_at or now  # not worth retrying before expiry
            else:
                e.next_attempt_at = now + self._backoff(e, e.failures, now)
        log.info(
            "refreshing credentials of %s failed (%s); %s",
            e.table,
            payload,
            "serving the current ones" if usable else "none usable",
        )
        store._set_state(e, VALID if usable else FAILED, payload)

    def _fetch(self, e: TableCredentials) -> tuple[str, Any]:
        assert e.refresh_url is not None and e.token is not None
        try:
            token = e.token()
        except LakesessionError as exc:  # identity errors never carry secrets
            return TRANSIENT, f"could not get the user's token ({type(exc).__name__}: {exc})"
        except Exception as exc:
            return TRANSIENT, f"could not get the user's token ({type(exc).__name__})"
        secrets = [token] + [v for c in e.credentials for v in c.config.values()]
        headers = {
            **({"Authorization": f"Bearer {token}"} if token else {}),  # '': no identity (identity='none')
            "X-Iceberg-Access-Delegation": "vended-credentials",
            "Accept": "application/json",
        }
        with self._lock:
            self.requests += 1
        try:
            r = self.client.get(e.refresh_url, headers=headers)
        except httpx.HTTPError as exc:
            return TRANSIENT, f"catalog unreachable ({type(exc).__name__})"
        if r.status_code == 200:
            try:
                doc = r.json()
                creds = _reloaded(doc) if "metadata" in doc else doc["storage-credentials"]
                if not isinstance(creds, list) or not all(
                    isinstance(c, dict) and isinstance(c.get("prefix"), str) and isinstance(c.get("config"), dict)
                    for c in creds
                ):
                    raise TypeError
            except (ValueError, KeyError, TypeError, AttributeError):
                return PERMANENT, "malformed credentials response"
            if not creds:
                return PERMANENT, "the catalog returned no storage credentials"
            return OK, creds
        detail = _scrub(_error_detail(r), secrets)
        if r.status_code == 403:
            return DENIED, detail
        if r.status_code in _TRANSIENT_STATUS or r.status_code >= 500:
            return TRANSIENT, detail
        return PERMANENT, detail


def _reloaded(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Credentials from a LoadTableResult: what a reload vends on catalogs without ``/credentials``
    (``storage-credentials``, else the table config's keys for the table's location)."""
    creds = doc.get("storage-credentials") or []
    config = {k: v for k, v in (doc.get("config") or {}).items() if isinstance(v, str)}
    if not creds and holds_credential(config):
        creds = [{"prefix": doc["metadata"]["location"], "config": config}]
    return list(creds)


__all__ = ["Refresher", "resolve_endpoint"]
