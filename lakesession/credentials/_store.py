"""Per-table vended storage credentials: state, path-boundary prefix matching, secret-free snapshots.

The store holds what the catalog vended for each loaded table (one or more
``storage-credentials``, each for a storage prefix) and the table's state:

``valid``       usable; refreshed ahead of expiry on the next use
``refreshing``  a refresh is in flight (the current credentials keep being served)
``revoked``     the catalog answered 403 to a refresh: every use raises ``CredentialsRevokedError``
``failed``      expired, and the catalog could not refresh them (uses raise ``CredentialsRefreshError``)
``expired``     past expiry, no refresh attempted yet (nothing used the table)

Secrets live only in ``StorageCredential.config``; no repr, snapshot row,
state listener or error message ever shows them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from .._wire.cloudkeys import expiry_seconds, is_expiry_key
from ..errors import ConfigError
from ._errors import CredentialsError
from ._states import (
    REVOKED,
    STATES,
    VALID,
    StorageCredential,
    TableCredentials,
)

log = logging.getLogger("lakesession.credentials")

EXPIRES_AT_MS = "s3.session-token-expires-at-ms"
REFRESH_ENDPOINT = "client.refresh-credentials-endpoint"

_SECRET_MARKERS = (
    "secret",
    "token",
    "access-key",
    "password",
    "account-key",
    "sas",
    "credential",
    "private",
    "connection-string",
)
_S3_ALIASES = ("s3a://", "s3n://")

Listener = Callable[[str, str, str], None]  # (table, old state, new state)


def is_secret_key(key: str) -> bool:
    """Whether a FileIO / vended config key carries a secret (keys, SAS and OAuth tokens, passwords,
    Azure connection strings, which may hold an account key)."""
    k = key.lower()
    if is_expiry_key(k) or k.endswith(("endpoint", ".uri", "-enabled")):
        return False
    return any(m in k for m in _SECRET_MARKERS)


def public_config(config: Mapping[str, Any]) -> dict[str, str]:
    """``config`` without secret-bearing keys (and without non-string values such as auth managers)."""
    return {k: v for k, v in config.items() if isinstance(v, str) and not is_secret_key(k)}


def _norm(location: str) -> str:
    for alias in _S3_ALIASES:
        if location.startswith(alias):
            return "s3://" + location[len(alias) :]
    return location


def covers(prefix: str, path: str) -> bool:
    """Path-boundary-safe containment: ``s3://b/wh/orders`` covers ``s3://b/wh/orders/x``, never ``…/orders_archive/x``."""
    p, q = _norm(prefix).rstrip("/"), _norm(path)
    if not p:
        return False
    return q == p or q.startswith(p + "/")


def expiry_of(config: Mapping[str, str]) -> float | None:
    """Earliest expiry in a credential config (S3 ``*expires-at-ms``, ADLS ``adls.sas-token-expires-at-ms.<host>``,
    GCS ``gcs.oauth2.token-expires-at``), as epoch seconds."""
    return expiry_seconds(config)


def _pairs(storage_credentials: Iterable[Any]) -> list[tuple[str, Mapping[str, str]]]:
    out: list[tuple[str, Mapping[str, str]]] = []
    for c in storage_credentials:
        if isinstance(c, Mapping):
            out.append((str(c["prefix"]), dict(c.get("config") or {})))
        elif isinstance(c, tuple):
            out.append((str(c[0]), dict(c[1])))
        else:  # pyiceberg's StorageCredential model
            out.append((str(c.prefix), dict(c.config)))
    return out


class CredentialStore:
    """Thread-safe per-table credential state, shared by a session's tables.

    ``register`` (at table load) and the refresher fill it; ``match`` picks a credential
    for a path; ``snapshot`` feeds DataFrames and widgets. ``ensure``/``credential_for``/
    ``refresh``/``refresh_all`` refresh through the catalog's ``client.refresh-credentials-endpoint``.

    Args:
        transport: An ``httpx`` transport for the refresh requests (tests inject failures here).
        clock: Epoch-seconds clock (``time.time``).
        timeout: Per-request timeout of a refresh, in seconds.
        assumed_ttl: Lifetime, in seconds, to assume for vended keys that state no expiry (Nessie 0.99
            vends STS keys without ``s3.session-token-expires-at-ms``): they are then refreshed ahead
            of it like any other. ``None``: such keys are taken to never expire.
    """

    def __init__(
        self,
        *,
        transport: Any = None,
        clock: Callable[[], float] = time.time,
        timeout: float = 10.0,
        assumed_ttl: float | None = None,
    ):
        from ._refresh import Refresher

        self._lock = threading.RLock()
        self._tables: dict[str, TableCredentials] = {}
        self._listeners: list[Listener] = []
        self._generation = 0
        self.clock = clock
        if assumed_ttl is not None and assumed_ttl <= 0:
            raise ConfigError(f"assumed_credential_ttl must be a positive number of seconds, not {assumed_ttl!r}")
        self.assumed_ttl = assumed_ttl
        self.refresher = Refresher(self, transport=transport, timeout=timeout)

    # -- registration ---------------------------------------------------------------
    def register(
        self,
        table: str,
        storage_credentials: Iterable[Any] = (),
        config: Mapping[str, str] | None = None,
        *,
        location: str | None = None,
        refresh_url: str | None = None,
        token: Callable[[], str] | None = None,
        mode: str | None = None,
    ) -> TableCredentials:
        """Record what a table load vended (``storage-credentials``, else the ``config`` for ``location``)."""
        pairs = _pairs(storage_credentials)
        if not pairs and config and location and any(is_secret_key(k) for k in config):
            pairs = [(location, {k: v for k, v in config.items() if isinstance(v, str)})]
        now = self.clock()
        with self._lock:
            entry = self._tables.get(table)
            if entry is None:
                entry = self._tables[table] = TableCredentials(table, ())
            entry.mode = mode or entry.mode
            entry.location = location or entry.location
            entry.refresh_url = refresh_url or entry.refresh_url
            entry.token = token or entry.token
            entry.credentials = self._build(table, pairs)
            entry.failures, entry.next_attempt_at, entry.last_error = 0, 0.0, None
            entry.schedule(now)
        self._set_state(entry, VALID)
        return entry

    def _build(self, table: str, pairs: list[tuple[str, Mapping[str, str]]]) -> tuple[StorageCredential, ...]:
        self._generation += 1
        return tuple(
            StorageCredential(
                table, prefix.rstrip("/") or prefix, MappingProxyType(dict(cfg)), self._expiry(cfg), self._generation
            )
            for prefix, cfg in pairs
        )

    def _expiry(self, cfg: Mapping[str, str]) -> float | None:
        """The stated expiry, else (keys with none, and an ``assumed_ttl``) the assumed one from now."""
        stated = expiry_of(cfg)
        if stated is None and self.assumed_ttl is not None and any(is_secret_key(k) for k in cfg):
            return self.clock() + self.assumed_ttl
        return stated

    def _replace(self, entry: TableCredentials, storage_credentials: Iterable[Any]) -> None:
        """A successful refresh: new credentials, state ``valid``."""
        now = self.clock()
        with self._lock:
            entry.credentials = self._build(entry.table, _pairs(storage_credentials))
            entry.refreshes += 1
            entry.last_refresh = now
            entry.failures, entry.next_attempt_at, entry.last_error = 0, 0.0, None
            entry.schedule(now)
        self._set_state(entry, VALID)

    def _set_state(self, entry: TableCredentials, state: str, error: str | None = None) -> None:
        with self._lock:
            old = entry.state
            entry.state = state
            if error is not None:
                entry.last_error = error
            listeners = list(self._listeners)
        if old != state:
            for fn in listeners:
                try:
                    fn(entry.table, old, state)
                except Exception:
                    log.exception("credential state listener failed")

    def forget(self, table: str) -> None:
        with self._lock:
            self._tables.pop(table, None)

    def clear(self) -> None:
        with self._lock:
            self._tables.clear()

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(table, old_state, new_state)`` on every state change; returns an unsubscribe function."""
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    # -- lookups ------------------------------------------------------------------------
    def entry(self, table: str) -> TableCredentials:
        with self._lock:
            entry = self._tables.get(table)
        if entry is None:
            raise CredentialsError(
                f"No vended credentials are known for table {table}: load it with session.table({table!r}) first.",
                table,
            )
        return entry

    def tables(self) -> list[str]:
        with self._lock:
            return sorted(self._tables)

    def __contains__(self, table: object) -> bool:
        with self._lock:
            return table in self._tables

    def __len__(self) -> int:
        with self._lock:
            return len(self._tables)

    def state(self, table: str) -> str:
        return self.entry(table).effective_state(self.clock())

    def match(self, path: str, table: str | None = None) -> StorageCredential | None:
        """The credential whose prefix is the longest one containing ``path`` on a path boundary (optionally of one table).

        A pure lookup (no refresh; see ``credential_for``); revoked tables' credentials are never returned."""
        with self._lock:
            entries = (
                [self._tables[table]]
                if table is not None and table in self._tables
                else ([] if table is not None else list(self._tables.values()))
            )
            candidates = [c for e in entries if e.state != REVOKED for c in e.credentials]
        best: StorageCredential | None = None
        for cred in candidates:
            if covers(cred.prefix, path) and (best is None or len(_norm(cred.prefix)) > len(_norm(best.prefix))):
                best = cred
        return best

    def snapshot(self) -> list[dict[str, Any]]:
        """One secret-free row per (table, prefix): table, prefix, mode, state, expires_at, seconds_left,
        last_refresh, refreshes, last_error."""
        now = self.clock()
        rows = []
        with self._lock:
            for name in sorted(self._tables):
                e = self._tables[name]
                state = e.effective_state(now)
                for c in e.credentials or (None,):
                    exp = c.expires_at if c is not None else None
                    rows.append(
                        {
                            "table": name,
                            "prefix": c.prefix if c is not None else None,
                            "mode": e.mode,
                            "state": state,
                            "expires_at": exp,
                            "seconds_left": None if exp is None else round(max(exp - now, 0.0), 1),
                            "last_refresh": e.last_refresh,
                            "refreshes": e.refreshes,
                            "last_error": e.last_error,
                        }
                    )
        return rows

    # -- refreshing (see _refresh.Refresher) ----------------------------------------------
    def ensure(self, table: str) -> TableCredentials:
        """The table's entry with usable credentials, refreshed first when due (raises when revoked / expired)."""
        return self.refresher.ensure(table)

    def credential_for(self, table: str, path: str) -> StorageCredential:
        """A fresh credential of ``table`` covering ``path``."""
        self.ensure(table)
        cred = self.match(path, table=table)
        if cred is None:
            raise CredentialsError(
                f"No storage credential vended for table {table} covers {path}: "
                f"the table can only read and write under its own location.",
                table,
            )
        return cred

    def refresh(self, table: str) -> str:
        """Refresh one table now (even when not yet due, or revoked); returns its new state."""
        return self.refresher.refresh(table)

    def refresh_all(self, force: bool = False) -> dict[str, str]:
        """Refresh every table that is due (all with ``force``), never raising; returns ``{table: state}``."""
        return self.refresher.refresh_all(force=force)

    def close(self) -> None:
        self.refresher.close()

    def __repr__(self) -> str:
        now = self.clock()
        with self._lock:
            states = [e.effective_state(now) for e in self._tables.values()]
        summary = ", ".join(f"{states.count(s)} {s}" for s in STATES if s in states)
        return f"CredentialStore({len(states)} tables{': ' + summary if summary else ''})"
