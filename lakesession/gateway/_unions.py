"""``GET /lakesession/bucket-credentials``: Hadoop S3A's keys for one bucket (issues #33, #40).

S3A takes one credential provider per bucket, so the JVM asks here for the union of this session's prefixes in
bucket ``B``: the tables it loaded there (``mode=write``: only those whose credentials are not read-only), the
registered locations granted to the user (the catalog's ``locations`` route; ``mode=write``: those holding
``LOCATION_WRITE``) and the locations ``path-credentials`` was granted since. One upstream
``location-credentials`` call per 64 prefixes (the catalog's cap) with ``location`` repeated; the catalog
splits the union into as few keys as STS's policy size bounds allow, so the answer may hold several keys:
``{"bucket", "mode", "prefixes", "storage-credentials": [one entry per prefix, carrying the config of the key
that covers it]}``. The JVM's request check picks the entry per request by key prefix. Held per (bucket, mode,
prefix set) under the min-valid / refresh-ahead / single-flight rules of ``path-credentials``; when the set
grows (a table loaded, a grant used), the next call vends for the new union.

Revocation (#40 B3): a 403 from the catalog for a prefix (in a ``path-credentials`` or table credentials
call, a refresh, a union fetch) drops every held union containing it at once, and the prefix stays out of this
session's unions until the catalog grants it again (a later 200 for it).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

from .._wire.cloudkeys import READ_ONLY_ACCESS, STORAGE_ACCESS
from .._wire.singleflight import SingleFlight
from ._credcache import DEFAULT_MIN_VALID, required_life
from ._held import JSON, Held, as_prefix, credential_config
from ._upstream import Reply, Upstream, error_reply

logger = logging.getLogger("lakesession.gateway")

LOCATIONS_ROUTE = "GET /v1/{prefix}/lakesession/locations"
GRANTED_TTL = 30.0  # seconds the registered locations granted to the user are remembered (bucket-credentials)
MAX_LOCATIONS = 64  # the catalog's cap on ``location`` parameters per location-credentials call

UnionKey = tuple[str, str, tuple[str, ...]]  # (bucket, mode, sorted prefixes)


@dataclass(frozen=True)
class Union:
    """A bucket's union for one mode: each prefix's key (several prefixes share a key; one union, several keys)."""

    keys: dict[str, Held]  # prefix (canonical, ends with '/') -> the credential covering it

    def usable(self, now: float, min_valid: float) -> bool:
        return all(h.usable(now, min_valid) for h in self.keys.values())

    def refresh_soon(self, now: float, min_valid: float) -> bool:
        return any(
            h.remaining(now) < 2 * required_life(h.expires_at - h.fetched_at, min_valid) for h in self.keys.values()
        )

    def covers(self, target: str) -> bool:
        return any(target.startswith(p) for p in self.keys)


class BucketUnions:
    """The bucket route and revocation, mixed into ``PathRoutes`` (which owns the state below)."""

    upstream: Upstream
    _lock: threading.Lock
    _tables: dict[str, tuple[str, str]]
    _held: dict[tuple[str, str], Held]
    _flights: SingleFlight[Reply]
    _ahead: set[object]
    _unions: dict[UnionKey, Union]
    _granted: tuple[float, list[tuple[str, list[str]]]] | None
    _denied: set[tuple[str, str]]  # (prefix, mode) the catalog refused since: never in a union until granted again
    _table_credentials: Callable[[str, str, float], Reply]

    def _catalog(self) -> tuple[str | None, list[str]]:
        raise NotImplementedError

    def _ask_catalog(self, locations: list[str], mode: str, why: str) -> Reply:
        raise NotImplementedError

    def _logged(self, action: str, obj: str, reply: Reply, started: float, via: str, issued: bool) -> Reply:
        raise NotImplementedError

    # -- revocation ---------------------------------------------------------------------------------------
    def revoked(self, path: str, mode: str) -> None:
        """The catalog refused ``path`` for ``mode`` (403): drop every key covering it, now (read: both modes)."""
        target = as_prefix(path)
        modes = ("read", "write") if mode == "read" else ("write",)
        with self._lock:
            owners = {p for (p, _) in self._held if target.startswith(p)}
            owners |= {p for k, u in self._unions.items() for p in u.keys if target.startswith(p)}
            owners |= {p for p in self._tables if target.startswith(p)}
            if self._granted is not None:
                owners |= {p for p, _ in self._granted[1] if target.startswith(p)}
            self._denied |= {(p, m) for p in owners for m in modes}
            self._unions = {k: u for k, u in self._unions.items() if k[1] not in modes or not u.covers(target)}
            for key in [k for k in self._held if target.startswith(k[0]) and k[1] in modes]:
                del self._held[key]
            self._granted = None  # ask the catalog which locations are still granted

    def granted_again(self, prefix: str, mode: str) -> None:
        """A 200 for ``prefix`` in ``mode``: the catalog grants it (again)."""
        modes = ("read", "write") if mode == "write" else ("read",)
        with self._lock:
            self._denied -= {(as_prefix(prefix), m) for m in modes}

    def _refused(self, prefix: str, mode: str) -> bool:
        return (prefix, mode) in self._denied or (prefix, "read") in self._denied

    # -- the route ------------------------------------------------------------------------------------------
    def _bucket_route(self, params: dict[str, str]) -> Reply:
        bucket, mode = params.get("bucket", ""), params.get("mode") or "read"
        try:
            min_valid = float(params.get("min-valid-seconds") or DEFAULT_MIN_VALID)
        except ValueError:
            min_valid = -1.0
        if not bucket or "/" in bucket or mode not in ("read", "write") or not 0 <= min_valid <= 12 * 3600:
            return error_reply(
                400, "BadRequestException", "Expected bucket=NAME, mode=read|write, min-valid-seconds in 0..43200"
            )
        started = time.monotonic()
        reply, via, prefixes = self._bucket_credentials(bucket, mode, min_valid)
        issued = reply[0] == 200 and bool(prefixes)
        return self._logged(
            "bucket_credentials", f"bucket {bucket} ({len(prefixes)} prefixes)", reply, started, via, issued
        )

    def _granted_locations(self) -> list[tuple[str, list[str]]]:
        """The registered locations granted to the user, with their privileges (asked at most every 30 s)."""
        now = time.monotonic()
        granted = self._granted
        if granted is not None and now - granted[0] < GRANTED_TTL:
            return granted[1]
        out: list[tuple[str, list[str]]] = []
        prefix, endpoints = self._catalog()
        if prefix is not None and LOCATIONS_ROUTE in endpoints:
            status, body, _ = self.upstream.forward(
                "GET", f"/v1/{quote(prefix, safe='')}/lakesession/locations", "", {"accept": "application/json"}, b""
            )
            if status == 200:
                for x in json.loads(body).get("locations", []):
                    privileges = [str(p) for p in x.get("privileges", [])]
                    out.append((as_prefix(x["location"]), privileges))
        self._granted = (now, out)
        return out

    def _bucket_prefixes(self, bucket: str, mode: str, min_valid: float) -> tuple[str, ...]:
        """This session's prefixes in ``bucket`` for ``mode`` (see the module docstring), sorted."""
        inside = "s3://" + bucket + "/"
        with self._lock:
            tables = [(p, t) for p, t in self._tables.items() if p.startswith(inside)]
            held = {p for (p, m) in self._held if p.startswith(inside) and (m == mode or m == "write")}
        found: set[str] = set(held)
        for prefix, (table_path, refresh_query) in tables:
            if mode == "write":
                reply = self._table_credentials(table_path, refresh_query, min_valid)
                if reply[0] == 403:
                    self.revoked(prefix, "read")
                config = credential_config(reply[1], prefix) if reply[0] == 200 else None
                if config is None or config.get(STORAGE_ACCESS) == READ_ONLY_ACCESS:
                    continue
            found.add(prefix)
        for prefix, privileges in self._granted_locations():
            if prefix.startswith(inside) and (mode == "read" or "LOCATION_WRITE" in privileges):
                found.add(prefix)
        with self._lock:
            found = {p for p in found if not self._refused(p, mode)}
        # a prefix inside another one adds nothing (tables and locations never overlap; held ones may be deeper)
        return tuple(sorted(p for p in found if not any(p != q and p.startswith(q) for q in found)))

    def _bucket_credentials(self, bucket: str, mode: str, min_valid: float) -> tuple[Reply, str, tuple[str, ...]]:
        prefixes = self._bucket_prefixes(bucket, mode, min_valid)
        doc: dict[str, object] = {"bucket": bucket, "mode": mode, "prefixes": prefixes}
        if not prefixes:
            return (200, json.dumps(doc | {"storage-credentials": []}).encode(), dict(JSON)), "none", prefixes
        key = (bucket, mode, prefixes)
        now = time.time()
        with self._lock:
            held = self._unions.get(key)
        via = "cache"
        if held is not None and held.usable(now, min_valid):
            if held.refresh_soon(now, min_valid):
                self._union_ahead(key)
        else:
            reply, shared = self._flights.do(("union", bucket, mode, *prefixes), lambda: self._fetch_union(key))
            if reply[0] != 200:
                return reply, "upstream", prefixes
            with self._lock:
                held = self._unions.get(key)
            if held is None:
                return error_reply(502, "ServiceFailureException", "The catalog vended no credentials"), "upstream", ()
            via = "shared" if shared else "upstream"
        entries = []
        for p in prefixes:
            config = {k: v for k, v in held.keys[p].config.items() if k != "client.refresh-credentials-endpoint"}
            entries.append({"prefix": p, "config": config})
        doc["storage-credentials"] = entries
        return (200, json.dumps(doc).encode(), dict(JSON)), via, prefixes

    def _union_ahead(self, key: UnionKey) -> None:
        ahead = ("union:" + key[0], key[1] + ":" + ",".join(key[2]))
        with self._lock:
            if ahead in self._ahead:
                return
            self._ahead.add(ahead)

        def run() -> None:
            try:
                self._flights.do(("union", key[0], key[1], *key[2]), lambda: self._fetch_union(key))
            except Exception:  # the next request retries in the foreground
                logger.debug("refresh-ahead of bucket %s failed", key[0], exc_info=True)
            finally:
                with self._lock:
                    self._ahead.discard(ahead)

        threading.Thread(target=run, name="lakesession-bucket-refresh", daemon=True).start()

    def _fetch_union(self, key: UnionKey) -> Reply:
        """Upstream ``location-credentials``, ``location`` repeated (64 per call): a 200 is held per (bucket, mode, set)."""
        bucket, mode, prefixes = key
        keys: dict[str, Held] = {}
        headers: dict[str, str] = {}
        for start in range(0, len(prefixes), MAX_LOCATIONS):
            batch = list(prefixes[start : start + MAX_LOCATIONS])
            status, body, headers = self._ask_catalog(
                batch, mode, f"bucket {bucket}: the catalog does not offer credentials by path"
            )
            if status != 200:
                with self._lock:  # a revoked grant: never serve a union that held it; ask the catalog again
                    self._unions = {k: v for k, v in self._unions.items() if k[0] != bucket}
                    self._held = {k: v for k, v in self._held.items() if not k[0].startswith(f"s3://{bucket}/")}
                    self._granted = None
                if status == 403:  # the catalog names the first refused location: the next union goes without it
                    message = body.decode("utf-8", "replace")
                    for p in batch:
                        if any(f"{spelled}{end}" in message for spelled in (p, p.rstrip("/")) for end in " :"):
                            self.revoked(p, mode)
                return status, body, headers
            try:
                fetched = time.time()
                for entry in json.loads(body)["storage-credentials"]:
                    config = {k: v for k, v in entry["config"].items() if isinstance(v, str)}
                    expires = int(config["s3.session-token-expires-at-ms"]) / 1000
                    got = as_prefix(entry["prefix"])
                    keys[got] = Held(got, mode, config, fetched, expires)
            except (ValueError, KeyError, IndexError, TypeError):
                return error_reply(
                    502, "ServiceFailureException", f"The catalog's credentials for bucket {bucket} were malformed"
                )
        covering: dict[str, Held] = {}  # each asked prefix -> the key of the longest answered prefix covering it
        for p in prefixes:
            owners = [q for q in keys if p.startswith(q)]
            if not owners:
                return error_reply(502, "ServiceFailureException", f"The catalog left {p} without a credential")
            covering[p] = keys[max(owners, key=len)]
        with self._lock:
            self._unions = {k: v for k, v in self._unions.items() if k[:2] != (bucket, mode) or k == key}
            self._unions[key] = Union(covering)
        return 200, b"{}", headers
