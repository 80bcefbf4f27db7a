"""Credentials by path for readers that bypass Iceberg's FileIO (issue #22, ``/briefs/contract22.md``).

``GET /lakesession/path-credentials?path=s3://b/k&mode=read|write&min-valid-seconds=60``: Comet's
native scans, raw ``s3a://`` Parquet and ``Session.filesystem`` ask here (with the session secret,
never the user's token). Resolution: (1) a path under a table this session loaded gets that table's
credentials (the per-table cache the JVM's ``/credentials`` refreshes use); (2) else the catalog's
``location-credentials`` route, when its ``/v1/config`` advertises it; (3) else a 403 ErrorModel
naming the path. ``mode=write`` under a table whose credentials are read-only is the catalog's 403 naming
the grant (or the gateway's, when the catalog offers no credentials by path). A credential is never handed out with less than ``min-valid-seconds`` of life
(``required_life``): it is refreshed instead, one upstream call per prefix at a time (single
flight), and refreshed ahead in the background once half of that margin is used up again.

``GET /lakesession/bucket-credentials?bucket=B&mode=read|write&min-valid-seconds=60``: Hadoop S3A's keys for
one bucket (the union of this session's prefixes there, several keys when one session policy cannot hold
it), and revocation: ``_unions``.

``GET /lakesession/policy-locations``: the prefixes of the tables this session loaded plus the
registered locations granted to the user (for ``CometS3LocationScopedCredentialProvider``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from urllib.parse import parse_qs, quote, unquote

from .._wire.cloudkeys import READ_ONLY_ACCESS, STORAGE_ACCESS
from .._wire.singleflight import SingleFlight
from ._accesslog import AccessLog, AccessRecord
from ._credcache import DEFAULT_MIN_VALID, earliest_expiry, required_life
from ._held import CREDENTIAL_KEYS, JSON, SCHEMES, Held, as_prefix, canonical, credential_config
from ._unions import LOCATIONS_ROUTE, BucketUnions, Union, UnionKey
from ._upstream import Reply, Upstream, error_reply

__all__ = ["CREDENTIAL_KEYS", "PREFIX", "PathRoutes", "as_prefix", "canonical"]

logger = logging.getLogger("lakesession.gateway")

PREFIX = "/lakesession/"
LOCATION_ROUTE = "GET /v1/{prefix}/lakesession/location-credentials"


class PathRoutes(BucketUnions):
    """The ``/lakesession/`` routes of one gateway (see the module docstring; the bucket route: ``_unions``)."""

    def __init__(
        self,
        upstream: Upstream,
        access_log: AccessLog,
        table_credentials: Callable[[str, str, float], Reply],
    ):
        self.upstream = upstream
        self.access_log = access_log
        self._table_credentials = table_credentials  # (table path, refresh query, min valid) -> /credentials reply
        self._lock = threading.Lock()
        self._tables: dict[str, tuple[str, str]] = {}  # table prefix -> (table path, refresh query)
        self._held: dict[tuple[str, str], Held] = {}  # (location prefix, mode) -> credentials
        self._flights: SingleFlight[Reply] = SingleFlight()
        self._config: dict[str, object] | None = None
        self._ahead: set[object] = set()  # refreshes ahead under way
        self._unions: dict[UnionKey, Union] = {}  # (bucket, mode, prefixes) -> the union's keys
        self._denied: set[tuple[str, str]] = set()  # (prefix, mode) the catalog refused since (``_unions``)
        self._granted: tuple[float, list[tuple[str, list[str]]]] | None = None  # (fetched at, [(prefix, privileges)])
        self.upstream_fetches = 0

    # -- what the gateway learns from other calls ---------------------------------------------------
    def note_table(self, table_path: str, refresh_query: str, body: bytes) -> None:
        """A table load or create answered: its location now maps to its credentials."""
        try:
            location = json.loads(body)["metadata"]["location"]
        except (ValueError, KeyError, TypeError):
            return
        if isinstance(location, str) and location.startswith(SCHEMES):
            with self._lock:
                self._tables[as_prefix(location)] = (table_path, refresh_query)

    def table_answered(self, table_path: str, status: int) -> None:
        """The catalog answered a load or credentials call of a table this session loaded: a 403 drops every
        union key covering the table's prefix (#40 B3), a 200 lets the prefix into unions again."""
        if status not in (200, 403):
            return
        with self._lock:
            prefixes = [p for p, (t, _) in self._tables.items() if t == table_path]
        for prefix in prefixes:
            if status == 403:
                self.revoked(prefix, "read")
            else:
                self.granted_again(prefix, "read")

    def note_config(self, body: bytes) -> None:
        try:
            doc = json.loads(body)
        except ValueError:
            return
        if isinstance(doc, dict):
            self._config = doc

    def _catalog(self) -> tuple[str | None, list[str]]:
        """(the catalog's prefix, its advertised endpoints), asking ``/v1/config`` once if the JVM has not."""
        if self._config is None:
            status, body, _ = self.upstream.forward("GET", "/v1/config", "", {"accept": "application/json"}, b"")
            if status == 200:
                self.note_config(body)
        doc = self._config or {}
        merged: dict[str, object] = {}
        for part in ("defaults", "overrides"):
            section = doc.get(part)
            if isinstance(section, dict):
                merged.update(section)
        endpoints = doc.get("endpoints")
        prefix = merged.get("prefix")
        return (prefix if isinstance(prefix, str) else None), (endpoints if isinstance(endpoints, list) else [])

    # -- routes ---------------------------------------------------------------------------------------
    def path_credentials(self, query: str) -> Reply:
        """``GET /lakesession/path-credentials?path=…&mode=…&min-valid-seconds=…`` (see the module docstring)."""
        params = _params(query)
        path, mode = params.get("path", ""), params.get("mode") or "read"
        try:
            min_valid = float(params.get("min-valid-seconds") or DEFAULT_MIN_VALID)
        except ValueError:
            min_valid = -1.0
        if not path.startswith(SCHEMES) or "/../" in path + "/" or "/./" in path + "/" or mode not in ("read", "write"):
            return error_reply(
                400, "BadRequestException", "Expected path=s3://bucket/key, mode=read|write, min-valid-seconds>=0"
            )
        if not 0 <= min_valid <= 12 * 3600:
            return error_reply(400, "BadRequestException", "min-valid-seconds must be between 0 and 43200")
        started = time.monotonic()
        reply, prefix, via = self._path_credentials(path, mode, min_valid)
        return self._logged("path_credentials", f"path {prefix or path}", reply, started, via, reply[0] == 200)

    def bucket_credentials(self, query: str) -> Reply:
        """``GET /lakesession/bucket-credentials?bucket=…&mode=…&min-valid-seconds=…`` (``_unions``)."""
        return self._bucket_route(_params(query))

    def policy_locations(self) -> Reply:
        """``GET /lakesession/policy-locations``: this session's table prefixes and granted locations."""
        with self._lock:
            out = list(self._tables)
        prefix, endpoints = self._catalog()
        if prefix is not None and LOCATIONS_ROUTE in endpoints:
            status, body, _ = self.upstream.forward(
                "GET", f"/v1/{quote(prefix, safe='')}/lakesession/locations", "", {"accept": "application/json"}, b""
            )
            if status == 200:
                out += [as_prefix(x["location"]) for x in json.loads(body).get("locations", [])]
        return 200, json.dumps({"locations": sorted(set(out))}).encode(), dict(JSON)

    def _logged(self, action: str, obj: str, reply: Reply, started: float, via: str, issued: bool) -> Reply:
        """``reply``, recorded in the session's access log (``session.accesses()``)."""
        self.access_log.add(
            AccessRecord(
                time=time.time(),
                action=action,
                object=obj,
                status=reply[0],
                duration_ms=round((time.monotonic() - started) * 1000, 2),
                request_id=reply[2].get("x-request-id"),
                credentials_expire_at=earliest_expiry(reply[1]) if issued else None,
                via=via,
            )
        )
        return reply

    def _path_credentials(self, path: str, mode: str, min_valid: float) -> tuple[Reply, str | None, str]:
        scheme = path.split("://", 1)[0] + "://"
        spelled = lambda prefix: scheme + prefix[len("s3://") :]  # noqa: E731 - the caller's scheme back
        target = as_prefix(path)
        with self._lock:
            tables = [(p, t) for p, t in self._tables.items() if target.startswith(p)]
        if tables:
            prefix, (table_path, refresh_query) = max(tables, key=lambda item: len(item[0]))
            reply = self._table_credentials(table_path, refresh_query, min_valid)
            if reply[0] == 403:
                self.revoked(prefix, "read")  # the table's grant is gone: no union key may cover it any more
            if reply[0] != 200:
                return reply, prefix, "upstream"
            self.granted_again(prefix, "read")
            config = credential_config(reply[1], prefix)
            if config is None:
                msg = f"The catalog vended no storage credentials for {path} (table {table_path.rsplit('/', 1)[-1]})"
                return error_reply(403, "ForbiddenException", msg), prefix, "upstream"
            if mode == "write" and config.get(STORAGE_ACCESS) == READ_ONLY_ACCESS:
                return self._write_to_read_only(path, table_path), prefix, "upstream"
            return _answer(spelled(prefix), config), prefix, "table"
        return self._location_credentials(path, target, mode, min_valid, spelled)

    def _write_to_read_only(self, path: str, table_path: str) -> Reply:
        """``mode=write`` under a table whose credentials are read-only: never read-only keys for a write (the
        store would refuse it far away, mid-job). The catalog decides when it offers credentials by path
        (its 403 names the principal's grant; a grant given since the load gets write keys), else a 403 here."""
        prefix, endpoints = self._catalog()
        if prefix is not None and LOCATION_ROUTE in endpoints:
            return self._fetch_location(path, "write")
        parts = table_path.rstrip("/").split("/")
        table = ".".join([*unquote(parts[-3]).replace("\x1f", ".").split("."), unquote(parts[-1])])
        msg = (
            f"No write credentials for {path}: the catalog vends read-only credentials for table {table} to this "
            "session (TABLE_READ_DATA without TABLE_WRITE_DATA); writing needs TABLE_WRITE_DATA"
        )
        return error_reply(403, "ForbiddenException", msg)

    def _location_credentials(
        self, path: str, target: str, mode: str, min_valid: float, spelled: Callable[[str], str]
    ) -> tuple[Reply, str | None, str]:
        now = time.time()
        with self._lock:
            held = [h for (p, m), h in self._held.items() if target.startswith(p) and (m == mode or m == "write")]
        best = max(held, key=lambda h: h.remaining(now), default=None)
        if best is not None and best.usable(now, min_valid):
            if best.remaining(now) < 2 * required_life(best.expires_at - best.fetched_at, min_valid):
                self._refresh_ahead(best, min_valid)
            return _answer(spelled(best.prefix), best.config), best.prefix, "cache"
        # siblings asking at once share one upstream call, but a follower takes the shared answer only when it is
        # a grant whose prefix covers its own path; anything else (a 403 for another name, another prefix) was
        # not for it, and it asks on its own, keyed on its exact path (#40 B6: unrelated names under one parent)
        parent = best.prefix if best is not None else target.rsplit("/", 2)[0] + "/"
        reply, shared = self._flights.do((parent, mode), lambda: self._fetch_location(path, mode))
        if shared and not _covers(reply, target):
            reply, shared = self._flights.do((target, mode), lambda: self._fetch_location(path, mode))
        if reply[0] != 200:
            return reply, None, "upstream"
        doc = json.loads(reply[1])
        entry = doc["storage-credentials"][0]
        prefix = as_prefix(entry["prefix"])
        return _answer(spelled(prefix), entry["config"]), prefix, "shared" if shared else "upstream"

    def _refresh_ahead(self, held: Held, min_valid: float) -> None:
        key = (held.prefix, held.mode)
        with self._lock:
            if key in self._ahead:
                return
            self._ahead.add(key)

        def run() -> None:
            try:
                self._flights.do(key, lambda: self._fetch_location(held.prefix, held.mode))
            except Exception:  # a background refresh failing changes nothing: the next request retries
                logger.debug("refresh-ahead of %s failed", held.prefix, exc_info=True)
            finally:
                with self._lock:
                    self._ahead.discard(key)

        threading.Thread(target=run, name="lakesession-path-refresh", daemon=True).start()

    def _fetch_location(self, path: str, mode: str) -> Reply:
        """One upstream ``location-credentials`` call; a 200 is held per (prefix, mode), anything else drops it."""
        why = f"{path}: it is under no table this session loaded, and the catalog does not offer credentials for raw paths"
        status, body, headers = self._ask_catalog([path], mode, why)
        if status != 200:
            with self._lock:  # a revoked grant: never serve what was held for it
                for key in [k for k in self._held if as_prefix(path).startswith(k[0])]:
                    del self._held[key]
            if status == 403:
                self.revoked(path, mode)  # nor any bucket union covering it (#40 B3)
            return status, body, headers
        try:
            entry = json.loads(body)["storage-credentials"][0]
            config = {k: v for k, v in entry["config"].items() if isinstance(v, str)}
            got = as_prefix(entry["prefix"])
            expires = int(config["s3.session-token-expires-at-ms"]) / 1000
        except (ValueError, KeyError, IndexError, TypeError):
            return error_reply(502, "ServiceFailureException", f"The catalog's credentials for {path} were malformed")
        with self._lock:
            self._held[(got, mode)] = Held(got, mode, config, time.time(), expires)
        self.granted_again(got, mode)
        return 200, json.dumps({"storage-credentials": [{"prefix": got, "config": config}]}).encode(), headers

    def _ask_catalog(self, locations: list[str], mode: str, why: str) -> Reply:
        """One upstream ``location-credentials`` call for ``locations`` (one key for their union), or the 403
        saying ``why`` when the catalog's ``/v1/config`` does not advertise the route."""
        prefix, endpoints = self._catalog()
        if prefix is None or LOCATION_ROUTE not in endpoints:
            msg = f"No credentials for {why} ({LOCATION_ROUTE} is not in its /v1/config endpoints)"
            return error_reply(403, "ForbiddenException", msg)
        query = "&".join(f"location={quote(p, safe='')}" for p in locations) + f"&mode={mode}"
        self.upstream_fetches += 1
        return self.upstream.forward(
            "GET",
            f"/v1/{quote(prefix, safe='')}/lakesession/location-credentials",
            query,
            {"accept": "application/json"},
            b"",
        )

    def clear(self) -> None:
        with self._lock:
            self._held.clear()
            self._unions.clear()
            self._denied.clear()
            self._granted = None


def _params(query: str) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}


def _covers(reply: Reply, target: str) -> bool:
    """Whether ``reply`` is a grant for a prefix covering ``target`` (canonical, ends with '/')."""
    if reply[0] != 200:
        return False
    try:
        return target.startswith(as_prefix(json.loads(reply[1])["storage-credentials"][0]["prefix"]))
    except (ValueError, KeyError, IndexError, TypeError):
        return False


def _answer(prefix: str, config: dict[str, str]) -> Reply:
    config = {k: v for k, v in config.items() if k != "client.refresh-credentials-endpoint"}
    body = {"storage-credentials": [{"prefix": prefix, "config": config}]}
    return 200, json.dumps(body).encode(), dict(JSON)
